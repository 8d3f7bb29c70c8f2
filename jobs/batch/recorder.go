package batch

import (
	"context"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/internal/background"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// maxGatheredRows bounds the rows one write records, and the rows answered waiting for it.
const maxGatheredRows = 256

// rowRecorder records the rows of a chunk as they are answered, gathered: the rows
// answered while one write is under way go in the next (store.RecordBatchRows), so that a
// row's place is free for the next row as soon as it is answered, and the store writes
// once for many rows rather than once a row. A row is acknowledged, never to run again,
// once its write returned; a row whose write failed is run again with its chunk (close
// says so), charged once under its generation id.
type rowRecorder struct {
	rows chan store.BatchRow
	done chan struct{}
	// err is the first failed write's, read after done closed.
	err error
}

// startRowRecorder starts the recorder's writer, which writes until close, without ctx's
// cancellation: rows answered (and charged) before a shutdown are recorded all the same.
func startRowRecorder(ctx context.Context, s store.Store, log *zap.Logger) *rowRecorder {
	rec := &rowRecorder{rows: make(chan store.BatchRow, maxGatheredRows), done: make(chan struct{})}
	wctx := context.WithoutCancel(ctx)
	go func() {
		defer close(rec.done)
		if p := background.Call("recording batch rows", func() { rec.write(wctx, s, log) }); p != nil {
			rec.fail(p)
			for range rec.rows {
				// Drained, so that no row's add blocks: the chunk runs them again.
			}
		}
	}()
	return rec
}

func (rec *rowRecorder) fail(err error) {
	if rec.err == nil {
		rec.err = err
	}
}

func (rec *rowRecorder) write(ctx context.Context, s store.Store, log *zap.Logger) {
	gathered := make([]store.BatchRow, 0, maxGatheredRows)
	for row := range rec.rows {
		gathered = append(gathered[:0], row)
	gather:
		for len(gathered) < maxGatheredRows {
			select {
			case more, ok := <-rec.rows:
				if !ok {
					break gather
				}
				gathered = append(gathered, more)
			default:
				break gather
			}
		}
		if _, err := s.RecordBatchRows(ctx, gathered); err != nil {
			log.Warn("recording batch rows failed; they run again with their chunk (charged once)",
				zap.Int("rows", len(gathered)), zap.Error(err))
			rec.fail(err)
		}
	}
}

// add hands an answered row to the recorder.
func (rec *rowRecorder) add(row store.BatchRow) { rec.rows <- row }

// close waits for every row added to be written, and returns the first write's error.
func (rec *rowRecorder) close() error {
	close(rec.rows)
	<-rec.done
	return rec.err
}
