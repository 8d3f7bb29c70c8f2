package billing

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/sqlite"
)

const usd = store.NanosPerUSD

// fixture is a Ledger over a fresh SQLite store with one funded workspace and key.
type fixture struct {
	s      store.Store
	cfg    *Config
	lg     *Ledger
	ws, kd string
}

func newFixture(t *testing.T, balance int64) *fixture {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "billing.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	w := store.Workspace{ID: "ws_test", Name: "test"}
	if err := s.CreateWorkspace(ctx, w); err != nil {
		t.Fatal(err)
	}
	k := store.Key{ID: "key_test", WorkspaceID: w.ID, Kind: store.KeyStandard, Name: "k", SecretHash: make([]byte, 32), CreatedAt: time.Now()}
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddCredits(ctx, w.ID, balance, "test"); err != nil {
		t.Fatal(err)
	}
	cfg := &Config{Store: s, Logger: zap.NewNop(), Now: time.Now, ReservationTTL: time.Hour,
		StoreTimeout: 2 * time.Second, SettleTimeout: 5 * time.Second}
	lg := NewLedger(cfg)
	t.Cleanup(func() { _ = lg.Close() })
	return &fixture{s: s, cfg: cfg, lg: lg, ws: w.ID, kd: k.ID}
}

func (f *fixture) balance(t *testing.T) store.Balance {
	t.Helper()
	b, err := f.s.GetBalance(context.Background(), f.ws)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (f *fixture) gen(id string, cost int64) *store.Generation {
	return &store.Generation{ID: id, WorkspaceID: f.ws, KeyID: f.kd, Endpoint: "chat", Model: "m", Status: 200, CostNanos: cost, CreatedAt: time.Now()}
}

func (f *fixture) request(id string, most int64) Request {
	return Request{WorkspaceID: f.ws, KeyID: f.kd, Most: most, GenerationID: id, Endpoint: "chat", Model: "m", Start: time.Now()}
}

// Rows drawn from a batch budget: each holds its worst case on the one reservation, the
// reservation shrinks by exactly the rows' costs, a row beyond what is left is refused, a
// released row gives its worst case back, and nothing else is ever reserved.
func TestBatchBudget(t *testing.T) {
	f := newFixture(t, 100*usd)
	ctx := context.Background()
	b, err := f.lg.ReserveBatch(ctx, f.ws, f.kd, 3*usd, time.Now().Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	r1, err := b.Admit(ctx, f.request("gen_1", usd))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := b.Admit(ctx, f.request("gen_2", usd))
	if err != nil {
		t.Fatal(err)
	}
	r3, err := b.Admit(ctx, f.request("gen_3", usd))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Admit(ctx, f.request("gen_4", 1)); !errors.Is(err, ErrBudgetExhausted) || !errors.Is(err, store.ErrInsufficientFunds) {
		t.Fatalf("a row beyond the budget: %v", err)
	}
	if got := f.balance(t); got.ReservedNanos != 3*usd {
		t.Fatalf("held %d with three rows in flight, want the budget alone", got.ReservedNanos)
	}
	if _, err := r1.Settle(ctx, f.gen("gen_1", 200_000_000)); err != nil {
		t.Fatal(err)
	}
	// A settlement tried again answers the same, charging nothing more.
	again, err := r1.Settle(ctx, f.gen("gen_1", 200_000_000))
	if err != nil || again.CostNanos != 200_000_000 {
		t.Fatalf("settled again: %+v, %v", again, err)
	}
	if _, err := r2.Settle(ctx, f.gen("gen_2", 300_000_000)); err != nil {
		t.Fatal(err)
	}
	if err := r3.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got := f.balance(t)
	if got.BalanceNanos != 100*usd-500_000_000 || got.ReservedNanos != 3*usd-500_000_000 {
		t.Fatalf("after two rows of 0.2 and 0.3 USD: %+v", got)
	}
	if b.Charged() != 500_000_000 || b.Remaining() != 3*usd-500_000_000 {
		t.Fatalf("budget charged %d, remaining %d", b.Charged(), b.Remaining())
	}
	// The budget's rest admits rows again.
	if _, err := b.Admit(ctx, f.request("gen_5", 2*usd)); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.balance(t); got.ReservedNanos != 0 || got.BalanceNanos != 100*usd-500_000_000 {
		t.Fatalf("after the budget's release: %+v", got)
	}
}

// A batch budget admits only its own key's rows.
func TestBatchBudgetOtherKeyRefused(t *testing.T) {
	f := newFixture(t, 100*usd)
	ctx := context.Background()
	b, err := f.lg.ReserveBatch(ctx, f.ws, f.kd, usd, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	r := f.request("gen_x", 1)
	r.KeyID = "key_other"
	if _, err := b.Admit(ctx, r); err == nil {
		t.Fatal("another key's row was admitted")
	}
}

// A durable hold belongs to no instance: the death of the instance that took it does not
// free it; a worker that restarted re-opens it by its reservation id and settles it once.
func TestDurableHoldOutlivesItsInstance(t *testing.T) {
	f := newFixture(t, 100*usd)
	ctx := context.Background()
	inst := store.NewInstance(f.s, "inst-a", store.InstanceOptions{})
	if err := f.s.RegisterInstance(ctx, "inst-a"); err != nil {
		t.Fatal(err)
	}
	f.cfg.Owner = inst
	h, err := f.lg.Durable(time.Now().Add(48*time.Hour)).Admit(ctx, f.request("gen_job", 2*usd))
	if err != nil {
		t.Fatal(err)
	}
	// A call of the same instance with a reservation of its own, for contrast.
	own, err := f.lg.Reservation().Admit(ctx, f.request("gen_own", usd))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.balance(t); got.ReservedNanos != 3*usd {
		t.Fatalf("held %+v", got)
	}
	// The instance dies: another sweeps its reservations.
	if _, err := f.s.ReleaseOrphaned(ctx, "inst-b", -time.Second); err != nil {
		t.Fatal(err)
	}
	if got := f.balance(t); got.ReservedNanos != 2*usd {
		t.Fatalf("after the instance's death: %+v, want the durable hold alone", got)
	}
	if _, err := own.Settle(ctx, f.gen("gen_own", 1)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("settling a swept reservation: %v", err)
	}

	// A worker restarted re-opens the hold and settles the job.
	id := h.(*ReservationHold).ID()
	worker := newLedgerOver(f)
	resumed := worker.ResumeDurable(id, 2*usd)
	stored, err := resumed.Settle(ctx, f.gen("gen_job", 1_500_000_000))
	if err != nil || stored.CostNanos != 1_500_000_000 {
		t.Fatalf("settling the resumed hold: %+v, %v", stored, err)
	}
	// Settled again (the worker killed before it completed its claim): the same answer.
	again, err := resumed.Settle(ctx, f.gen("gen_job", 1_500_000_000))
	if err != nil || again.CostNanos != 1_500_000_000 {
		t.Fatalf("settled again: %+v, %v", again, err)
	}
	// Settled by yet another worker, restarted after the first settled: the same answer.
	third, err := newLedgerOver(f).ResumeDurable(id, 2*usd).Settle(ctx, f.gen("gen_job", 1_500_000_000))
	if err != nil || third.CostNanos != 1_500_000_000 {
		t.Fatalf("settled by another worker: %+v, %v", third, err)
	}
	if got := f.balance(t); got.ReservedNanos != 0 || got.BalanceNanos != 100*usd-1_500_000_000 {
		t.Fatalf("after the job's end: %+v", got)
	}
}

// A durable hold released by the job's end (cancelled, failed before any work) returns
// what it held; its expiry frees it when no job's end ever comes.
func TestDurableHoldReleasedOrExpired(t *testing.T) {
	f := newFixture(t, 100*usd)
	ctx := context.Background()
	h, err := f.lg.Durable(time.Now().Add(time.Hour)).Admit(ctx, f.request("gen_a", usd))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.balance(t); got.ReservedNanos != 0 || got.BalanceNanos != 100*usd {
		t.Fatalf("after the release: %+v", got)
	}
	if _, err := f.lg.Durable(time.Now().Add(time.Minute)).Admit(ctx, f.request("gen_b", usd)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.ReleaseExpired(ctx, time.Now().Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got := f.balance(t); got.ReservedNanos != 0 {
		t.Fatalf("after the expiry: %+v", got)
	}
}

// A call too large for the wallet is refused with the store's insufficient funds, which
// the handlers answer 402.
func TestReservationRefusedWithoutFunds(t *testing.T) {
	f := newFixture(t, 2*usd)
	if _, err := f.lg.Admit(context.Background(), f.request("gen_big", 5*usd)); !errors.Is(err, store.ErrInsufficientFunds) {
		t.Fatalf("admitting 5 USD from 2: %v", err)
	}
}

// A call admitted from a key lease and released unsettled gives its worst case back: the
// lease, dropped with its last call, holds nothing afterwards.
func TestLeaseHoldReleased(t *testing.T) {
	f := newFixture(t, 100*usd)
	ctx := context.Background()
	h, err := f.lg.KeyLease().Admit(ctx, f.request("gen_l", 10_000_000))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.balance(t); got.ReservedNanos != LeaseSize(10_000_000) {
		t.Fatalf("lease held %+v", got)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if st := f.lg.LeaseStats(); st.Leases != 0 || st.HeldNanos != 0 {
		t.Fatalf("after the release: %+v", st)
	}
	if got := f.balance(t); got.ReservedNanos != 0 || got.BalanceNanos != 100*usd {
		t.Fatalf("after the release: %+v", got)
	}
	// A hold ended refuses another generation.
	if _, err := h.Settle(ctx, f.gen("gen_other", 1)); !errors.Is(err, errHoldEnded) {
		t.Fatalf("settling a released hold: %v", err)
	}
}

func TestLeaseSize(t *testing.T) {
	for _, tc := range []struct{ w, want int64 }{
		{0, 0},
		{50_000, usd},                   // a cheap call: the 1 USD floor
		{100_000_000, 64 * 100_000_000}, // 0.10 USD: 64 of them
		{200_000_000, 10 * usd},         // capped at 10 USD
		{10 * usd, 0},                   // no lease would admit more than the call
	} {
		if got := LeaseSize(tc.w); got != tc.want {
			t.Errorf("LeaseSize(%d) = %d, want %d", tc.w, got, tc.want)
		}
	}
}

// newLedgerOver is another Ledger (a restarted worker) over f's store.
func newLedgerOver(f *fixture) *Ledger {
	cfg := *f.cfg
	cfg.Owner = nil
	return NewLedger(&cfg)
}

// A journaled settlement is applied by the loop: against its reservation while it exists,
// from the balance once it is gone, and never twice.
func TestJournalApplied(t *testing.T) {
	f := newFixture(t, 100*usd)
	f.cfg.JournalDir = filepath.Join(t.TempDir(), "journal")
	ctx := context.Background()
	own, err := f.lg.Reservation().Admit(ctx, f.request("gen_own", usd))
	if err != nil {
		t.Fatal(err)
	}
	if err := own.SettleLater(f.gen("gen_own", 300_000_000)); err != nil {
		t.Fatal(err)
	}
	// A lease's call whose lease was released meanwhile: charged from the balance.
	leased, err := f.lg.KeyLease().Admit(ctx, f.request("gen_leased", 10_000_000))
	if err != nil {
		t.Fatal(err)
	}
	if err := leased.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := leased.SettleLater(f.gen("gen_leased", 5_000_000)); err != nil {
		t.Fatal(err)
	}
	// A generation recorded already (the failed settlement had landed): nothing more.
	done, err := f.lg.Reservation().Admit(ctx, f.request("gen_done", usd))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := done.Settle(ctx, f.gen("gen_done", 100_000_000)); err != nil {
		t.Fatal(err)
	}
	if err := done.SettleLater(f.gen("gen_done", 100_000_000)); err != nil {
		t.Fatal(err)
	}
	if n := f.lg.JournalPending(); n != 3 {
		t.Fatalf("%d journaled", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.lg.JournalPending() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d settlements still journaled", f.lg.JournalPending())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := f.balance(t); got.BalanceNanos != 100*usd-405_000_000 || got.ReservedNanos != 0 {
		t.Fatalf("after the journal: %+v", got)
	}
	for _, id := range []string{"gen_own", "gen_leased", "gen_done"} {
		if _, err := f.s.GetGeneration(ctx, f.ws, id); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
}

// Without a journal directory, a settlement cannot be journaled.
func TestNoJournal(t *testing.T) {
	f := newFixture(t, 100*usd)
	h, err := f.lg.Admit(context.Background(), f.request("gen_x", usd))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.SettleLater(f.gen("gen_x", 1)); !errors.Is(err, ErrNoJournal) {
		t.Fatalf("journaling without a directory: %v", err)
	}
}
