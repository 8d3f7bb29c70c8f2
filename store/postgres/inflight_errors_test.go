package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// TestInFlightFlushFailureIsReported: a flush of the traces of requests in flight that
// fails is reported to the store's background error hook, once per outage rather than at
// every flush, and the traces are written once the database takes them again.
func TestInFlightFlushFailureIsReported(t *testing.T) {
	requireServer(t)
	old := inflightFlushInterval
	t.Cleanup(func() { inflightFlushInterval = old })
	inflightFlushInterval = 10 * time.Millisecond
	errs := make(chan error, 16)
	s := openStore(t, freshSchema(t), WithBackgroundErrors(func(err error) { errs <- err }))
	ctx := context.Background()
	exec := func(sql string) {
		t.Helper()
		if _, err := s.pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	written := func(gen string) bool {
		var n int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM inflight WHERE generation_id = $1`, gen).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	begin := func(gen string) {
		s.BeginInFlight(store.InFlight{GenerationID: gen, WorkspaceID: "ws_1", KeyID: "key_1", Endpoint: "/v1/chat/completions",
			Model: "m", ReservationID: "res_1", Owner: "inst_1", StartedAt: time.Now()})
	}
	for outage := range 2 {
		exec(`ALTER TABLE inflight RENAME TO inflight_away`)
		gen := []string{"gen_a", "gen_b"}[outage]
		begin(gen)
		select {
		case err := <-errs:
			if !strings.Contains(err.Error(), "writing the traces of requests in flight") {
				t.Fatalf("reported %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the failing flush was not reported")
		}
		// The flushes that keep failing are not reported again.
		time.Sleep(20 * inflightFlushInterval)
		if n := len(errs); n != 0 {
			t.Fatalf("%d more reports during one outage", n)
		}
		exec(`ALTER TABLE inflight_away RENAME TO inflight`)
		deadline := time.Now().Add(10 * time.Second)
		for !written(gen) {
			if time.Now().After(deadline) {
				t.Fatal("the trace was not written once the table was back")
			}
			time.Sleep(inflightFlushInterval)
		}
	}
}
