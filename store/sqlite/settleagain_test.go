package sqlite

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// TestJournaledSettlementAgain checks settlement's idempotency where a lease settlement
// may be journaled (journal.go): a repeat this run settled recently, or one whose id an
// earlier run made, is answered with the stored record; a repeat journaled all the same
// is charged nothing and reported as nothing when applied.
func TestJournaledSettlementAgain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.db")
	var mu sync.Mutex
	var reported []error
	s := openTemp(t, path, WithDeferredErrors(func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }))
	ctx := context.Background()
	leaseFixture(t, s, "ws_1", "res_1", 10*usd)
	settle := func(s *Store, id string, cost int64) store.Generation {
		t.Helper()
		g, err := s.SettleLease(ctx, store.SettleLeaseParams{ReservationID: "res_1", HeldNanos: usd, Generation: &store.Generation{
			ID: id, WorkspaceID: "ws_1", KeyID: "key_1", Status: 200, CostNanos: cost}})
		if err != nil {
			t.Fatalf("SettleLease %s: %v", id, err)
		}
		return g
	}
	id := ids.New("gen")
	first := settle(s, id, usd/4)
	if s.pending.Load() == 0 && s.wr.ops.Load() == 0 {
		t.Fatal("the first settlement was neither journaled nor written")
	}
	// Settled again at once: seen, settled synchronously, answered with the record.
	if again := settle(s, id, usd/2); again.CostNanos != usd/4 {
		t.Errorf("settling again at once charged %d, want the stored %d", again.CostNanos, usd/4)
	}
	// Forgotten by seen: journaled, and found a repeat when applied.
	clear(s.jr.recent[:])
	if again := settle(s, id, usd/2); again.CostNanos != usd/2 {
		t.Errorf("a journaled repeat answered %d, want the cost it was given (%d)", again.CostNanos, usd/2)
	}
	// The fixture's first settlement charged usd/2 and holds 10 USD less what it charged.
	wantBalance(t, s, "ws_1", 100*usd-usd/2-usd/4, 10*usd-usd/2-usd/4)
	mu.Lock()
	if len(reported) != 0 {
		t.Errorf("a repeat was reported as a lost settlement: %v", reported)
	}
	mu.Unlock()
	stored, err := s.GetGeneration(ctx, "ws_1", id)
	if err != nil || stored.CostNanos != first.CostNanos {
		t.Fatalf("stored %+v, %v; want the first settlement", stored, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// A restarted run, whose lease is known again: an id made before it opened is settled
	// synchronously, whatever seen says.
	time.Sleep(2 * time.Millisecond)
	s2 := openTemp(t, path)
	settle(s2, "gen_known", 0)
	if !s2.known.has("res_1", "ws_1") {
		t.Fatal("the lease is not known after a settlement")
	}
	if again := settle(s2, id, usd/2); again.CostNanos != usd/4 {
		t.Errorf("settling again after a restart charged %d, want the stored %d", again.CostNanos, usd/4)
	}
	wantBalance(t, s2, "ws_1", 100*usd-usd/2-usd/4, 10*usd-usd/2-usd/4)
}
