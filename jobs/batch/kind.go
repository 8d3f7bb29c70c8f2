package batch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/modelgateway/caddy-modelgateway/blobs"
	"github.com/modelgateway/caddy-modelgateway/files"
	"github.com/modelgateway/caddy-modelgateway/jobs"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Pacing of a batch's polls.
const (
	// runningPace is how often a running batch's counts are read.
	runningPace = time.Second
	// DefaultDrain is how long a stopping batch (cancelled, expired) waits with no row
	// recorded before it ends, so that the rows in flight when it stopped are in its files.
	DefaultDrain = 2 * time.Second
	// filesTimeout bounds a poll that scans the input file or writes the batch's files.
	filesTimeout = 10 * time.Minute
	// expiryGrace is how long after its window a batch's job lives: the window's end is
	// the batch's (it expires with its partial results), the job's expiry only the
	// engine's last resort.
	expiryGrace = time.Hour
)

// JobExpiry is the expiry of the job of a batch whose window ends at deadline.
func JobExpiry(deadline time.Time) time.Time { return deadline.Add(expiryGrace) }

// Kind is the batch family's jobs.Kind, registered under store.JobBatch.
type Kind struct {
	// drain and nativePace are SetPaces', read by every poll.
	drain, nativePace atomic.Int64
}

// SetPaces sets how long a stopping batch drains and how often a native batch's upstream
// is polled; zero takes DefaultDrain and DefaultNativePace.
func (k *Kind) SetPaces(drain, nativePace time.Duration) {
	k.drain.Store(int64(drain))
	k.nativePace.Store(int64(nativePace))
}

// Kind is a jobs.StatusKind, a jobs.PiecewiseKind and a jobs.LongPoller.
var (
	_ jobs.StatusKind    = (*Kind)(nil)
	_ jobs.PiecewiseKind = (*Kind)(nil)
	_ jobs.LongPoller    = (*Kind)(nil)
)

// Registered is the kind the engine polls batches with (tests shorten its paces before
// any batch runs).
var Registered = &Kind{}

func init() { jobs.Register(store.JobBatch, Registered) }

// LiveStatuses are a batch's live statuses beside in_progress.
func (*Kind) LiveStatuses() []string {
	return []string{StatusValidating, StatusFinalizing, StatusCancelling}
}

// SettlesPiecewise: each row of a batch settles against its reservation as it is answered.
func (*Kind) SettlesPiecewise() {}

// PollTimeout bounds the polls that read the whole input file or write the batch's files.
func (*Kind) PollTimeout(j store.Job) time.Duration {
	switch j.Status {
	case StatusValidating, StatusFinalizing, StatusCancelling:
		return filesTimeout
	}
	if StateOf(j).Ending != "" {
		return filesTimeout
	}
	spec, err := SpecOf(j)
	if err == nil && spec.Native && !StateOf(j).GatewayRun {
		// A native batch's end streams its results into its files.
		return filesTimeout
	}
	return 0
}

func (k *Kind) drainTime() time.Duration {
	if d := time.Duration(k.drain.Load()); d > 0 {
		return d
	}
	return DefaultDrain
}

// Poll moves batch j on: see the package documentation.
func (k *Kind) Poll(ctx context.Context, env jobs.Env, j store.Job) (jobs.Report, error) {
	spec, err := SpecOf(j)
	if err != nil {
		return jobs.Report{}, &jobs.Failure{Code: "batch_unreadable", Message: err.Error()}
	}
	if env.Store == nil {
		return jobs.Report{}, errors.New("the batch's poll has no store")
	}
	st := StateOf(j)
	if spec.Native && !st.GatewayRun {
		return k.pollNative(ctx, env, j, spec, st)
	}
	return k.pollRows(ctx, env, j, spec, st)
}

// pollRows moves a gateway-run batch on.
func (k *Kind) pollRows(ctx context.Context, env jobs.Env, j store.Job, spec Spec, st State) (jobs.Report, error) {
	s, now := env.Store, time.Now()
	cancelAt, err := s.BatchCancelRequested(ctx, j.ID)
	if err != nil {
		return jobs.Report{}, err
	}
	switch j.Status {
	case StatusValidating, jobs.StatusQueued:
		if !cancelAt.IsZero() {
			st.CancellingAt = unix(cancelAt)
			return k.finish(ctx, env, j, st, StatusCancelled)
		}
		if err := enqueueChunks(ctx, s, env.Blobs, j, spec); err != nil {
			if le, ok := errors.AsType[*files.LineError](err); ok {
				return jobs.Report{}, &jobs.Failure{Code: "invalid_input_file", Message: le.Error()}
			}
			if errors.Is(err, blobs.ErrNotFound) {
				return jobs.Report{}, &jobs.Failure{Code: "input_file_not_found", Message: "the batch's input file is gone"}
			}
			return jobs.Report{}, err
		}
		chunksQueued.Wake()
		st.Chunked, st.InProgressAt, st.Total = true, unix(now), spec.Rows
		return report(StatusInProgress, 0, runningPace, st), nil
	case StatusFinalizing:
		return k.finish(ctx, env, j, st, StatusCompleted)
	}
	counts, err := s.CountBatchRows(ctx, j.ID)
	if err != nil {
		return jobs.Report{}, err
	}
	st.count(counts, spec.Rows)
	if st.Ending == "" && counts.Done < spec.Rows {
		switch {
		case !cancelAt.IsZero():
			st.Ending, st.CancellingAt, st.DoneAtLastPoll = StatusCancelled, unix(cancelAt), counts.Done
			return report(StatusCancelling, j.Progress, k.drainTime(), st), nil
		case !now.Before(spec.Deadline):
			// The row workers stop taking its rows as they do for a cancellation.
			if _, err := s.RequestBatchCancel(ctx, j.ID); err != nil {
				return jobs.Report{}, err
			}
			st.Ending, st.DoneAtLastPoll = StatusExpired, counts.Done
			return report(j.Status, j.Progress, k.drainTime(), st), nil
		}
	}
	if st.Ending != "" {
		if counts.Done != st.DoneAtLastPoll && counts.Done < spec.Rows {
			// Rows in flight when it stopped are still being recorded.
			st.DoneAtLastPoll = counts.Done
			return report(j.Status, j.Progress, k.drainTime(), st), nil
		}
		return k.finish(ctx, env, j, st, st.Ending)
	}
	if counts.Done >= spec.Rows {
		st.FinalizingAt = unix(now)
		// Writing the files is the gateway's own work: at once, not after the pace that
		// spares upstreams.
		rep := report(StatusFinalizing, 100, 0, st)
		rep.PollNow = true
		return rep, nil
	}
	return report(StatusInProgress, progress(counts.Done, spec.Rows), runningPace, st), nil
}

// count sets the request counts of the state from the rows recorded.
func (st *State) count(c store.BatchRowCounts, total int) {
	st.Total, st.Completed, st.Failed, st.CostNanos = total, c.Completed, c.Failed, c.CostNanos
}

// progress is the share of rows done, in steps of 10%: the job's progress changes, and
// its progress event is sent, at most once a step.
func progress(done, total int) int {
	if total <= 0 {
		return 0
	}
	return done * 10 / total * 10
}

// report is a poll's report of status, with the state as the job's result.
func report(status string, progress int, after time.Duration, st State) jobs.Report {
	res, _ := json.Marshal(st) // plain fields
	return jobs.Report{Status: status, Progress: progress, PollAfter: after, Result: res}
}

// finish writes the batch's files from the rows recorded and ends it as status.
func (k *Kind) finish(ctx context.Context, env jobs.Env, j store.Job, st State, status string) (jobs.Report, error) {
	s, now := env.Store, time.Now()
	counts, err := s.CountBatchRows(ctx, j.ID)
	if err != nil {
		return jobs.Report{}, err
	}
	spec, _ := SpecOf(j) // read by Poll
	ran := counts.Done
	if (status == StatusCancelled || status == StatusExpired) && counts.Done < spec.Rows {
		// Every row is accounted for in the files, as in OpenAI's: the rows never run are
		// failed rows of the batch's end, a native batch's too (OpenAI's output and error
		// files of a cancelled batch leave them out).
		if err := recordUnrun(ctx, s, env.Blobs, j, spec, status); err != nil {
			return jobs.Report{}, err
		}
		if counts, err = s.CountBatchRows(ctx, j.ID); err != nil {
			return jobs.Report{}, err
		}
	}
	st.count(counts, spec.Rows)
	if counts.Done > 0 {
		if st.OutputFileID, st.ErrorFileID, err = writeFiles(ctx, s, env.Blobs, j, counts); err != nil {
			return jobs.Report{}, err
		}
	}
	switch status {
	case StatusCompleted:
		st.CompletedAt = unix(now)
	case StatusCancelled:
		st.CancelledAt = unix(now)
	case StatusExpired:
		st.ExpiredAt = unix(now)
	case StatusFailed:
		st.FailedAt = unix(now)
	}
	st.Ending = ""
	rep := report(status, progress(counts.Done, spec.Rows), 0, st)
	if status == StatusExpired {
		rep.ErrorCode, rep.ErrorMessage = "batch_expired", fmt.Sprintf("the batch did not finish within its %s window: %d of %d rows ran, and their results are kept", spec.CompletionWindow, ran, spec.Rows)
	}
	return rep, nil
}

// enqueueChunks queues the chunks of a gateway-run batch's rows, each with the offset its
// first line starts at, reading the input file once; a chunk queued before (a poll that
// died halfway) is left as it is. It only finds where the rows start: each row was checked
// when the file was stored, and is parsed when it runs.
func enqueueChunks(ctx context.Context, s store.Store, b blobs.Store, j store.Job, spec Spec) error {
	if b == nil {
		return errors.New("the gateway has no blob store to read the batch's input file from")
	}
	rc, _, err := b.Open(ctx, files.BlobKey(j.WorkspaceID, spec.InputFileID), 0, -1)
	if err != nil {
		return err
	}
	defer func() { _ = rc.Close() }()
	per := max(spec.ChunkRows, 1)
	err = scanLines(rc, 0, 0, func(index, _ int, offset int64, _ []byte) error {
		if index%per != 0 {
			return nil
		}
		n := index / per
		payload, _ := json.Marshal(Chunk{BatchID: j.ID, WorkspaceID: j.WorkspaceID, First: index,
			Count: min(per, spec.Rows-index), Offset: offset}) // plain fields
		err := s.Enqueue(ctx, store.EnqueueParams{Queue: RowQueue, ID: ChunkID(j.ID, n), Group: j.ID, Payload: payload})
		if err != nil && !errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("queueing chunk %d of batch %s: %w", n, j.ID, err)
		}
		if n == 0 {
			// The first rows run while the others are queued.
			chunksQueued.Wake()
		}
		return nil
	})
	return err
}

// recordUnrun records each row of a stopped batch that never ran as failed with the
// batch's end (batch_cancelled, batch_expired), charged nothing.
func recordUnrun(ctx context.Context, s store.Store, b blobs.Store, j store.Job, spec Spec, status string) error {
	done, err := s.BatchRowsDone(ctx, j.ID, 0, spec.Rows)
	if err != nil {
		return err
	}
	ran := make(map[int]bool, len(done))
	for _, i := range done {
		ran[i] = true
	}
	if b == nil {
		return errors.New("the gateway has no blob store to read the batch's input file from")
	}
	rc, _, err := b.Open(ctx, files.BlobKey(j.WorkspaceID, spec.InputFileID), 0, -1)
	if err != nil {
		return fmt.Errorf("reading the input file of batch %s: %w", j.ID, err)
	}
	defer func() { _ = rc.Close() }()
	code, msg := "batch_cancelled", "the batch was cancelled before this request ran"
	if status == StatusExpired {
		code, msg = "batch_expired", "the batch's completion window ended before this request ran"
	}
	// Gathered into writes of a page each: a batch stopped early has up to MaxBatchRows
	// rows never run, and a write of each would hold the store's writer that many times.
	page := make([]store.BatchRow, 0, store.MaxBatchRowPage)
	flush := func() error {
		if len(page) == 0 {
			return nil
		}
		_, err := s.RecordBatchRows(ctx, page)
		page = page[:0]
		return err
	}
	err = ScanRows(rc, 0, 0, func(i int, _ int64, l files.BatchLine) error {
		if ran[i] || i >= spec.Rows {
			return nil
		}
		page = append(page, store.BatchRow{BatchID: j.ID, Index: i, CustomID: l.CustomID, ErrorCode: code, ErrorMessage: msg})
		if len(page) == cap(page) {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}
