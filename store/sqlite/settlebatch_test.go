package sqlite

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// settleStep is one settlement of a script run twice: in one batch, and one call at a time.
type settleStep struct {
	lease       bool
	reservation string
	held        int64
	release     bool
	gen         store.Generation
}

func (st settleStep) call(ctx context.Context, s *Store) (store.Generation, error) {
	g := st.gen
	if st.lease {
		return s.SettleLease(ctx, store.SettleLeaseParams{ReservationID: st.reservation, HeldNanos: st.held, Release: st.release, Generation: &g})
	}
	return s.Settle(ctx, store.SettleParams{ReservationID: st.reservation, Generation: &g})
}

// settleScript builds a random mix of Settle and SettleLease over a few workspaces and
// reservations: reservations used up or missing, another workspace's reservation, a
// workspace without a wallet, costs above the balance, releases.
func settleScript(seed uint64, n int, dupID bool) []settleStep {
	rng := rand.New(rand.NewPCG(seed, 1))
	workspaces := []string{"ws_a", "ws_b", "ws_a", "ws_a", "ws_none"}
	reservations := []string{"", "", "res_a1", "res_a2", "res_a3", "res_b1", "res_b2", "res_missing"}
	steps := make([]settleStep, n)
	for i := range steps {
		st := settleStep{
			lease:       rng.IntN(3) > 0,
			reservation: reservations[rng.IntN(len(reservations))],
			held:        rng.Int64N(2 * usd),
			release:     rng.IntN(6) == 0,
		}
		ws := workspaces[rng.IntN(len(workspaces))]
		switch {
		case st.lease && st.reservation == "":
			st.reservation = "res_a1"
		case !st.lease && rng.IntN(4) > 0:
			// Settle is mostly for requests that reserved nothing or their own reservation.
			st.reservation = ""
		}
		// Mostly the reservation's own workspace, sometimes another.
		if strings.HasPrefix(st.reservation, "res_b") && rng.IntN(4) > 0 {
			ws = "ws_b"
		}
		st.gen = store.Generation{
			ID: fmt.Sprintf("gen_%03d", i), WorkspaceID: ws, KeyID: "key_" + ws, Endpoint: "/v1/chat/completions",
			Model: "m", Provider: "p", Status: 200, InputTokens: rng.Int64N(1000), OutputTokens: rng.Int64N(1000),
			CostNanos: rng.Int64N(usd), Streamed: rng.IntN(2) == 0,
			CostLines: []store.CostLine{{Dimension: "input", Quantity: 3, UnitPriceNanos: 2_000_000, Nanos: 7}},
			Attempts:  []store.Attempt{{Provider: "p", Status: 200}},
		}
		steps[i] = st
	}
	if dupID {
		// Two settlements that succeed on their own, with one generation id.
		for _, i := range []int{n / 4, n / 2} {
			steps[i].lease, steps[i].reservation, steps[i].gen.WorkspaceID = false, "", "ws_a"
		}
		steps[n/2].gen.ID = steps[n/4].gen.ID
	}
	return steps
}

// openScripted opens a store with the script's workspaces and reservations, identically
// every time (fixed clock, fixed ids).
func openScripted(t *testing.T) *Store {
	t.Helper()
	clock := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	// DurablePower: every settlement through the writer (the script does not keep the
	// lease promise journaled settlements rely on, see journal.go).
	s := openTemp(t, filepath.Join(t.TempDir(), "gateway.db"), WithClock(func() time.Time { return clock }), WithDurability(DurablePower))
	ctx := context.Background()
	fundedWorkspace(t, s, "ws_a", 9*usd)
	fundedWorkspace(t, s, "ws_b", usd/3)
	for _, r := range []struct {
		id, ws string
		amount int64
	}{{"res_a1", "ws_a", 3 * usd}, {"res_a2", "ws_a", usd}, {"res_a3", "ws_a", 2 * usd}, {"res_b1", "ws_b", usd / 10}, {"res_b2", "ws_b", usd / 5}} {
		if _, err := s.Reserve(ctx, store.ReserveParams{ID: r.id, WorkspaceID: r.ws, AmountNanos: r.amount, ExpiresAt: clock.Add(time.Hour)}); err != nil {
			t.Fatalf("Reserve %s: %v", r.id, err)
		}
	}
	return s
}

// dumpState reads every table a settlement writes, in a stable order.
func dumpState(t *testing.T, s *Store) []string {
	t.Helper()
	var out []string
	for _, q := range []string{
		`SELECT workspace_id, balance_nanos, reserved_nanos FROM wallets ORDER BY workspace_id`,
		`SELECT id, workspace_id, amount_nanos FROM reservations ORDER BY id`,
		`SELECT ` + store.GenerationColumns + ` FROM generations ORDER BY id`,
		`SELECT id, workspace_id, amount_nanos, kind, COALESCE(generation_id, ''), key_id, note, created_at FROM ledger ORDER BY id`,
	} {
		rows, err := s.r.Query(q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprint(vals...))
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

type settleOutcome struct {
	kind           string // "ok", or the store error it wraps
	cost, unbilled int64
	errText        string
}

func outcomeOf(g store.Generation, err error) settleOutcome {
	if err == nil {
		return settleOutcome{kind: "ok", cost: g.CostNanos, unbilled: g.UnbilledNanos}
	}
	for _, e := range []error{store.ErrNotFound, store.ErrConflict, store.ErrInsufficientFunds} {
		if errors.Is(err, e) {
			return settleOutcome{kind: e.Error(), errText: err.Error()}
		}
	}
	return settleOutcome{kind: "other", errText: err.Error()}
}

// TestSettleRunMatchesOneByOne runs random scripts of settlements once lined up in one
// batch (applied together) and once one call at a time: every call's result and every row
// of the database must be the same. A script with a duplicate generation id makes the run
// fall back to one write at a time, with the same results.
func TestSettleRunMatchesOneByOne(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		seed     uint64
		n        int
		dup      bool
		together bool
		unpaused bool
	}{{1, 40, false, true, false}, {2, 90, false, true, false}, {3, 7, false, true, false}, {4, 40, true, false, false}, {5, 200, false, true, false},
		// Without the writer's pauses: 64-row INSERTs.
		{2, 90, false, true, true}, {4, 40, true, false, true}, {5, 200, false, true, true}} {
		t.Run(fmt.Sprintf("seed%d_n%d_dup%v_unpaused%v", tc.seed, tc.n, tc.dup, tc.unpaused), func(t *testing.T) {
			steps := settleScript(tc.seed, tc.n, tc.dup)

			one := openScripted(t)
			want := make([]settleOutcome, len(steps))
			for i, st := range steps {
				want[i] = outcomeOf(st.call(ctx, one))
			}

			batched := openScripted(t)
			if tc.unpaused {
				batched.wr.raw.pause = nil
			}
			together, oneByOne := batched.wr.together.Load(), batched.wr.oneByOne.Load()
			p := holdWriter(t, batched)
			type result struct {
				g   store.Generation
				err error
			}
			results := make([]chan result, len(steps))
			for i, st := range steps {
				results[i] = make(chan result, 1)
				go func() {
					g, err := st.call(ctx, batched)
					results[i] <- result{g, err}
				}()
				waitQueued(t, batched, i+1)
			}
			p.release()
			if err := <-p.done; err != nil {
				t.Fatalf("plug: %v", err)
			}
			for i := range steps {
				r := <-results[i]
				if got := outcomeOf(r.g, r.err); got != want[i] {
					t.Errorf("step %d %+v:\n got %+v\nwant %+v", i, steps[i], got, want[i])
				}
			}
			gotTogether, gotOneByOne := batched.wr.together.Load()-together, batched.wr.oneByOne.Load()-oneByOne
			if tc.together && (gotTogether < 1 || gotOneByOne != 0) {
				t.Errorf("%d runs together, %d one by one; want the batch applied together", gotTogether, gotOneByOne)
			}
			if !tc.together && gotOneByOne < 1 {
				t.Errorf("%d runs one by one, want the duplicate id to make the run fall back", gotOneByOne)
			}
			if a, b := dumpState(t, one), dumpState(t, batched); !reflect.DeepEqual(a, b) {
				for i := range max(len(a), len(b)) {
					var x, y string
					if i < len(a) {
						x = a[i]
					}
					if i < len(b) {
						y = b[i]
					}
					if x != y {
						t.Errorf("row %d:\n one by one %s\n    batched %s", i, x, y)
					}
				}
			}
			oks := 0
			for _, w := range want {
				if w.kind == "ok" {
					oks++
				}
			}
			t.Logf("%d settlements, %d succeeded", len(steps), oks)
		})
	}
}

// TestRawStatementsFollowTheConnection: runs of settlements insert through statements
// prepared on the driver's connection (rawexec.go). They are prepared again on another
// connection, give the same rows, and are finalized when the store closes.
func TestRawStatementsFollowTheConnection(t *testing.T) {
	ctx := context.Background()
	steps := settleScript(7, 30, false)
	settleRun := func(s *Store, steps []settleStep) {
		t.Helper()
		together := s.wr.together.Load()
		p := holdWriter(t, s)
		errs := make(chan error, len(steps))
		for i, st := range steps {
			go func() { _, err := st.call(ctx, s); errs <- err }()
			waitQueued(t, s, i+1)
		}
		p.release()
		if err := <-p.done; err != nil {
			t.Fatalf("plug: %v", err)
		}
		for range steps {
			<-errs
		}
		if s.wr.together.Load() == together {
			t.Fatal("the settlements were not applied together")
		}
	}

	s := openScripted(t)
	settleRun(s, steps[:15])
	prepared := len(s.wr.raw.stmts)
	if prepared == 0 || s.wr.raw.owner == nil {
		t.Fatalf("%d statements prepared on %v, want the INSERTs", prepared, s.wr.raw.owner)
	}
	// As if database/sql had replaced the connection: the statements belong to the old one.
	s.wr.mu.Lock()
	s.wr.raw.owner = "a connection since closed"
	s.wr.mu.Unlock()
	settleRun(s, steps[15:])
	if s.wr.raw.owner == "a connection since closed" || len(s.wr.raw.stmts) == 0 {
		t.Fatalf("statements not prepared again on the new connection (owner %v)", s.wr.raw.owner)
	}

	// The same rows as one call at a time.
	one := openScripted(t)
	for _, st := range steps {
		_, _ = st.call(ctx, one)
	}
	if a, b := dumpState(t, one), dumpState(t, s); !reflect.DeepEqual(a, b) {
		t.Fatalf("state differs:\n one by one %v\n    batched %v", a, b)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(s.wr.raw.stmts); n != 0 {
		t.Fatalf("%d statements left unfinalized after Close", n)
	}
}

// TestWriterPausesBetweenStatements: a transaction of settlements runs as statements of at
// most pausedRows rows with a pause after each, and other goroutines read the store during
// the pauses (they see it as it was before the transaction, which commits whole).
func TestWriterPausesBetweenStatements(t *testing.T) {
	ctx := context.Background()
	s := openScripted(t)
	before, err := s.GetBalance(ctx, "ws_a")
	if err != nil {
		t.Fatal(err)
	}
	pauses := 0
	s.wr.raw.pause = func() {
		pauses++
		if pauses == 3 {
			// A reader mid-transaction: it is not blocked, and sees nothing of it yet.
			var n int
			if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM generations`).Scan(&n); err != nil || n != 0 {
				t.Errorf("reader during a pause: %d generations, %v; want 0 and no error", n, err)
			}
		}
	}
	const n = 100
	batch := make([]*writeOp, n)
	now := time.Now()
	for i := range batch {
		g := &store.Generation{ID: fmt.Sprintf("gen_%03d", i), WorkspaceID: "ws_a", KeyID: "key_a", Endpoint: "/v1/chat/completions",
			Model: "m", Provider: "p", UpstreamModel: "m", Status: 200, CostNanos: 10, CreatedAt: now}
		req := &settleReq{g: g, cost: 10, now: now}
		batch[i] = &writeOp{ctx: ctx, settle: req, fn: req.apply, done: make(chan struct{})}
	}
	if !s.commitBatch(batch) {
		t.Fatal("the transaction failed")
	}
	for _, o := range batch {
		if o.err != nil {
			t.Fatal(o.err)
		}
	}
	// 100 rows in INSERTs of at most 16: 7 for the generations and 7 for the charges, a pause
	// after each and one after the run.
	if want := 2*((n+pausedRows-1)/pausedRows) + 1; pauses != want {
		t.Errorf("%d pauses, want %d", pauses, want)
	}
	after, err := s.GetBalance(ctx, "ws_a")
	if err != nil {
		t.Fatal(err)
	}
	if got := before.BalanceNanos - after.BalanceNanos; got != n*10 {
		t.Errorf("charged %d, want %d", got, n*10)
	}
}

// TestPauseYieldsToWaitingGoroutines: the writer's pause lets a goroutine that waits for the
// only processor run. Within three pauses: one yield in 61 resumes the yielding goroutine
// first (the scheduler then serves its global queue before the local one), and other
// goroutines of the test binary may be waiting too; without the yield, only a preemption,
// 10 ms away, would run it.
func TestPauseYieldsToWaitingGoroutines(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	pause := newPause()
	for range 20 {
		var ran atomic.Bool
		go ran.Store(true)
		for range 3 {
			if pause(); ran.Load() {
				break
			}
		}
		if !ran.Load() {
			t.Fatal("a runnable goroutine did not run during the pause")
		}
	}
}
