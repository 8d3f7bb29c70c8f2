package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// BatchRows is the store's role for the outcomes of the rows of gateway-run batches: one
// record per row of a batch, written once by whichever instance ran the row, so that a row
// whose outcome is recorded is never run again (a chunk claimed anew after a crash skips
// it) and is counted once, however many instances share the batch. The batch's job reads
// the counts for its progress and, at its end, streams the rows in index order into its
// output and error files.
type BatchRows interface {
	// RecordBatchRow stores the outcome of row r.Index of batch r.BatchID, once: a row
	// already recorded is left as the first record made it, and false is returned.
	RecordBatchRow(ctx context.Context, r BatchRow) (bool, error)
	// RecordBatchRows stores the outcomes of rows in one write, as RecordBatchRow of each
	// in order would (a row already recorded, before or earlier in rows, is left as the
	// first record made it), and returns how many were recorded anew. It records all of
	// them or, with an error, none: a row given is recorded once the call returns nil.
	RecordBatchRows(ctx context.Context, rows []BatchRow) (int, error)
	// BatchRowsDone returns, in order, the indexes in [from, to) of batch's recorded rows.
	BatchRowsDone(ctx context.Context, batchID string, from, to int) ([]int, error)
	// CountBatchRows counts the recorded rows of batch and sums their costs. It reads the
	// batch's counts, kept beside its rows by the database (triggers: every writer of the
	// rows, whatever the gateway's version, keeps them in a rolling upgrade), not the
	// rows: the batch's job reads them every second while it runs, whatever its size.
	CountBatchRows(ctx context.Context, batchID string) (BatchRowCounts, error)
	// ListBatchRows returns up to limit (at most MaxBatchRowPage) recorded rows of batch
	// whose index is above after (-1: from the first), in index order.
	ListBatchRows(ctx context.Context, batchID string, after, limit int) ([]BatchRow, error)
	// DeleteBatchRows removes every recorded row of batch (its output file written), its
	// counts and its cancellation; a batch with none is not an error. It removes the rows
	// a page at a time, each page in a write of its own (its rows come off the counts),
	// so that no write holds the store long however large the batch; an error leaves the
	// rest, and the counts of what is left, for a call again.
	DeleteBatchRows(ctx context.Context, batchID string) error
	// EndedBatchesWithRows returns the ids of up to limit (at most MaxBatchRowPage)
	// batches whose job ended (its CompletedAt) before endedBefore and that still have
	// recorded rows or a cancellation, those that ended first first.
	EndedBatchesWithRows(ctx context.Context, endedBefore time.Time, limit int) ([]string, error)
	// RequestBatchCancel records that batch's owner asked to cancel it, and returns when
	// that was first asked: asking again changes nothing. Only the batch's job changes the
	// job (its poll), so the request waits here for it and for the row workers.
	RequestBatchCancel(ctx context.Context, batchID string) (time.Time, error)
	// BatchCancelRequested returns when batch's cancellation was asked; zero when never.
	BatchCancelRequested(ctx context.Context, batchID string) (time.Time, error)
}

// MaxBatchRowPage is the most rows one ListBatchRows returns, and the most batches one
// EndedBatchesWithRows does.
const MaxBatchRowPage = 500

// BatchRowDeletePage is how many rows of a batch one write of DeleteBatchRows removes: on
// SQLite, whose one writer every other write waits for, 200 rows hold it about 0.4 ms
// (1,000 rows 1.8 ms; the 50,000 rows of a batch take 90 ms whatever the page,
// BenchmarkDeleteBatchRows).
const BatchRowDeletePage = 200

// BatchRow is the outcome of one row of a batch: the answer's status and body (a chat
// completion, an error object), or, with StatusCode 0, why the row could not be run at
// all.
type BatchRow struct {
	BatchID string
	// Index is the row's place among the batch file's requests, from 0.
	Index    int
	CustomID string
	// StatusCode is the answer's HTTP status; 0 for a row that got none.
	StatusCode int
	// RequestID is the row's generation id, which names its charge.
	RequestID string
	// Body is the answer's JSON; nil for none.
	Body json.RawMessage
	// ErrorCode and ErrorMessage say why a row without an answer failed.
	ErrorCode, ErrorMessage string
	// CostNanos is what the row was charged.
	CostNanos int64
	CreatedAt time.Time
}

// Succeeded tells whether the row was answered with a 2xx: it goes to the output file,
// every other to the error file.
func (r BatchRow) Succeeded() bool { return r.StatusCode >= 200 && r.StatusCode < 300 }

// BatchRowCounts sums up a batch's recorded rows.
type BatchRowCounts struct {
	// Done counts the recorded rows, Completed those answered with a 2xx, Failed the others.
	Done, Completed, Failed int
	CostNanos               int64
}

// PrepareBatchRow checks a row given to RecordBatchRow and stamps its creation time (now
// when zero) at the store's precision.
func PrepareBatchRow(r BatchRow, now func() time.Time) (BatchRow, error) {
	switch {
	case r.BatchID == "":
		return r, errors.New("batch row: empty batch id")
	case r.Index < 0:
		return r, fmt.Errorf("batch row %d of %q: negative index", r.Index, r.BatchID)
	case r.CostNanos < 0:
		return r, fmt.Errorf("batch row %d of %q: negative cost", r.Index, r.BatchID)
	case r.Body != nil && !json.Valid(r.Body):
		return r, fmt.Errorf("batch row %d of %q: body is not JSON", r.Index, r.BatchID)
	}
	r.CreatedAt = Stamp(r.CreatedAt, now)
	return r, nil
}

// ClampBatchRowPage bounds the limit of ListBatchRows to 1..MaxBatchRowPage.
func ClampBatchRowPage(limit int) int { return min(max(limit, 1), MaxBatchRowPage) }
