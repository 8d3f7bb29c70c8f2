package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/billing"
	"github.com/modelgateway/caddy-modelgateway/blobs"
	"github.com/modelgateway/caddy-modelgateway/files"
	"github.com/modelgateway/caddy-modelgateway/jobs"
	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/sqlite"
)

// failingRows fails the first RecordBatchRows, after which it records as the store does.
type failingRows struct {
	store.Store
	failed atomic.Bool
	rows   atomic.Int64
}

func (f *failingRows) RecordBatchRows(ctx context.Context, rows []store.BatchRow) (int, error) {
	if f.failed.CompareAndSwap(false, true) {
		return 0, errors.New("disk full")
	}
	f.rows.Add(int64(len(rows)))
	return f.Store.RecordBatchRows(ctx, rows)
}

type runnerFixture struct {
	s    store.Store
	b    blobs.Store
	j    store.Job
	spec Spec
	mu   sync.Mutex
	sent map[int]int
	// dispatchFn, when set, is the Runner's Dispatch instead of dispatch.
	dispatchFn Dispatch
}

// newRunnerFixture stores a running gateway-run batch of n rows in chunks of per, its
// poll due in an hour, and queues its chunks.
func newRunnerFixture(t *testing.T, n, per int, wrap func(store.Store) store.Store) *runnerFixture {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	raw, err := sqlite.Open(ctx, filepath.Join(dir, "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	s := wrap(raw)
	b, err := blobs.NewFS(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	const ws = "ws_runner"
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: ws, Name: "runner"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, files.BlobKey(ws, "file-in"), bytes.NewReader(rowsFile(n)), -1, ""); err != nil {
		t.Fatal(err)
	}
	spec := Spec{Endpoint: "/v1/chat/completions", InputFileID: "file-in", CompletionWindow: "24h", Rows: n, ChunkRows: per,
		Deadline: time.Now().Add(time.Hour)}
	req, _ := json.Marshal(spec)
	state, _ := json.Marshal(State{Chunked: true, Total: n})
	j := store.Job{ID: "batch_runner", WorkspaceID: ws, Kind: store.JobBatch, KeyID: "key_runner", Model: "m", Provider: "up",
		UpstreamModel: "m", Status: StatusInProgress, Request: req, Result: state, CreatedAt: time.Now(), ExpiresAt: JobExpiry(spec.Deadline)}
	if err := s.CreateJob(ctx, j, time.Now().Add(time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	if err := enqueueChunks(ctx, s, b, j, spec); err != nil {
		t.Fatal(err)
	}
	return &runnerFixture{s: s, b: b, j: j, spec: spec, sent: map[int]int{}}
}

// dispatch answers a row with its index, counting the rows sent.
func (f *runnerFixture) dispatch(_ context.Context, _, _ string, _ billing.Admission, genID, _ string, body []byte) (int, []byte, error) {
	var i int
	if _, err := fmt.Sscanf(genID, "gen_batch_runner_%d", &i); err != nil {
		return 0, nil, err
	}
	f.mu.Lock()
	f.sent[i]++
	f.mu.Unlock()
	return 200, []byte(fmt.Sprintf(`{"row":%d}`, i)), nil
}

// run runs a Runner until the batch's rows are recorded and its poll was made due (the
// batch's last chunk ended), and returns how often the engine was woken.
func (f *runnerFixture) run(t *testing.T, idle time.Duration) int64 {
	t.Helper()
	var woken atomic.Int64
	ledger := billing.NewLedger(&billing.Config{Store: f.s, Logger: zap.NewNop(), Now: time.Now, ReservationTTL: time.Hour,
		StoreTimeout: 2 * time.Second, SettleTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = ledger.Close() })
	r := &Runner{
		Store: f.s, Ledger: ledger, Logger: zap.NewNop(), Owner: "test", Idle: idle, BatchChunks: 2, Chunks: 2,
		Blobs: func() blobs.Store { return f.b },
		Dispatch: func() Dispatch {
			if f.dispatchFn != nil {
				return f.dispatchFn
			}
			return f.dispatch
		},
		WakeJobs: func() { woken.Add(1) },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		items, err := f.s.Claim(context.Background(), store.ClaimParams{Queue: store.JobQueue(store.JobBatch), Owner: "t", Lease: time.Minute, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(items) == 1 {
			break
		}
		if time.Now().After(deadline) {
			counts, _ := f.s.CountBatchRows(context.Background(), f.j.ID)
			t.Fatalf("the batch's poll was not made due (an hour away) after its rows ran: %+v recorded", counts)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return woken.Load()
}

// checkRows checks every row is recorded once with its own answer.
func (f *runnerFixture) checkRows(t *testing.T) {
	t.Helper()
	rows, err := f.s.ListBatchRows(context.Background(), f.j.ID, -1, store.MaxBatchRowPage)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != f.spec.Rows {
		t.Fatalf("%d rows recorded, want %d", len(rows), f.spec.Rows)
	}
	for i, r := range rows {
		if r.Index != i || r.CustomID != fmt.Sprintf("r%d", i) || string(r.Body) != fmt.Sprintf(`{"row":%d}`, i) || r.RequestID != RowGenerationID(f.j.ID, i) {
			t.Fatalf("row %d recorded as %+v", i, r)
		}
	}
}

// TestRunnerRecordsRowsAndPollsTheDoneBatch: the Runner runs every row once, records each
// once (gathered), and when the last one is recorded makes the batch's poll, due in an
// hour, due now and wakes the engine.
func TestRunnerRecordsRowsAndPollsTheDoneBatch(t *testing.T) {
	f := newRunnerFixture(t, 40, 4, func(s store.Store) store.Store { return s })
	if woken := f.run(t, time.Hour); woken == 0 {
		t.Fatal("the engine was not woken for the done batch")
	}
	f.checkRows(t)
	for i := range f.spec.Rows {
		if f.sent[i] != 1 {
			t.Fatalf("row %d was sent %d times", i, f.sent[i])
		}
	}
}

// TestRunnerRunsAgainRowsWhoseRecordFailed: a gathered write that fails leaves its rows
// unrecorded, and the chunk is run again: every row ends recorded once, and the rows run
// again are only those the failed write held.
func TestRunnerRunsAgainRowsWhoseRecordFailed(t *testing.T) {
	var fr *failingRows
	f := newRunnerFixture(t, 24, 8, func(s store.Store) store.Store { fr = &failingRows{Store: s}; return fr })
	f.run(t, 20*time.Millisecond)
	f.checkRows(t)
	again := 0
	for i := range f.spec.Rows {
		switch f.sent[i] {
		case 1:
		case 2:
			again++
		default:
			t.Fatalf("row %d was sent %d times", i, f.sent[i])
		}
	}
	if again == 0 {
		t.Fatal("no row was run again after its record failed")
	}
	if int(fr.rows.Load()) != f.spec.Rows {
		t.Fatalf("the writes that succeeded held %d rows, want each of %d once", fr.rows.Load(), f.spec.Rows)
	}
}

// TestPollQueueingChunksWakesRunners: the poll that queues a batch's chunks wakes the
// process's Runners.
func TestPollQueueingChunksWakesRunners(t *testing.T) {
	f := newRunnerFixture(t, 3, 2, func(s store.Store) store.Store { return s })
	j := f.j
	j.ID, j.Status, j.Result = "batch_validating", StatusValidating, nil
	woken := chunksQueued.Wait()
	rep, err := (&Kind{}).Poll(context.Background(), jobs.Env{Store: f.s, Blobs: f.b}, j)
	if err != nil || rep.Status != StatusInProgress {
		t.Fatalf("the validating poll: %+v, %v", rep, err)
	}
	select {
	case <-woken:
	default:
		t.Fatal("queueing the chunks woke no Runner")
	}
}

// panickyDispatch panics on the first run of one row, then answers as f does.
type panickyDispatch struct {
	f     *runnerFixture
	row   int
	fired atomic.Bool
}

func (p *panickyDispatch) dispatch(ctx context.Context, ws, key string, adm billing.Admission, genID, path string, body []byte) (int, []byte, error) {
	if genID == RowGenerationID(p.f.j.ID, p.row) && p.fired.CompareAndSwap(false, true) {
		panic("a bug in a row")
	}
	return p.f.dispatch(ctx, ws, key, adm, genID, path, body)
}

// TestRunnerRunsAgainARowThatPanicked: a row whose run panicked is not recorded, and its
// chunk is not completed without it: the chunk runs again and the batch ends with every
// row recorded.
func TestRunnerRunsAgainARowThatPanicked(t *testing.T) {
	f := newRunnerFixture(t, 12, 4, func(s store.Store) store.Store { return s })
	p := &panickyDispatch{f: f, row: 5}
	f.dispatchFn = p.dispatch
	f.run(t, 20*time.Millisecond)
	if !p.fired.Load() {
		t.Fatal("the row did not panic")
	}
	f.checkRows(t)
}
