package delivery_test

import (
	"context"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/postgres"
)

// openPostgres opens a store on a fresh schema of the test server (as store/postgres's
// tests do: GATEWAY_TEST_POSTGRES_DSN, or the local server), dropped when t ends. A server
// that does not answer fails the test: the server is part of the test set-up.
func openPostgres(t *testing.T) store.Store {
	t.Helper()
	dsn := os.Getenv("GATEWAY_TEST_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connecting to PostgreSQL: %v", err)
	}
	schema := "gwtest_" + ids.Token(12)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("creating schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("dropping schema: %v", err)
		}
		_ = conn.Close(ctx)
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("parsing DSN: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	s, err := postgres.Open(ctx, u.String())
	if err != nil {
		t.Fatalf("postgres.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestSenderDeliversFirstTryPostgres(t *testing.T) { testDeliveredFirstTry(t, openPostgres(t)) }

// TestSenderRestartPostgres: two senders, as two instances on one database, the first of
// which dies holding a claim; every event is delivered.
func TestSenderRestartPostgres(t *testing.T) {
	f := newFixture(t, openPostgres(t))
	r := newReceiver(t)
	ep, secret := f.endpoint(r.srv.URL)
	r.knows(secret)
	var deliveries []string
	for range 4 {
		deliveries = append(deliveries, f.deliver(ep, "video.completed"))
	}
	dead := f.claim(store.DeliveryQueue, "dead_instance", 300*time.Millisecond)
	if len(dead) == 0 {
		t.Fatal("the dead instance claimed nothing")
	}
	for _, d := range f.run(f.sender(), deliveries...) {
		if d.Status != store.DeliveryDelivered {
			t.Fatalf("delivery %+v", d)
		}
	}
	seen := map[string]bool{}
	for _, got := range r.received() {
		if !got.verifiedBy[0] {
			t.Fatalf("unverified request %+v", got)
		}
		seen[got.id] = true
	}
	for _, id := range deliveries {
		if !seen[id] {
			t.Fatalf("event %s never reached the receiver", id)
		}
	}
}
