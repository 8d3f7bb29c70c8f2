package module

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
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
	"github.com/modelgateway/caddy-modelgateway/store/sqlite"
	"github.com/modelgateway/caddy-modelgateway/store/storetest"
)

// The gateway's behaviour when its store fails: readiness, bounded waits, and the credit
// of instances that died. Every test here runs the real Caddy in this process, one at a time.

const chatHi = `{"model":"gpt-test","messages":[{"role":"user","content":"hi"}]}`

// chatHiCost is what chatHi costs on pricedRoute when the upstream reports 10 prompt and 20
// completion tokens (chatOK("ok", 10, 20)).
const chatHiCost = 10*1000 + 20*2000

// postgresSchema makes a schema of its own on the test server, dropped when t ends, and
// returns a DSN whose search_path is it; the test is skipped when no server answers,
// except with CI=true.
func postgresSchema(t *testing.T) string {
	t.Helper()
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
	return base + map[bool]string{true: "&", false: "?"}[strings.Contains(base, "?")] + "search_path=" + schema
}

// startPostgresGateway runs the gateway on the PostgreSQL database at dsn (given to Caddy
// through the environment) with the global options in gatewayBlock.
func startPostgresGateway(t *testing.T, dsn, gatewayBlock string) *gatewayEnv {
	t.Helper()
	t.Setenv("GATEWAY_TEST_PG_DSN", dsn)
	dir := t.TempDir()
	t.Setenv("XDG_DATA_HOME", filepath.Join(dir, "data"))
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	port := freePort(t)
	loadCaddyfile(t, fmt.Sprintf(`{
	admin off
	persist_config off
	grace_period 1ns
	model_gateway {
		store postgres {env.GATEWAY_TEST_PG_DSN}
%s
	}
}

http://127.0.0.1:%d {
	route /v1/* {
		model_gateway
	}
}
`, gatewayBlock, port))
	t.Cleanup(func() { _ = caddy.Stop() })
	return &gatewayEnv{t: t, baseURL: fmt.Sprintf("http://127.0.0.1:%d", port)}
}

// openPostgres is a store of the test's own on the database at dsn.
func openPostgres(t *testing.T, dsn string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// fundedKey creates a workspace holding credits in s and returns it with a standard key.
func fundedKey(t *testing.T, s store.Store, credits int64) (ws, key string) {
	t.Helper()
	ctx := context.Background()
	ws = ids.New("ws")
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: ws, Name: "faults"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddCredits(ctx, ws, credits, "test"); err != nil {
		t.Fatal(err)
	}
	return ws, newKeyIn(t, s, ws)
}

func newKeyIn(t *testing.T, s store.Store, ws string) string {
	t.Helper()
	k, plain, err := handlers.NewKey(ws, store.KeyStandard, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateKey(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	return plain
}

// holdFor leaves in s a credit lease of amount held by an instance whose process is gone
// without releasing it: registered, heartbeat fresh, never beating again.
func holdFor(t *testing.T, s store.Store, ws, key, instance string, amount int64) {
	t.Helper()
	ctx := context.Background()
	if err := s.RegisterInstance(ctx, instance); err != nil {
		t.Fatal(err)
	}
	pk, err := handlers.ParseKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(ctx, store.ReserveParams{WorkspaceID: ws, KeyID: pk.ID, Owner: instance,
		AmountNanos: amount, MinAvailableNanos: amount, ExpiresAt: time.Now().Add(2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
}

// expectStoreUnavailable checks a 503 in the spec's error shape, from the gateway.
func expectStoreUnavailable(t *testing.T, what string, status int, v map[string]any) {
	t.Helper()
	errObj, _ := v["error"].(map[string]any)
	if status != http.StatusServiceUnavailable || v["ok"] != false || errObj == nil || errObj["code"] != handlers.CodeStoreUnavailable ||
		v["status_code"] != float64(503) || v["error_type"] != "system" || v["error_origin"] != "gateway" || v["message"] == "" {
		t.Fatalf("%s: %d %v, want 503 store_unavailable from the gateway", what, status, v)
	}
}

// waitStatus polls GET path until it answers want, and returns how long that took.
func waitStatus(t *testing.T, e *gatewayEnv, path string, want int, within time.Duration) (time.Duration, map[string]any) {
	t.Helper()
	began := time.Now()
	for {
		status, _, v := e.call(http.MethodGet, "", path, "")
		if status == want {
			return time.Since(began), v
		}
		if time.Since(began) > within {
			t.Fatalf("GET %s: still %d %v after %v, want %d", path, status, v, within, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// GET /health follows the SQLite store: 200, then 503 in the spec's shape within a second
// of the database file becoming unreachable (moved away, a directory in its place, and
// unreadable for a process that is not root), 200 again once it is back, with the gateway
// running throughout; GET /health/live answers 200 all along.
func TestHealthFollowsTheSQLiteStore(t *testing.T) {
	env := startGateway(t, "", "")
	env.expect(200, http.MethodGet, "", "/health", "")
	env.expect(200, http.MethodGet, "", "/health/live", "")

	away := env.dbPath + ".away"
	if err := os.Chmod(env.dbPath, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(env.dbPath, away); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(env.dbPath, 0o700); err != nil {
		t.Fatal(err)
	}
	took, v := waitStatus(t, env, "/health", 503, 2*time.Second)
	if took > time.Second {
		t.Errorf("503 after %v, want within a second", took)
	}
	expectStoreUnavailable(t, "GET /health without the database", 503, v)
	if !strings.Contains(v["message"].(string), "not ready") || strings.Contains(v["message"].(string), env.dbPath) {
		t.Errorf("message %q: want the reason, without the file's path", v["message"])
	}
	env.expect(200, http.MethodGet, "", "/health/live", "")

	if err := os.Remove(env.dbPath); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(away, env.dbPath); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(env.dbPath, 0o600); err != nil {
		t.Fatal(err)
	}
	if took, _ := waitStatus(t, env, "/health", 200, 2*time.Second); took > time.Second {
		t.Errorf("200 again after %v, want within a second", took)
	}
}

// A gateway restarted on a SQLite file frees, as it starts, the credit its previous run
// held when it died, however fresh that run's heartbeat: a request that needs the credit
// is admitted at once.
func TestSQLiteRestartFreesTheDeadRunsHolds(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "gateway.db")
	prev, err := sqlite.Open(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	ws, key := fundedKey(t, prev, 11*usd)
	holdFor(t, prev, ws, key, "inst_previous_run", 10*usd+usd/2)
	_ = prev.Close() // its process dies: the holds stay, the instance's lock goes

	t.Setenv("XDG_DATA_HOME", filepath.Join(dir, "data"))
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	up := newFakeOpenAI(t, chatOK("ok", 10, 20))
	port := freePort(t)
	loadCaddyfile(t, gatewayCaddyfile(port, dbPath, providerBlock("primary", up.URL)+pricedModel("gpt-test", pricedRoute("primary", "m")), ""))
	t.Cleanup(func() { _ = caddy.Stop() })
	env := &gatewayEnv{t: t, baseURL: fmt.Sprintf("http://127.0.0.1:%d", port), dbPath: dbPath}
	s, err := sqlite.Open(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	env.store = s

	if status, _, body := env.post(key, "/chat/completions", chatHi); status != 200 {
		t.Fatalf("the first request after the restart: %d %s", status, body)
	}
	if b := env.balance(ws); b.ReservedNanos != 0 || b.BalanceNanos != 11*usd-chatHiCost {
		t.Fatalf("balance %+v: want the dead run's hold gone and one charge", b)
	}
}

// A gateway instance that dies holding a credit lease on PostgreSQL (its store handle
// abandoned, heartbeat stopped) loses it to another instance on the same database within
// instance_timeout and a heartbeat: a request that needs that credit is refused (402) while
// the dead instance's heartbeat is fresh, then admitted, with nothing else done.
func TestPostgresDeadInstanceHoldsTakenOver(t *testing.T) {
	dsn := postgresSchema(t)
	dead := openPostgres(t, dsn)
	ws, key := fundedKey(t, dead, 11*usd)
	holdFor(t, dead, ws, key, "inst_killed", 10*usd+usd/2)
	killed := time.Now()
	_ = dead.Close()

	up := newFakeOpenAI(t, chatOK("ok", 10, 20))
	env := startPostgresGateway(t, dsn, "\t\tcredit_lease_linger 0\n\t\tinstance_heartbeat 200ms\n\t\tinstance_timeout 2s\n"+
		providerBlock("primary", up.URL)+pricedModel("gpt-test", pricedRoute("primary", "m")))
	env.store = openPostgres(t, dsn)

	status, _, body := env.post(key, "/chat/completions", chatHi)
	if status != http.StatusPaymentRequired || time.Since(killed) >= 2*time.Second {
		t.Fatalf("while the dead instance's heartbeat is fresh (%v): %d %s, want 402", time.Since(killed), status, body)
	}
	for {
		status, _, body = env.post(key, "/chat/completions", chatHi)
		if status == 200 {
			break
		}
		if status != http.StatusPaymentRequired || time.Since(killed) > 8*time.Second {
			t.Fatalf("%v after the instance died: %d %s", time.Since(killed), status, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(killed)
	t.Logf("admitted %v after the instance died (timeout 2s, heartbeat 200ms)", took)
	// The sweep frees the hold at the timeout plus a heartbeat; a loaded machine delays the
	// sweep's transaction, while a hold freed by anything else would take its 2 h expiry.
	if took > 4*time.Second {
		t.Errorf("admitted after %v, want within the timeout and a few heartbeats", took)
	}
	if up.calls.Load() != 1 {
		t.Fatalf("%d upstream calls, want only the admitted request's", up.calls.Load())
	}
	if b := env.balance(ws); b.ReservedNanos != 0 || b.BalanceNanos != 11*usd-chatHiCost {
		t.Fatalf("balance %+v", b)
	}
}

// With its PostgreSQL server cut off (a connection blackholed by a proxy), the gateway
// answers GET /health 503 within a second and requests 503 store_unavailable within
// store_timeout, without calling the upstream; once the server is reachable again it
// serves and bills again, with no restart, and no credit stays held.
func TestPostgresBlackholedStore(t *testing.T) {
	dsn := postgresSchema(t)
	setup := openPostgres(t, dsn)
	ws, seen := fundedKey(t, setup, 20*usd)
	unseen := newKeyIn(t, setup, ws)

	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := storetest.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	up := newFakeOpenAI(t, chatOK("ok", 10, 20))
	const storeTimeout = 300 * time.Millisecond
	env := startPostgresGateway(t, u.String(), "\t\tcredit_lease_linger 0\n\t\tstore_timeout 300ms\n\t\tsettle_timeout 5s\n"+
		"\t\tinstance_heartbeat 200ms\n\t\tinstance_timeout 1s\n"+providerBlock("primary", up.URL)+pricedModel("gpt-test", pricedRoute("primary", "m")))
	env.store = setup

	if status, _, body := env.post(seen, "/chat/completions", chatHi); status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	env.expect(200, http.MethodGet, "", "/health", "")

	proxy.Blackhole()
	if took, v := waitStatus(t, env, "/health", 503, 2*time.Second); took > time.Second {
		t.Errorf("/health 503 after %v, want within a second", took)
	} else {
		expectStoreUnavailable(t, "GET /health", 503, v)
	}
	env.expect(200, http.MethodGet, "", "/health/live", "")
	for _, key := range []string{unseen, seen} {
		began := time.Now()
		status, hdr, v := env.call(http.MethodPost, key, "/chat/completions", chatHi)
		took := time.Since(began)
		expectStoreUnavailable(t, "a request with the store cut off", status, v)
		if took > storeTimeout+500*time.Millisecond {
			t.Errorf("503 after %v, want within store_timeout (%v)", took, storeTimeout)
		}
		if hdr.Get("Retry-After") == "" {
			t.Error("no Retry-After on the 503")
		}
	}
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("%d upstream calls, want none while the store is cut off", n)
	}

	proxy.Restore()
	waitStatus(t, env, "/health", 200, 5*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for _, key := range []string{unseen, seen} {
		for {
			status, _, body := env.post(key, "/chat/completions", chatHi)
			if status == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("not serving again after the store came back: %d %s", status, body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// A reservation that may have been taken as the store went away is released in the
	// background: nothing stays held.
	charges := 3 * chatHiCost
	for deadline := time.Now().Add(5 * time.Second); ; {
		b, err := setup.GetBalance(context.Background(), ws)
		if err != nil {
			t.Fatal(err)
		}
		if b.ReservedNanos == 0 && b.BalanceNanos == 20*usd-int64(charges) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("balance %+v, want nothing held and three charges", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
