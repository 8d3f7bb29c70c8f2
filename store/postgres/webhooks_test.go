package postgres

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/modelgateway/caddy-modelgateway/store/storetest"
)

// TestWebhookSecretsSealedAtRest scans the webhook endpoints table, every column as text
// and the secrets' bytes as they are, for a webhook secret in the clear.
func TestWebhookSecretsSealedAtRest(t *testing.T) {
	requireServer(t)
	dsn := freshSchema(t)
	s := openStore(t, dsn)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(ctx) })
	storetest.SecretsSealedAtRest(t, s, func(t *testing.T, marker []byte) bool {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_endpoints t
			WHERE position($1::bytea IN convert_to(t::text, 'UTF8')) > 0
			   OR position($1::bytea IN t.secret) > 0
			   OR position($1::bytea IN COALESCE(t.previous_secret, ''::bytea)) > 0`, marker).Scan(&n)
		if err != nil {
			t.Fatalf("scanning the table: %v", err)
		}
		return n > 0
	})
}
