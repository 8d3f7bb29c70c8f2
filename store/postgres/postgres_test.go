package postgres

import (
	"context"
	"errors"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/storetest"
)

// defaultTestDSN is used unless GATEWAY_TEST_POSTGRES_DSN is set.
const defaultTestDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

func testDSN() string {
	if dsn := os.Getenv("GATEWAY_TEST_POSTGRES_DSN"); dsn != "" {
		return dsn
	}
	return defaultTestDSN
}

var (
	reachOnce sync.Once
	reachErr  error
)

// requireServer skips the test when no server answers, except in CI, where a missing
// database must not pass silently.
func requireServer(t testing.TB) {
	t.Helper()
	reachOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, testDSN())
		if err == nil {
			err = conn.Ping(ctx)
			_ = conn.Close(ctx)
		}
		reachErr = err
	})
	if reachErr == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("PostgreSQL is unreachable and CI=true: %v", reachErr)
	}
	t.Skipf("skipping: PostgreSQL is unreachable (%v); start one or set GATEWAY_TEST_POSTGRES_DSN", reachErr)
}

// adminExec runs one statement outside any store, for schema set-up and tampering.
func adminExec(t testing.TB, dsn, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// freshSchema creates a uniquely named schema, dropped when t ends, and returns a DSN
// whose search_path points at it, so parallel runs never see each other's tables.
func freshSchema(t testing.TB) string {
	t.Helper()
	requireServer(t)
	base := testDSN()
	schema := pgx.Identifier{"gwtest_" + ids.Token(12)}.Sanitize()
	adminExec(t, base, "CREATE SCHEMA "+schema)
	t.Cleanup(func() { adminExec(t, base, "DROP SCHEMA "+schema+" CASCADE") })
	return withParam(t, base, "search_path", strings.Trim(schema, `"`))
}

// withParam adds a setting to a URL or key=value DSN.
func withParam(t testing.TB, dsn, key, value string) string {
	t.Helper()
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatalf("parsing test DSN: %v", err)
		}
		q := u.Query()
		q.Set(key, value)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " " + key + "=" + value
}

func openStore(t testing.TB, dsn string, opts ...Option) *Store {
	t.Helper()
	s, err := Open(context.Background(), dsn, opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	requireServer(t)
	storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
		return openStore(t, freshSchema(t), WithClock(now))
	})
}

func TestMigrations(t *testing.T) {
	ctx := context.Background()
	dsn := freshSchema(t)

	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: "ws_1", Name: "kept"}); err != nil {
		t.Fatalf("CreateWorkspace: %v", err)
	}
	_ = s.Close()

	// Reopening applies nothing twice and keeps the data.
	s = openStore(t, dsn)
	var versions, latest int
	err = s.withConn(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT COUNT(*), MAX(version) FROM schema_version`).Scan(&versions, &latest)
	})
	if err != nil {
		t.Fatalf("reading schema_version: %v", err)
	}
	if versions != latest {
		t.Errorf("schema_version has %d rows up to version %d, want one row per version", versions, latest)
	}
	if ws, err := s.GetWorkspace(ctx, "ws_1"); err != nil || ws.Name != "kept" {
		t.Fatalf("after reopen GetWorkspace = %+v, %v", ws, err)
	}

	// A newer gateway migrated this schema: this one must refuse it rather than guess.
	err = s.withConn(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `INSERT INTO schema_version (version) VALUES ($1)`, latest+1)
		return err
	})
	if err != nil {
		t.Fatalf("faking a newer schema: %v", err)
	}
	s2, err := Open(ctx, dsn)
	if !errors.Is(err, store.ErrSchemaTooNew) {
		if s2 != nil {
			_ = s2.Close()
		}
		t.Fatalf("Open on a newer schema: error = %v, want ErrSchemaTooNew", err)
	}
}

// TestConcurrentOpenAndInstances starts several instances on one empty schema at once,
// as a rolling deploy would, then races reservations across them.
func TestConcurrentOpenAndInstances(t *testing.T) {
	ctx := context.Background()
	dsn := freshSchema(t)
	stores := make([]*Store, 4)
	var wg sync.WaitGroup
	for i := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(ctx, dsn)
			if err != nil {
				t.Errorf("Open %d: %v", i, err)
				return
			}
			stores[i] = s
		}()
	}
	wg.Wait()
	for _, s := range stores {
		if s != nil {
			t.Cleanup(func() { _ = s.Close() })
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	if err := stores[0].CreateWorkspace(ctx, store.Workspace{ID: "ws_1"}); err != nil {
		t.Fatalf("CreateWorkspace: %v", err)
	}
	if _, err := stores[1].AddCredits(ctx, "ws_1", 10*store.NanosPerUSD, ""); err != nil {
		t.Fatalf("AddCredits: %v", err)
	}
	var mu sync.Mutex
	var won []store.Reservation
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := stores[i%len(stores)].Reserve(ctx, store.ReserveParams{
				WorkspaceID: "ws_1", AmountNanos: store.NanosPerUSD, ExpiresAt: time.Now().Add(time.Hour),
			})
			if errors.Is(err, store.ErrInsufficientFunds) {
				return
			}
			if err != nil {
				t.Errorf("Reserve: %v", err)
				return
			}
			mu.Lock()
			won = append(won, r)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(won) != 10 {
		t.Fatalf("%d reservations of 1 USD succeeded against 10 USD across instances, want 10", len(won))
	}

	// Settle each reservation twice at once from two instances: exactly one wins.
	var settled, refused int
	for i, r := range won {
		for j := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := stores[(i+j)%len(stores)].Settle(ctx, store.SettleParams{ReservationID: r.ID, Generation: &store.Generation{
					WorkspaceID: "ws_1", CostNanos: store.NanosPerUSD / 2,
				}})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					settled++
				case errors.Is(err, store.ErrNotFound):
					refused++
				default:
					t.Errorf("Settle: %v", err)
				}
			}()
		}
	}
	wg.Wait()
	if settled != 10 || refused != 10 {
		t.Errorf("settled %d and refused %d, want 10 and 10", settled, refused)
	}
	b, err := stores[3].GetBalance(ctx, "ws_1")
	if err != nil {
		t.Fatalf("GetBalance: %v", err)
	}
	if b.BalanceNanos != 5*store.NanosPerUSD || b.ReservedNanos != 0 {
		t.Errorf("balance %+v, want 5 USD and nothing reserved", b)
	}
}

func TestLedgerIsAppendOnly(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, freshSchema(t))
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: "ws_1"}); err != nil {
		t.Fatalf("CreateWorkspace: %v", err)
	}
	if _, err := s.AddCredits(ctx, "ws_1", store.NanosPerUSD, "grant"); err != nil {
		t.Fatalf("AddCredits: %v", err)
	}
	tests := []struct{ name, sql string }{
		{"update", `UPDATE ledger SET amount_nanos = 0`},
		{"delete", `DELETE FROM ledger`},
		{"truncate", `TRUNCATE ledger`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := s.withConn(ctx, func(conn *pgx.Conn) error {
				_, err := conn.Exec(ctx, tc.sql)
				return err
			})
			if err == nil {
				t.Fatalf("%s on the ledger succeeded", tc.name)
			}
		})
	}
	var sum int64
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT SUM(amount_nanos) FROM ledger WHERE workspace_id = 'ws_1'`).Scan(&sum)
	})
	if err != nil {
		t.Fatalf("summing ledger: %v", err)
	}
	if sum != store.NanosPerUSD {
		t.Errorf("ledger sum = %d, want %d", sum, store.NanosPerUSD)
	}
}

// TestOpenPoolSettings checks that pgxpool's pool_* settings reach the pool and are not
// sent on to the server, which would refuse them as unknown parameters.
func TestOpenPoolSettings(t *testing.T) {
	dsn := freshSchema(t)
	tests := []struct {
		name     string
		key, val string
		check    func(*pgxpool.Config) bool
		wantErr  bool
	}{
		{"max conns", "pool_max_conns", "2", func(c *pgxpool.Config) bool { return c.MaxConns == 2 }, false},
		{"min conns", "pool_min_conns", "1", func(c *pgxpool.Config) bool { return c.MinConns == 1 }, false},
		{"max conn lifetime", "pool_max_conn_lifetime", "90m", func(c *pgxpool.Config) bool { return c.MaxConnLifetime == 90*time.Minute }, false},
		{"bad max conns", "pool_max_conns", "many", nil, true},
		{"zero max conns", "pool_max_conns", "0", nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(context.Background(), withParam(t, dsn, tc.key, tc.val))
			if tc.wantErr {
				if err == nil {
					_ = s.Close()
					t.Fatal("Open succeeded, want an error")
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer func() { _ = s.Close() }()
			if cfg := s.pool.Config(); !tc.check(cfg) {
				t.Errorf("%s=%s not applied: MaxConns=%d MinConns=%d MaxConnLifetime=%v",
					tc.key, tc.val, cfg.MaxConns, cfg.MinConns, cfg.MaxConnLifetime)
			}
		})
	}
}

// TestPoolReplacesDeadConnections kills the store's idle server connections, as a
// database restart would, and expects the next call to reconnect rather than fail.
func TestPoolReplacesDeadConnections(t *testing.T) {
	ctx := context.Background()
	dsn := freshSchema(t)
	cfg, err := pgxpool.ParseConfig(withParam(t, dsn, "application_name", "gwtest_victim_"+ids.Token(8)))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	// By default pgxpool pings only connections idle for over a second; check every one
	// so the test need not wait.
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return true }
	s, err := openConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: "ws_1"}); err != nil {
		t.Fatalf("CreateWorkspace: %v", err)
	}
	var app string
	err = s.withConn(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT current_setting('application_name')`).Scan(&app)
	})
	if err != nil {
		t.Fatalf("reading application_name: %v", err)
	}
	adminExec(t, testDSN(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '`+app+`'`)

	if _, err := s.GetWorkspace(ctx, "ws_1"); err != nil {
		t.Fatalf("GetWorkspace after the server dropped the connection: %v", err)
	}
}

func TestClosedStore(t *testing.T) {
	s, err := Open(context.Background(), freshSchema(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	_ = s.Close()
	if _, err := s.GetWorkspace(context.Background(), "ws_1"); !errors.Is(err, errClosed) {
		t.Errorf("GetWorkspace on a closed store: error = %v, want errClosed", err)
	}
}

// proxied returns dsn with its server reached through a storetest.Proxy.
func proxied(t *testing.T, dsn string) (string, *storetest.Proxy) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		t.Skipf("the test DSN is not a URL with a host: %v", err)
	}
	p := storetest.NewProxy(t, u.Host)
	u.Host = p.Addr()
	return u.String(), p
}

// A server that stops answering (a partition) fails calls as store.ErrUnavailable when
// their context ends, not later; once it answers again, so does the store, with no reopening.
func TestBlackholedServer(t *testing.T) {
	ctx := context.Background()
	dsn, p := proxied(t, freshSchema(t))
	s := openStore(t, dsn)
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: "ws_1", Name: "w"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddCredits(ctx, "ws_1", 10*store.NanosPerUSD, "test"); err != nil {
		t.Fatal(err)
	}
	bounded := func(what string, call func(ctx context.Context) error) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		began := time.Now()
		err := call(cctx)
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("%s through a black hole: %v, want store.ErrUnavailable", what, err)
		}
		if d := time.Since(began); d > time.Second {
			t.Fatalf("%s through a black hole took %v", what, d)
		}
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	p.Blackhole()
	bounded("Ping", s.Ping)
	bounded("Reserve", func(ctx context.Context) error {
		_, err := s.Reserve(ctx, store.ReserveParams{WorkspaceID: "ws_1", AmountNanos: 1, ExpiresAt: time.Now().Add(time.Hour)})
		return err
	})
	bounded("GetKey", func(ctx context.Context) error {
		_, err := s.GetKey(ctx, "k")
		return err
	})
	p.Restore()
	deadline := time.Now().Add(5 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := s.Reserve(cctx, store.ReserveParams{WorkspaceID: "ws_1", AmountNanos: 1, ExpiresAt: time.Now().Add(time.Hour)})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store did not recover: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if b, err := s.GetBalance(ctx, "ws_1"); err != nil || b.ReservedNanos < 1 {
		t.Fatalf("balance after recovery %+v, %v", b, err)
	}
}

// TestClaimsAcrossInstances claims one queue from two stores over one schema, as two
// gateway instances would: no item is held by two claimers.
func TestClaimsAcrossInstances(t *testing.T) {
	dsn := freshSchema(t)
	storetest.ClaimersNeverShare(t, openStore(t, dsn), openStore(t, dsn))
}
