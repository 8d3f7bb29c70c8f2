package storetest

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Settlement is idempotent by generation id (store.Wallet.Settle): a repeat against the
// same hold is answered with the stored record and changes nothing.

// settleAgain runs one settlement of generation id: Settle of reservation res, or
// SettleLease of it when lease.
func settleAgain(s store.Store, lease bool, ws, key, res, id string, held, cost int64, release bool) (store.Generation, error) {
	g := &store.Generation{ID: id, WorkspaceID: ws, KeyID: key, Model: "m", Status: 200, CostNanos: cost}
	if lease {
		return s.SettleLease(context.Background(), store.SettleLeaseParams{ReservationID: res, HeldNanos: held, Release: release, Generation: g})
	}
	return s.Settle(context.Background(), store.SettleParams{ReservationID: res, Generation: g})
}

// testSettleAgain checks that settling a generation again, however the first settlement
// left its hold, returns the first record and charges once: one charge in the ledger
// (the key's spend), the balance moved once, the reservation released or shrunk once.
func testSettleAgain(t *testing.T, s store.Store) {
	ctx := context.Background()
	tests := []struct {
		name     string
		lease    bool
		reserve  int64 // 0: no reservation
		held     int64
		release  bool
		cost     int64
		reserved int64 // what the reservation holds after the first settlement
	}{
		{"settle with a reservation", false, 2 * usd, 0, false, usd, 0},
		{"settle without a reservation", false, 0, 0, false, usd, 0},
		{"settle a free generation", false, 2 * usd, 0, false, 0, 0},
		{"lease kept", true, 5 * usd, 2 * usd, false, usd, 4 * usd},
		{"lease charge above held", true, 5 * usd, usd, false, 3 * usd, 4 * usd},
		{"lease released", true, 5 * usd, 2 * usd, true, usd, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ws := newWorkspace(t, s, 10*usd)
			key := newKey(t, s, ws, 0, store.ResetNever)
			var res string
			if tc.reserve > 0 {
				r, err := reserveKey(s, ws, key, tc.reserve)
				if err != nil {
					t.Fatalf("Reserve: %v", err)
				}
				res = r.ID
			}
			since := time.Now().Add(-time.Minute)
			id := ids.New("gen")
			first, err := settleAgain(s, tc.lease, ws, key, res, id, tc.held, tc.cost, tc.release)
			if err != nil {
				t.Fatalf("first settlement: %v", err)
			}
			if first.ReservationID != res {
				t.Errorf("settled against %q, want %q", first.ReservationID, res)
			}
			mustBalance(t, s, ws, 10*usd-tc.cost, tc.reserved)
			// Again, twice, with another cost and hold: the first record stands.
			for range 2 {
				again, err := settleAgain(s, tc.lease, ws, key, res, id, tc.held+usd, tc.cost+usd, !tc.release)
				if err != nil {
					t.Fatalf("settling again: %v", err)
				}
				if !reflect.DeepEqual(again, first) {
					t.Errorf("settling again returned %+v, want the stored %+v", again, first)
				}
			}
			mustBalance(t, s, ws, 10*usd-tc.cost, tc.reserved)
			mustSpend(t, s, key, since, tc.cost, tc.reserved)
			stored, err := s.GetGeneration(ctx, ws, id)
			if err != nil {
				t.Fatalf("GetGeneration: %v", err)
			}
			if !reflect.DeepEqual(stored, first) {
				t.Errorf("stored %+v, first settlement returned %+v", stored, first)
			}
		})
	}
}

// testSettleAgainElsewhere checks that a generation id is the settlement's only in its
// own workspace and against its own hold: settled in another workspace, or against
// another reservation, it is ErrConflict (the id is taken), and ErrNotFound when that
// reservation is gone; nothing changes and the record is not returned.
func testSettleAgainElsewhere(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 10*usd)
	other := newWorkspace(t, s, 10*usd)
	id := ids.New("gen")
	r := reserve(t, s, ws, 2*usd)
	if _, err := s.Settle(ctx, store.SettleParams{ReservationID: r.ID, Generation: &store.Generation{ID: id, WorkspaceID: ws, CostNanos: usd}}); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	mine := reserve(t, s, ws, 2*usd)
	theirs := reserve(t, s, other, 2*usd)
	for _, tc := range []struct {
		name string
		fn   func() (store.Generation, error)
		want error
	}{
		{"another workspace, its reservation", func() (store.Generation, error) {
			return s.Settle(ctx, store.SettleParams{ReservationID: theirs.ID, Generation: &store.Generation{ID: id, WorkspaceID: other, CostNanos: usd}})
		}, store.ErrConflict},
		{"another workspace, no reservation", func() (store.Generation, error) {
			return s.Settle(ctx, store.SettleParams{Generation: &store.Generation{ID: id, WorkspaceID: other, CostNanos: usd}})
		}, store.ErrConflict},
		{"another workspace, its lease", func() (store.Generation, error) {
			return s.SettleLease(ctx, store.SettleLeaseParams{ReservationID: theirs.ID, HeldNanos: usd, Generation: &store.Generation{ID: id, WorkspaceID: other, CostNanos: usd}})
		}, store.ErrConflict},
		{"another workspace, the settled reservation", func() (store.Generation, error) {
			return s.Settle(ctx, store.SettleParams{ReservationID: r.ID, Generation: &store.Generation{ID: id, WorkspaceID: other, CostNanos: usd}})
		}, store.ErrNotFound},
		{"same workspace, another reservation", func() (store.Generation, error) {
			return s.Settle(ctx, store.SettleParams{ReservationID: mine.ID, Generation: &store.Generation{ID: id, WorkspaceID: ws, CostNanos: usd}})
		}, store.ErrConflict},
		{"same workspace, no reservation", func() (store.Generation, error) {
			return s.Settle(ctx, store.SettleParams{Generation: &store.Generation{ID: id, WorkspaceID: ws, CostNanos: usd}})
		}, store.ErrConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := tc.fn()
			wantErr(t, tc.name, err, tc.want)
			if g.ID != "" {
				t.Errorf("returned %+v with the error", g)
			}
			mustBalance(t, s, ws, 9*usd, 2*usd)
			mustBalance(t, s, other, 10*usd, 2*usd)
		})
	}
	_, err := s.GetGeneration(ctx, other, id)
	wantErr(t, "GetGeneration from the other workspace", err, store.ErrNotFound)
}

// testSettleAfterInterrupted checks that an interrupted record is no settlement: a late
// settlement of its request is refused as it was before (its reservation is gone), not
// answered with the record, which charged nothing.
func testSettleAfterInterrupted(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 10*usd)
	key := newKey(t, s, ws, 0, store.ResetNever)
	id := ids.New("gen")
	r := reserveRequest(t, s, ws, key, "", id, usd, time.Now().Add(time.Second))
	if _, err := s.ReleaseExpired(ctx, time.Now().Add(time.Minute)); err != nil {
		t.Fatalf("ReleaseExpired: %v", err)
	}
	_, err := s.Settle(ctx, store.SettleParams{ReservationID: r.ID, Generation: &store.Generation{ID: id, WorkspaceID: ws, KeyID: key, CostNanos: usd}})
	wantErr(t, "Settle of an interrupted request", err, store.ErrNotFound)
	mustBalance(t, s, ws, 10*usd, 0)
	g, err := s.GetGeneration(ctx, ws, id)
	if err != nil || !store.IsInterrupted(&g) {
		t.Fatalf("GetGeneration = %+v, %v; want the interrupted record", g, err)
	}
}

// testConcurrentSettleAgain checks that the same settlement made many times at once is
// applied once: every call gets the one stored record, and one charge is taken.
func testConcurrentSettleAgain(t *testing.T, s store.Store) {
	for _, lease := range []bool{false, true} {
		name := "settle"
		if lease {
			name = "lease"
		}
		t.Run(name, func(t *testing.T) {
			const n = 8
			ws := newWorkspace(t, s, 10*usd)
			key := newKey(t, s, ws, 0, store.ResetNever)
			r, err := reserveKey(s, ws, key, 5*usd)
			if err != nil {
				t.Fatalf("Reserve: %v", err)
			}
			since := time.Now().Add(-time.Minute)
			id := ids.New("gen")
			got := make([]store.Generation, n)
			errs := make([]error, n)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					<-start
					got[i], errs[i] = settleAgain(s, lease, ws, key, r.ID, id, 2*usd, usd, false)
				})
			}
			close(start)
			wg.Wait()
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("settlement %d: %v", i, errs[i])
				}
				if !reflect.DeepEqual(got[i], got[0]) {
					t.Errorf("settlement %d returned %+v, settlement 0 %+v", i, got[i], got[0])
				}
			}
			reserved := int64(0)
			if lease {
				reserved = 4 * usd
			}
			mustBalance(t, s, ws, 9*usd, reserved)
			mustSpend(t, s, key, since, usd, reserved)
		})
	}
}
