package storetest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// instanceTimeout is the timeout the instance tests sweep with.
const instanceTimeout = 45 * time.Second

func reserveOwned(t *testing.T, s store.Store, ws, key, owner string, amount int64) store.Reservation {
	t.Helper()
	r, err := s.Reserve(context.Background(), store.ReserveParams{
		WorkspaceID: ws, KeyID: key, Owner: owner, AmountNanos: amount, ExpiresAt: time.Now().Add(24 * time.Hour * 400),
	})
	if err != nil {
		t.Fatalf("Reserve for %q: %v", owner, err)
	}
	if r.Owner != owner {
		t.Fatalf("reservation owner %q, want %q", r.Owner, owner)
	}
	return r
}

func register(t *testing.T, s store.Store, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if err := s.RegisterInstance(context.Background(), id); err != nil {
			t.Fatalf("RegisterInstance(%q): %v", id, err)
		}
	}
}

func sweep(t *testing.T, s store.Store, self string, want int) {
	t.Helper()
	n, err := s.ReleaseOrphaned(context.Background(), self, instanceTimeout)
	if err != nil {
		t.Fatalf("ReleaseOrphaned: %v", err)
	}
	if n != want {
		t.Fatalf("ReleaseOrphaned released %d reservations, want %d", n, want)
	}
}

func testPing(t *testing.T, s store.Store) {
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	wantErrAny(t, "RegisterInstance with an empty id", s.RegisterInstance(context.Background(), ""))
}

func wantErrAny(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s succeeded", what)
	}
}

// testInstances checks the lives of instances: a registered instance's reservations stay
// while it beats, are released (once, with their credit back and nothing charged) once
// its heartbeat is older than the timeout, and it learns it was taken for dead; an owner
// that never registered loses its reservations once they are older than the timeout; the
// sweeper's own and unowned reservations are never touched; a retired instance leaves
// nothing held.
func testInstances(t *testing.T, s store.Store, c *Clock) {
	ctx := context.Background()
	start := c.Now()
	at := func(d time.Duration) { c.Set(start.Add(d)) }
	ws := newWorkspace(t, s, 100*usd)
	key := newKey(t, s, ws, 0, store.ResetNever)
	register(t, s, "inst_a", "inst_b", "inst_self")

	a1 := reserveOwned(t, s, ws, key, "inst_a", 10*usd)
	reserveOwned(t, s, ws, key, "inst_a", 5*usd)
	reserveOwned(t, s, ws, key, "inst_b", 3*usd)
	reserveOwned(t, s, ws, key, "inst_self", 2*usd)
	reserveOwned(t, s, ws, key, "", usd)
	mustBalance(t, s, ws, 100*usd, 21*usd)

	at(30 * time.Second)
	if err := s.Heartbeat(ctx, "inst_b"); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	sweep(t, s, "inst_self", 0)
	mustBalance(t, s, ws, 100*usd, 21*usd)

	// inst_a is 50 s silent, inst_b 20 s; inst_self is as silent as inst_a but sweeps.
	at(50 * time.Second)
	sweep(t, s, "inst_self", 2)
	mustBalance(t, s, ws, 100*usd, 6*usd)
	mustSpend(t, s, key, start, 0, 6*usd)
	sweep(t, s, "inst_self", 0)

	// The dead instance's holds are gone: it cannot settle or release them, and it hears
	// that it was taken for dead when it beats.
	_, err := settleLease(s, ws, key, a1.ID, usd, usd/2, false)
	wantErr(t, "SettleLease of a released reservation", err, store.ErrNotFound)
	_, err = s.ReleaseReservation(ctx, a1.ID)
	wantErr(t, "ReleaseReservation of a released reservation", err, store.ErrNotFound)
	wantErr(t, "Heartbeat of a dead instance", s.Heartbeat(ctx, "inst_a"), store.ErrNotFound)
	register(t, s, "inst_a")
	if err := s.Heartbeat(ctx, "inst_a"); err != nil {
		t.Fatalf("Heartbeat after registering again: %v", err)
	}
	mustBalance(t, s, ws, 100*usd, 6*usd)

	// An owner that never registered keeps a fresh reservation, not an old one.
	reserveOwned(t, s, ws, key, "inst_ghost", 4*usd)
	sweep(t, s, "inst_self", 0)
	at(100 * time.Second)
	if err := s.Heartbeat(ctx, "inst_a"); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	// inst_b is now 70 s silent: its reservation goes with the ghost's.
	sweep(t, s, "inst_self", 2)
	mustBalance(t, s, ws, 100*usd, 3*usd)

	// A retired instance leaves nothing held and is unregistered.
	n, err := s.RetireInstance(ctx, "inst_self")
	if err != nil || n != 1 {
		t.Fatalf("RetireInstance = %d, %v; want 1 reservation released", n, err)
	}
	mustBalance(t, s, ws, 100*usd, usd)
	wantErr(t, "Heartbeat of a retired instance", s.Heartbeat(ctx, "inst_self"), store.ErrNotFound)
	if n, err := s.RetireInstance(ctx, "inst_self"); err != nil || n != 0 {
		t.Fatalf("RetireInstance again = %d, %v; want nothing to do", n, err)
	}
	mustSpend(t, s, key, start, 0, usd)
}

// testConcurrentOrphanRelease sweeps a dead instance's reservations from several
// sweepers at once while its settlements still arrive (an instance taken for dead that is
// not): every reservation is released exactly once, every settlement is charged in full or
// refused, and the wallet ends with nothing reserved and the balance minus the charges.
func testConcurrentOrphanRelease(t *testing.T, s store.Store, c *Clock) {
	ctx := context.Background()
	start := c.Now()
	const perWorkspace = 8
	var workspaces []string
	var reservations []store.Reservation
	register(t, s, "inst_dead")
	for range 3 {
		ws := newWorkspace(t, s, 50*usd)
		workspaces = append(workspaces, ws)
		key := newKey(t, s, ws, 0, store.ResetNever)
		for range perWorkspace {
			reservations = append(reservations, reserveOwned(t, s, ws, key, "inst_dead", usd))
		}
	}
	c.Set(start.Add(instanceTimeout + time.Second))

	var released, settled atomic.Int64
	charged := make([]atomic.Int64, len(workspaces))
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			n, err := s.ReleaseOrphaned(ctx, "inst_sweeper_"+string(rune('a'+i)), instanceTimeout)
			if err != nil {
				t.Errorf("ReleaseOrphaned: %v", err)
			}
			released.Add(int64(n))
		})
	}
	for i, r := range reservations {
		wg.Go(func() {
			g, err := s.SettleLease(ctx, store.SettleLeaseParams{ReservationID: r.ID, HeldNanos: usd / 2,
				Generation: &store.Generation{WorkspaceID: r.WorkspaceID, Model: "m", Status: 200, CostNanos: usd / 4}})
			switch {
			case err == nil:
				settled.Add(1)
				charged[i/perWorkspace].Add(g.CostNanos)
			case !errors.Is(err, store.ErrNotFound):
				t.Errorf("SettleLease: %v", err)
			}
		})
	}
	wg.Wait()
	if got := released.Load(); got != int64(len(reservations)) {
		t.Fatalf("sweeps released %d reservations in all, want each of the %d once", got, len(reservations))
	}
	for i, ws := range workspaces {
		mustBalance(t, s, ws, 50*usd-charged[i].Load(), 0)
	}
	t.Logf("%d of %d settlements landed before their reservation was released", settled.Load(), len(reservations))
}

// testDeadInstanceClaims: what a dead instance held claimed is due at once when it is
// found dead (a sweep) or retired, not when the claims' leases run out; an item it had
// handed back for later, and a live instance's claims, keep their times.
func testDeadInstanceClaims(t *testing.T, s store.Store, c *Clock) {
	ctx := context.Background()
	start := c.Now()
	register(t, s, "inst_dead", "inst_live", "inst_self", "inst_retired")
	for _, id := range []string{"item_dead", "item_later", "item_live", "item_retired"} {
		enqueue(t, s, "q_dead", id, []byte(`{}`), time.Time{})
	}
	owners := map[string]string{"item_dead": "inst_dead", "item_later": "inst_dead", "item_live": "inst_live", "item_retired": "inst_retired"}
	for _, id := range []string{"item_dead", "item_later", "item_live", "item_retired"} {
		got := claim(t, s, "q_dead", owners[id], time.Hour, 1)
		if len(got) != 1 || got[0].ID != id {
			t.Fatalf("claimed %v; want %s", claimedIDs(got), id)
		}
		if id == "item_later" {
			if err := s.Requeue(ctx, got[0].Claim, start.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := s.RetireInstance(ctx, "inst_retired"); err != nil {
		t.Fatal(err)
	}
	if got := claim(t, s, "q_dead", "inst_self", time.Hour, 10); len(got) != 1 || got[0].ID != "item_retired" || got[0].Attempt != 2 {
		t.Fatalf("after a retirement, claimed %v; want item_retired on its second attempt", got)
	}
	c.Set(start.Add(50 * time.Second))
	if err := s.Heartbeat(ctx, "inst_live"); err != nil {
		t.Fatal(err)
	}
	sweep(t, s, "inst_self", 0)
	got := claim(t, s, "q_dead", "inst_self", time.Hour, 10)
	if len(got) != 1 || got[0].ID != "item_dead" || got[0].Attempt != 2 {
		t.Fatalf("after the sweep, claimed %v; want item_dead alone, on its second attempt", got)
	}
}
