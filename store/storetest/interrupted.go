package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// reserveRequest reserves amount for one request of its own, generation gen, of owner.
func reserveRequest(t *testing.T, s store.Store, ws, key, owner, gen string, amount int64, expires time.Time) store.Reservation {
	t.Helper()
	r, err := s.Reserve(context.Background(), store.ReserveParams{
		WorkspaceID: ws, KeyID: key, Owner: owner, AmountNanos: amount, ExpiresAt: expires,
		GenerationID: gen, Endpoint: "/v1/chat/completions", Model: "model-" + gen,
	})
	if err != nil {
		t.Fatalf("Reserve for %s: %v", gen, err)
	}
	return r
}

// WantInterrupted fails t unless generation id of workspace ws is the interrupted record
// of a request of key to model, begun at started, charged nothing.
func WantInterrupted(t *testing.T, s store.Generations, ws, id, key, model string, started time.Time) {
	t.Helper()
	g, err := s.GetGeneration(context.Background(), ws, id)
	if err != nil {
		t.Fatalf("GetGeneration(%s): %v; want the interrupted record", id, err)
	}
	if g.ErrorCode != store.InterruptedCode || g.ErrorOrigin != store.InterruptedOrigin || g.FinishReason != store.InterruptedCode ||
		g.ErrorMessage == "" || g.KeyID != key || g.Model != model || g.CostNanos != 0 || g.UnbilledNanos != 0 ||
		!g.CreatedAt.Equal(started.UTC().Truncate(time.Millisecond)) {
		t.Fatalf("generation %s = %+v; want interrupted (origin gateway), key %s, model %s, begun %v, charged nothing", id, g, key, model, started)
	}
}

// testInterrupted checks that every way a dead instance's or an expired reservation of a
// request's own is freed records the request as interrupted, charging nothing, while a
// settled request keeps its own record and a lease's reservation, which names no
// request, leaves none; and that /activity counts them.
func testInterrupted(t *testing.T, s store.Store, c *Clock) {
	ctx := context.Background()
	start := c.Now()
	ws := newWorkspace(t, s, 100*usd)
	key := newKey(t, s, ws, 0, store.ResetNever)
	register(t, s, "inst_dead", "inst_self", "inst_stopping")
	far := start.Add(time.Hour)

	gDead, gSettled, gExpired, gRetired := ids.New("gen"), ids.New("gen"), ids.New("gen"), ids.New("gen")
	dead := reserveRequest(t, s, ws, key, "inst_dead", gDead, 2*usd, far)
	settled := reserveRequest(t, s, ws, key, "inst_dead", gSettled, 2*usd, far)
	reserveRequest(t, s, ws, key, "", gExpired, usd, start.Add(time.Second))
	reserveRequest(t, s, ws, key, "inst_stopping", gRetired, usd, far)
	reserveOwned(t, s, ws, key, "inst_dead", 5*usd) // a lease's
	mustBalance(t, s, ws, 100*usd, 11*usd)

	if _, err := s.Settle(ctx, store.SettleParams{ReservationID: settled.ID, Generation: &store.Generation{
		ID: gSettled, WorkspaceID: ws, KeyID: key, Model: "model-" + gSettled, Status: 200, CostNanos: usd,
	}}); err != nil {
		t.Fatalf("Settle: %v", err)
	}

	c.Set(start.Add(50 * time.Second))
	if err := s.Heartbeat(ctx, "inst_self"); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	if err := s.Heartbeat(ctx, "inst_stopping"); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	sweep(t, s, "inst_self", 2)
	WantInterrupted(t, s, ws, gDead, key, "model-"+gDead, dead.CreatedAt)
	if n, err := s.ReleaseExpired(ctx, c.Now()); err != nil || n != 1 {
		t.Fatalf("ReleaseExpired = %d, %v; want 1", n, err)
	}
	WantInterrupted(t, s, ws, gExpired, key, "model-"+gExpired, start)
	if n, err := s.RetireInstance(ctx, "inst_stopping"); err != nil || n != 1 {
		t.Fatalf("RetireInstance = %d, %v; want 1", n, err)
	}
	WantInterrupted(t, s, ws, gRetired, key, "model-"+gRetired, start)

	g, err := s.GetGeneration(ctx, ws, gSettled)
	if err != nil || g.ErrorCode != "" || g.CostNanos != usd || g.Status != 200 {
		t.Fatalf("settled generation = %+v, %v; want its own record, charged 1 USD", g, err)
	}
	mustBalance(t, s, ws, 99*usd, 0)
	tot, err := s.ActivityTotals(ctx, store.ActivityQuery{WorkspaceID: ws, From: start.Add(-time.Hour), To: start.Add(time.Hour)})
	if err != nil || tot.Requests != 4 || tot.CostNanos != usd {
		t.Fatalf("activity totals = %+v, %v; want 4 requests (3 interrupted), 1 USD", tot, err)
	}
}

// testInFlightSettled checks that a request admitted from a lease that settled leaves its
// own record, not an interrupted one, whether or not its trace was ended before its
// instance went: a settlement supersedes the trace.
func testInFlightSettled(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 100*usd)
	key := newKey(t, s, ws, 0, store.ResetNever)
	register(t, s, "inst_lease")
	lease := reserveOwned(t, s, ws, key, "inst_lease", 5*usd)
	for i, end := range []bool{true, false} {
		gen := ids.New("gen")
		tok := s.BeginInFlight(store.InFlight{GenerationID: gen, WorkspaceID: ws, KeyID: key, Endpoint: "/v1/chat/completions",
			Model: "m", ReservationID: lease.ID, Owner: "inst_lease", StartedAt: time.Now()})
		if _, err := s.SettleLease(ctx, store.SettleLeaseParams{ReservationID: lease.ID, HeldNanos: usd, Generation: &store.Generation{
			ID: gen, WorkspaceID: ws, KeyID: key, Model: "m", Status: 200, CostNanos: usd / 4,
		}}); err != nil {
			t.Fatalf("SettleLease %d: %v", i, err)
		}
		if end {
			s.EndInFlight(tok)
		}
		defer func() {
			g, err := s.GetGeneration(ctx, ws, gen)
			if err != nil || g.ErrorCode != "" || g.CostNanos != usd/4 {
				t.Errorf("settled generation %d = %+v, %v; want its own record", i, g, err)
			}
		}()
	}
	if n, err := s.RetireInstance(ctx, "inst_lease"); err != nil || n != 1 {
		t.Fatalf("RetireInstance = %d, %v; want the lease released", n, err)
	}
	mustBalance(t, s, ws, 100*usd-usd/2, 0)
}
