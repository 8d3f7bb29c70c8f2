package module

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/jackc/pgx/v5"

	"github.com/modelgateway/caddy-modelgateway/handlers"
	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/postgres"
)

// The gateway configured with `store postgres {env.X}` serves and bills through PostgreSQL.
func TestGatewayOnPostgres(t *testing.T) {
	base := os.Getenv("GATEWAY_TEST_POSTGRES_DSN")
	if base == "" {
		base = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL is unreachable and CI=true: %v", err)
		}
		t.Skipf("skipping: PostgreSQL is unreachable: %v", err)
	}
	schema := "gwe2e_" + ids.Token(10)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)
	t.Cleanup(func() {
		if c, err := pgx.Connect(context.Background(), base); err == nil {
			_, _ = c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			_ = c.Close(context.Background())
		}
	})
	dsn := base + map[bool]string{true: "&", false: "?"}[strings.Contains(base, "?")] + "search_path=" + schema
	t.Setenv("GATEWAY_TEST_PG_DSN", dsn)
	dir := t.TempDir()
	t.Setenv("XDG_DATA_HOME", filepath.Join(dir, "data"))
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))

	up := newFakeOpenAI(t, chatOK("from postgres", 10, 5))
	port := freePort(t)
	cf := fmt.Sprintf(`{
	admin off
	persist_config off
	grace_period 1ns
	model_gateway {
		store postgres {env.GATEWAY_TEST_PG_DSN}
		credit_lease_linger 0
%s
%s
	}
}

http://127.0.0.1:%d {
	route /v1/* {
		model_gateway
	}
}
`, providerBlock("primary", up.URL), pricedModel("gpt-test", pricedRoute("primary", "m")), port)
	loadCaddyfile(t, cf)
	t.Cleanup(func() { _ = caddy.Stop() })

	s, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ws := ids.New("ws")
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: ws, Name: "pg", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddCredits(ctx, ws, 5*usd, "test"); err != nil {
		t.Fatal(err)
	}
	k, key, _ := handlers.NewKey(ws, store.KeyStandard, "k")
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	env := &gatewayEnv{t: t, baseURL: fmt.Sprintf("http://127.0.0.1:%d", port), store: s}
	status, hdr, body := env.post(key, "/chat/completions", `{"model":"gpt-test","messages":[{"role":"user","content":"hi"}]}`)
	if status != 200 || !strings.Contains(string(body), "from postgres") {
		t.Fatalf("%d %s", status, body)
	}
	gen := env.generation(ws, hdr.Get("X-Generation-Id"))
	if gen.CostNanos != 20000 {
		t.Fatalf("generation %+v", gen)
	}
	if b := env.balance(ws); b.BalanceNanos != 5*usd-20000 || b.ReservedNanos != 0 {
		t.Fatalf("balance %+v", b)
	}
}
