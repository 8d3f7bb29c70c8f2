package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/storetest"
)

// TestInFlightInterruptedBySweep: the traces of a dead instance's requests in flight from
// a lease, once flushed, become interrupted records when a survivor frees its holds,
// except those of requests that settled (whether their row's deletion was flushed or not);
// a request that began and ended between two flushes was never written at all.
func TestInFlightInterruptedBySweep(t *testing.T) {
	// Restored after the stores' flushers ended (cleanups run last first).
	old := inflightFlushInterval
	t.Cleanup(func() { inflightFlushInterval = old })
	inflightFlushInterval = time.Hour // the test flushes
	dsn := freshSchema(t)
	ctx := context.Background()
	dead := openStore(t, dsn)
	if err := dead.CreateWorkspace(ctx, store.Workspace{ID: "ws_1", Name: "one"}); err != nil {
		t.Fatal(err)
	}
	if _, err := dead.AddCredits(ctx, "ws_1", 100*store.NanosPerUSD, "test"); err != nil {
		t.Fatal(err)
	}
	if err := dead.RegisterInstance(ctx, "inst_dead"); err != nil {
		t.Fatal(err)
	}
	lease, err := dead.Reserve(ctx, store.ReserveParams{WorkspaceID: "ws_1", Owner: "inst_dead", AmountNanos: 10 * store.NanosPerUSD, ExpiresAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now().Add(-time.Minute)
	begin := func(gen string) uint64 {
		return dead.BeginInFlight(store.InFlight{GenerationID: gen, WorkspaceID: "ws_1", KeyID: "key_1", Endpoint: "/v1/chat/completions",
			Model: "m-" + gen, ReservationID: lease.ID, Owner: "inst_dead", StartedAt: started})
	}
	settle := func(gen string) {
		t.Helper()
		if _, err := dead.SettleLease(ctx, store.SettleLeaseParams{ReservationID: lease.ID, HeldNanos: store.NanosPerUSD,
			Generation: &store.Generation{ID: gen, WorkspaceID: "ws_1", KeyID: "key_1", Model: "m", Status: 200, CostNanos: store.NanosPerUSD / 10}}); err != nil {
			t.Fatal(err)
		}
	}
	flush := func() {
		t.Helper()
		if err := dead.flushInFlight(ctx); err != nil {
			t.Fatal(err)
		}
	}
	begin("gen_cut")
	ended := begin("gen_ended")
	begin("gen_settled")
	quick := begin("gen_quick")
	settle("gen_quick")
	dead.EndInFlight(quick)
	flush()
	settle("gen_ended")
	dead.EndInFlight(ended)
	flush()
	settle("gen_settled") // its row's deletion never flushed: the crash came first
	var rows int
	if err := dead.pool.QueryRow(ctx, `SELECT count(*) FROM inflight`).Scan(&rows); err != nil || rows != 2 {
		t.Fatalf("inflight rows = %d, %v; want gen_cut's and gen_settled's", rows, err)
	}

	survivor := openStore(t, dsn, WithClock(func() time.Time { return time.Now().Add(time.Hour) }))
	if n, err := survivor.ReleaseOrphaned(ctx, "inst_survivor", time.Minute); err != nil || n != 1 {
		t.Fatalf("ReleaseOrphaned = %d, %v; want the lease released", n, err)
	}
	storetest.WantInterrupted(t, survivor, "ws_1", "gen_cut", "key_1", "m-gen_cut", started)
	for _, id := range []string{"gen_quick", "gen_ended", "gen_settled"} {
		g, err := survivor.GetGeneration(ctx, "ws_1", id)
		if err != nil || g.ErrorCode != "" || g.CostNanos != store.NanosPerUSD/10 {
			t.Errorf("%s = %+v, %v; want its settlement", id, g, err)
		}
	}
	if err := survivor.pool.QueryRow(ctx, `SELECT count(*) FROM inflight`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("inflight rows after the sweep = %d, %v; want none", rows, err)
	}
	b, err := survivor.GetBalance(ctx, "ws_1")
	if err != nil || b.BalanceNanos != 100*store.NanosPerUSD-3*store.NanosPerUSD/10 || b.ReservedNanos != 0 {
		t.Fatalf("balance = %+v, %v; want the three settlements charged, nothing held", b, err)
	}
}
