package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

const usd = store.NanosPerUSD

func fundedWorkspace(t *testing.T, s *Store, id string, balance int64) {
	t.Helper()
	ctx := context.Background()
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: id}); err != nil {
		t.Fatalf("CreateWorkspace: %v", err)
	}
	if balance != 0 {
		if _, err := s.AddCredits(ctx, id, balance, "funding"); err != nil {
			t.Fatalf("AddCredits: %v", err)
		}
	}
}

func wantBalance(t *testing.T, s *Store, ws string, balance, reserved int64) {
	t.Helper()
	b, err := s.GetBalance(context.Background(), ws)
	if err != nil {
		t.Fatalf("GetBalance: %v", err)
	}
	if b.BalanceNanos != balance || b.ReservedNanos != reserved {
		t.Fatalf("balance %d reserved %d, want %d and %d", b.BalanceNanos, b.ReservedNanos, balance, reserved)
	}
}

func hour() time.Time { return time.Now().Add(time.Hour) }

// plug holds the writer inside a batch of its own until release is called, so that the
// writes made meanwhile queue up and form the next batch together.
type plug struct {
	release func()
	done    chan error
}

func holdWriter(t *testing.T, s *Store) *plug {
	t.Helper()
	inside, release := make(chan struct{}), make(chan struct{})
	p := &plug{done: make(chan error, 1)}
	var once sync.Once
	p.release = func() { once.Do(func() { close(release) }) }
	t.Cleanup(p.release)
	go func() {
		p.done <- s.tx(context.Background(), func(context.Context, *sql.Tx) error {
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	return p
}

// waitQueued waits until n writes wait in the writer's queue.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.wr.queued() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued, want %d", s.wr.queued(), n)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestGroupCommitBatches runs 200 Settles at once: they must share far fewer than 200
// transactions, and every one must be charged and recorded.
func TestGroupCommitBatches(t *testing.T) {
	s := openTemp(t, filepath.Join(t.TempDir(), "gateway.db"))
	ctx := context.Background()
	const n = 200
	fundedWorkspace(t, s, "ws_1", 1000*usd)
	res := make([]string, n)
	for i := range res {
		r, err := s.Reserve(ctx, store.ReserveParams{WorkspaceID: "ws_1", AmountNanos: usd, ExpiresAt: hour()})
		if err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		res[i] = r.ID
	}

	commits, ops := s.wr.commits.Load(), s.wr.ops.Load()
	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := s.Settle(ctx, store.SettleParams{ReservationID: res[i], Generation: &store.Generation{
				ID: fmt.Sprintf("gen_%03d", i), WorkspaceID: "ws_1", CostNanos: usd / 2,
			}})
			errs <- err
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Settle: %v", err)
		}
	}
	gotCommits, gotOps := s.wr.commits.Load()-commits, s.wr.ops.Load()-ops
	t.Logf("%d Settles committed in %d transactions (%.1f a commit)", n, gotCommits, float64(gotOps)/float64(gotCommits))
	if gotOps != n {
		t.Errorf("%d writes applied, want %d", gotOps, n)
	}
	if gotCommits > n/4 {
		t.Errorf("%d Settles took %d commits, want far fewer (at most %d)", n, gotCommits, n/4)
	}
	wantBalance(t, s, "ws_1", 1000*usd-n*usd/2, 0)
	for i := range n {
		if g, err := s.GetGeneration(ctx, "ws_1", fmt.Sprintf("gen_%03d", i)); err != nil || g.CostNanos != usd/2 {
			t.Fatalf("generation %d: %+v, %v", i, g, err)
		}
	}
}

// TestBatchFailureIsolation lines up one batch of writes in which some fail: only those
// fail, with their own errors and without a trace, while the others apply in order, each
// seeing the ones before it.
func TestBatchFailureIsolation(t *testing.T) {
	s := openTemp(t, filepath.Join(t.TempDir(), "gateway.db"))
	ctx := context.Background()
	fundedWorkspace(t, s, "ws_1", 10*usd)
	if _, err := s.Settle(ctx, store.SettleParams{Generation: &store.Generation{ID: "gen_taken", WorkspaceID: "ws_1"}}); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	reserve := func(id string, amount int64) func() error {
		return func() error {
			_, err := s.Reserve(ctx, store.ReserveParams{ID: id, WorkspaceID: "ws_1", AmountNanos: amount, ExpiresAt: hour()})
			return err
		}
	}
	settle := func(res, gen string, cost int64) func() error {
		return func() error {
			_, err := s.Settle(ctx, store.SettleParams{ReservationID: res, Generation: &store.Generation{ID: gen, WorkspaceID: "ws_1", CostNanos: cost}})
			return err
		}
	}
	errPartial := errors.New("failed after writing")
	steps := []struct {
		name string
		call func() error
		want error // nil: must succeed
	}{
		{"reserve 4", reserve("res_a", 4*usd), nil},
		{"reserve 7 sees the 4 held", reserve("res_b", 7*usd), store.ErrInsufficientFunds},
		{"settle unknown reservation", settle("res_missing", "gen_x", usd), store.ErrNotFound},
		{"reserve an id taken in this batch", reserve("res_a", usd), store.ErrConflict},
		{"settle the reservation of this batch", settle("res_a", "gen_a", usd), nil},
		{"settle it again", settle("res_a", "gen_a2", usd), store.ErrNotFound},
		{"debit beyond balance", func() error { _, err := s.AddCredits(ctx, "ws_1", -100*usd, "refund"); return err }, store.ErrInsufficientFunds},
		{"reserve 5", reserve("res_c", 5*usd), nil},
		// Releases res_c and updates the wallet before its generation insert fails: the
		// savepoint must undo all of it.
		{"settle with a taken generation id", settle("res_c", "gen_taken", usd), store.ErrConflict},
		{"a write that fails after writing", func() error {
			return s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, `UPDATE wallets SET balance_nanos = 0 WHERE workspace_id = 'ws_1'`); err != nil {
					return err
				}
				return errPartial
			})
		}, errPartial},
		{"a write that panics", func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("%v", p)
				}
			}()
			return s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, `UPDATE wallets SET reserved_nanos = 0 WHERE workspace_id = 'ws_1'`); err != nil {
					return err
				}
				panic("boom")
			})
		}, errPanic},
		{"credit 1", func() error { _, err := s.AddCredits(ctx, "ws_1", usd, "grant"); return err }, nil},
	}

	commits, ops := s.wr.commits.Load(), s.wr.ops.Load()
	p := holdWriter(t, s)
	errs := make([]chan error, len(steps))
	for i, st := range steps {
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- st.call() }()
		// One at a time, so the batch holds them in this order.
		waitQueued(t, s, i+1)
	}
	p.release()
	if err := <-p.done; err != nil {
		t.Fatalf("plug: %v", err)
	}
	succeeded := 0
	for i, st := range steps {
		err := <-errs[i]
		switch {
		case st.want == nil && err != nil:
			t.Errorf("%s: %v, want success", st.name, err)
		case st.want == nil:
			succeeded++
		case st.want == errPanic:
			if err == nil || !strings.Contains(err.Error(), "boom") {
				t.Errorf("%s: got %v, want the panic re-raised in its caller", st.name, err)
			}
		case !errors.Is(err, st.want):
			t.Errorf("%s: error %v, want %v", st.name, err, st.want)
		}
	}
	if got := s.wr.commits.Load() - commits; got != 2 {
		t.Errorf("%d commits, want 2 (the plug's and the batch's)", got)
	}
	if got := s.wr.ops.Load() - ops; got != int64(succeeded)+1 {
		t.Errorf("%d writes applied, want %d", got, succeeded+1)
	}

	// 10 USD - 1 charged for gen_a + 1 credited; res_c (5 USD) still held.
	wantBalance(t, s, "ws_1", 10*usd, 5*usd)
	if _, err := s.GetGeneration(ctx, "ws_1", "gen_a"); err != nil {
		t.Errorf("gen_a: %v", err)
	}
	for _, id := range []string{"gen_x", "gen_a2"} {
		if _, err := s.GetGeneration(ctx, "ws_1", id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("generation %s of a failed Settle: %v, want ErrNotFound", id, err)
		}
	}
	var ledger int64
	if err := s.r.QueryRowContext(ctx, `SELECT SUM(amount_nanos) FROM ledger WHERE workspace_id = 'ws_1'`).Scan(&ledger); err != nil || ledger != 10*usd {
		t.Errorf("ledger sum %d, %v; want %d", ledger, err, 10*usd)
	}
	// The reservation the refused Settle started to release is held and still settles.
	if _, err := s.Settle(ctx, store.SettleParams{ReservationID: "res_c", Generation: &store.Generation{WorkspaceID: "ws_1", CostNanos: usd}}); err != nil {
		t.Fatalf("Settle res_c: %v", err)
	}
	wantBalance(t, s, "ws_1", 9*usd, 0)
}

var errPanic = errors.New("panic")

// TestWriteContext checks what a caller's context does to a queued write: one that ends
// before the write runs gets ctx.Err() and the write is never applied; once the write has
// run, it is committed with its batch and its caller gets its real result.
func TestWriteContext(t *testing.T) {
	s := openTemp(t, filepath.Join(t.TempDir(), "gateway.db"))
	ctx := context.Background()
	fundedWorkspace(t, s, "ws_1", 10*usd)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Reserve(cancelled, store.ReserveParams{WorkspaceID: "ws_1", AmountNanos: usd, ExpiresAt: hour()}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Reserve with a cancelled context: %v", err)
	}

	// Cancelled while it waits in the queue.
	p := holdWriter(t, s)
	queuedCtx, cancelQueued := context.WithCancel(ctx)
	defer cancelQueued()
	queuedErr := make(chan error, 1)
	go func() {
		_, err := s.Reserve(queuedCtx, store.ReserveParams{ID: "res_gone", WorkspaceID: "ws_1", AmountNanos: usd, ExpiresAt: hour()})
		queuedErr <- err
	}()
	waitQueued(t, s, 1)
	otherErr := make(chan error, 1)
	go func() {
		_, err := s.Reserve(ctx, store.ReserveParams{ID: "res_kept", WorkspaceID: "ws_1", AmountNanos: 2 * usd, ExpiresAt: hour()})
		otherErr <- err
	}()
	waitQueued(t, s, 2)
	cancelQueued()
	if err := <-queuedErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("Reserve cancelled in the queue: %v, want context.Canceled", err)
	}
	p.release()
	if err := <-otherErr; err != nil {
		t.Fatalf("Reserve queued with it: %v", err)
	}
	wantBalance(t, s, "ws_1", 10*usd, 2*usd)

	// Cancelled while it runs: it completes and commits.
	runningCtx, cancelRunning := context.WithCancel(ctx)
	defer cancelRunning()
	err := s.tx(runningCtx, func(ctx context.Context, tx *sql.Tx) error {
		cancelRunning()
		_, err := tx.ExecContext(ctx, `INSERT INTO workspaces (id, name, created_at) VALUES ('ws_late', '', 0)`)
		return err
	})
	if err != nil {
		t.Fatalf("write cancelled while running: %v, want its own result", err)
	}
	if _, err := s.GetWorkspace(ctx, "ws_late"); err != nil {
		t.Fatalf("the write cancelled while running was not committed: %v", err)
	}
}

// TestCloseDrains closes the store with writes queued: they are run and committed, later
// writes are refused, and the writer goroutine is gone.
func TestCloseDrains(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gateway.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	fundedWorkspace(t, s, "ws_1", 10*usd)
	p := holdWriter(t, s)
	const n = 5
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := s.AddCredits(ctx, "ws_1", usd, "late")
			errs <- err
		}()
	}
	waitQueued(t, s, n)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	// Close refuses new writes before it waits for the writer.
	deadline := time.Now().Add(10 * time.Second)
	for !s.wr.isClosed() {
		if time.Now().After(deadline) {
			t.Fatal("Close never refused writes")
		}
		time.Sleep(100 * time.Microsecond)
	}
	if _, err := s.AddCredits(ctx, "ws_1", usd, "too late"); !errors.Is(err, errClosed) {
		t.Fatalf("AddCredits after Close: %v, want errClosed", err)
	}
	p.release()
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("write queued before Close: %v", err)
		}
	}
	select {
	case <-s.wr.stopped:
	default:
		t.Fatal("the writer goroutine is still running after Close")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	s = openTemp(t, path)
	wantBalance(t, s, "ws_1", 10*usd+n*usd, 0)
}
