package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/storetest"
)

// TestInFlightReplayedAsInterrupted: a crash with requests of a lease in flight leaves
// their traces in the journal; the next Open records as interrupted exactly those no
// settlement superseded (one settled and ended, one settled, journaled and not yet ended,
// one settled with its settlement still only in the journal), charging nothing for them.
func TestInFlightReplayedAsInterrupted(t *testing.T) {
	dir := t.TempDir()
	live := filepath.Join(dir, "live.db")
	s := openTemp(t, live)
	ctx := context.Background()
	leaseFixture(t, s, "ws_1", "res_1", 10*usd)
	started := time.Now().Add(-time.Minute)
	begin := func(gen string) uint64 {
		return s.BeginInFlight(store.InFlight{GenerationID: gen, WorkspaceID: "ws_1", KeyID: "key_1", Endpoint: "/v1/chat/completions",
			Model: "m-" + gen, ReservationID: "res_1", Owner: "inst_1", StartedAt: started})
	}
	// gen_000-gen_002 are leaseSettle's ids.
	if tok := begin("gen_000"); tok == 0 {
		t.Fatal("BeginInFlight kept nothing with a journal")
	} else {
		if _, err := leaseSettle(ctx, s, "ws_1", "res_1", 0, false); err != nil {
			t.Fatal(err)
		}
		s.EndInFlight(tok)
	}
	begin("gen_001")
	if _, err := leaseSettle(ctx, s, "ws_1", "res_1", 1, false); err != nil {
		t.Fatal(err)
	}
	begin("gen_cut")
	begin("gen_002")
	p := holdWriter(t, s)
	if _, err := leaseSettle(ctx, s, "ws_1", "res_1", 2, false); err != nil {
		t.Fatal(err)
	}
	crashed := filepath.Join(dir, "crashed.db")
	copyStore(t, live, crashed)
	p.release()

	var reported []error
	s2, err := Open(ctx, crashed, WithDeferredErrors(func(err error) { reported = append(reported, err) }))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s2.interrupted != 1 || len(reported) != 0 {
		t.Fatalf("recorded %d interrupted (reported %v), want 1", s2.interrupted, reported)
	}
	storetest.WantInterrupted(t, s2, "ws_1", "gen_cut", "key_1", "m-gen_cut", started)
	for _, id := range []string{"gen_000", "gen_001", "gen_002"} {
		g, err := s2.GetGeneration(ctx, "ws_1", id)
		if err != nil || g.ErrorCode != "" || g.CostNanos != usd/10 {
			t.Errorf("%s = %+v, %v; want its settlement", id, g, err)
		}
	}
	// The fixture's first settlement (usd/2) and three of usd/10; the cut request nothing.
	wantBalance(t, s2, "ws_1", 100*usd-usd/2-3*usd/10, 10*usd-usd/2-3*usd/10)

	// Replayed once: the next Open finds nothing more to record.
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	s3 := openTemp(t, crashed)
	if s3.interrupted != 0 || s3.replayed != 0 {
		t.Fatalf("second Open recorded %d interrupted, replayed %d; want nothing", s3.interrupted, s3.replayed)
	}
}
