package storetest

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// settleLease settles one request of worst case held on a lease.
func settleLease(s store.Store, ws, key, res string, held, cost int64, release bool) (store.Generation, error) {
	return s.SettleLease(context.Background(), store.SettleLeaseParams{ReservationID: res, HeldNanos: held, Release: release,
		Generation: &store.Generation{WorkspaceID: ws, KeyID: key, Model: "m", Status: 200, CostNanos: cost}})
}

// testSettleLease checks SettleLease: charge capped at the balance, the reservation shrunk
// by min(charged, held, amount), the generation recorded, all at once.
func testSettleLease(t *testing.T, s store.Store) {
	ctx := context.Background()
	tests := []struct {
		name                     string
		balance, lease           int64
		held, cost               int64
		release                  bool
		wantCost, wantUnbilled   int64
		wantBalance, wantReserve int64
	}{
		{"charge below held", 10 * usd, 5 * usd, usd, 300_000_000, false, 300_000_000, 0, 10*usd - 300_000_000, 5*usd - 300_000_000},
		{"charge above held shrinks by held", 10 * usd, 5 * usd, usd, 2 * usd, false, 2 * usd, 0, 8 * usd, 4 * usd},
		{"nothing used", 10 * usd, 5 * usd, usd, 0, false, 0, 0, 10 * usd, 5 * usd},
		{"held above amount shrinks to zero", 10 * usd, usd, 3 * usd, 2 * usd, false, 2 * usd, 0, 8 * usd, 0},
		{"capped at the balance", 2 * usd, 2 * usd, 2 * usd, 5 * usd, false, 2 * usd, 3 * usd, 0, 0},
		{"release drops the rest", 10 * usd, 5 * usd, usd, 300_000_000, true, 300_000_000, 0, 10*usd - 300_000_000, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ws := newWorkspace(t, s, tc.balance)
			key := newKey(t, s, ws, 0, store.ResetNever)
			r, err := reserveKey(s, ws, key, tc.lease)
			if err != nil {
				t.Fatalf("Reserve: %v", err)
			}
			before := time.Now().Add(-time.Second)
			g, err := settleLease(s, ws, key, r.ID, tc.held, tc.cost, tc.release)
			if err != nil {
				t.Fatalf("SettleLease: %v", err)
			}
			if g.CostNanos != tc.wantCost || g.UnbilledNanos != tc.wantUnbilled {
				t.Errorf("cost %d unbilled %d, want %d and %d", g.CostNanos, g.UnbilledNanos, tc.wantCost, tc.wantUnbilled)
			}
			mustBalance(t, s, ws, tc.wantBalance, tc.wantReserve)
			// The key's spend counts the charge; its reservations what the lease still holds.
			mustSpend(t, s, key, before, tc.wantCost, tc.wantReserve)
			stored, err := s.GetGeneration(ctx, ws, g.ID)
			if err != nil {
				t.Fatalf("GetGeneration: %v", err)
			}
			if !reflect.DeepEqual(stored, g) {
				t.Errorf("stored generation = %+v, SettleLease returned %+v", stored, g)
			}
			// A lease that still exists settles again; a released one is gone.
			_, err = settleLease(s, ws, key, r.ID, 0, 0, false)
			if tc.release {
				wantErr(t, "SettleLease after release", err, store.ErrNotFound)
			} else if err != nil {
				t.Errorf("second SettleLease: %v", err)
			}
		})
	}
}

// testSettleLeaseErrors checks that a refused SettleLease changes nothing.
func testSettleLeaseErrors(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 10*usd)
	other := newWorkspace(t, s, 10*usd)
	r := reserve(t, s, ws, 5*usd)
	if _, err := s.Settle(ctx, store.SettleParams{Generation: &store.Generation{ID: "gen_lease_taken", WorkspaceID: ws}}); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	for _, tc := range []struct {
		name string
		p    store.SettleLeaseParams
		err  error
	}{
		{"unknown reservation", store.SettleLeaseParams{ReservationID: "res_missing", HeldNanos: usd, Generation: &store.Generation{WorkspaceID: ws, CostNanos: usd}}, store.ErrNotFound},
		{"another workspace's reservation", store.SettleLeaseParams{ReservationID: r.ID, HeldNanos: usd, Generation: &store.Generation{WorkspaceID: other, CostNanos: usd}}, store.ErrNotFound},
		{"duplicate generation id", store.SettleLeaseParams{ReservationID: r.ID, HeldNanos: usd, Release: true, Generation: &store.Generation{ID: "gen_lease_taken", WorkspaceID: ws, CostNanos: usd}}, store.ErrConflict},
		{"no reservation id", store.SettleLeaseParams{HeldNanos: usd, Generation: &store.Generation{WorkspaceID: ws, CostNanos: usd}}, nil},
		{"negative held", store.SettleLeaseParams{ReservationID: r.ID, HeldNanos: -1, Generation: &store.Generation{WorkspaceID: ws, CostNanos: usd}}, nil},
		{"negative cost", store.SettleLeaseParams{ReservationID: r.ID, HeldNanos: usd, Generation: &store.Generation{WorkspaceID: ws, CostNanos: -1}}, nil},
		{"no generation", store.SettleLeaseParams{ReservationID: r.ID, HeldNanos: usd}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.SettleLease(ctx, tc.p)
			if tc.err != nil {
				wantErr(t, "SettleLease", err, tc.err)
			} else if err == nil {
				t.Fatal("SettleLease succeeded, want an error")
			}
			mustBalance(t, s, ws, 10*usd, 5*usd)
			mustBalance(t, s, other, 10*usd, 0)
		})
	}
}

// testReleaseReservation checks that ReleaseReservation returns the hold, once.
func testReleaseReservation(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 10*usd)
	key := newKey(t, s, ws, 0, store.ResetNever)
	a, err := reserveKey(s, ws, key, 3*usd)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	b := reserve(t, s, ws, 2*usd)
	if _, err := settleLease(s, ws, key, a.ID, usd, usd/2, false); err != nil {
		t.Fatalf("SettleLease: %v", err)
	}
	mustBalance(t, s, ws, 10*usd-usd/2, 5*usd-usd/2)
	n, err := s.ReleaseReservation(ctx, a.ID)
	if err != nil || n != 3*usd-usd/2 {
		t.Fatalf("ReleaseReservation = %d, %v; want %d", n, err, 3*usd-usd/2)
	}
	mustBalance(t, s, ws, 10*usd-usd/2, 2*usd)
	mustSpend(t, s, key, time.Time{}, usd/2, 0)
	_, err = s.ReleaseReservation(ctx, a.ID)
	wantErr(t, "second ReleaseReservation", err, store.ErrNotFound)
	_, err = s.ReleaseReservation(ctx, "res_missing")
	wantErr(t, "ReleaseReservation unknown", err, store.ErrNotFound)
	mustBalance(t, s, ws, 10*usd-usd/2, 2*usd)
	if _, err := s.Settle(ctx, store.SettleParams{ReservationID: b.ID, Generation: &store.Generation{WorkspaceID: ws, CostNanos: usd}}); err != nil {
		t.Fatalf("Settle of the other reservation: %v", err)
	}
	mustBalance(t, s, ws, 9*usd-usd/2, 0)
}

// testConcurrentLeaseSettlements settles many requests of one lease at once, each held
// part shrinking it: the hold ends at lease - Σ min(cost, held), the balance at initial -
// Σ recorded costs, and a concurrent ReleaseExpired or Reserve never disturbs them.
func testConcurrentLeaseSettlements(t *testing.T, s store.Store) {
	const n = 40
	const held = 100_000_000
	ws := newWorkspace(t, s, 20*usd)
	key := newKey(t, s, ws, 0, store.ResetNever)
	lease, err := reserveKey(s, ws, key, n*held)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var spent, shrunk int64
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cost := int64(i) * 5_000_000 // up to 1.5 × held: some costs exceed their hold
			g, err := settleLease(s, ws, key, lease.ID, held, cost, false)
			if err != nil {
				t.Errorf("SettleLease: %v", err)
				return
			}
			mu.Lock()
			spent += g.CostNanos
			shrunk += min(g.CostNanos, held)
			mu.Unlock()
		}()
	}
	wg.Wait()
	mustBalance(t, s, ws, 20*usd-spent, n*held-shrunk)
	mustSpend(t, s, key, time.Time{}, spent, n*held-shrunk)
	if n, err := s.ReleaseReservation(context.Background(), lease.ID); err != nil || n != 40*held-shrunk {
		t.Fatalf("ReleaseReservation = %d, %v", n, err)
	}
	mustBalance(t, s, ws, 20*usd-spent, 0)
}
