package handlers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/modelgateway/caddy-modelgateway/billing"
	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/providers/mock"
	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/postgres"
)

// pgSchemaDSN makes a fresh schema on the test server and returns a DSN pointing at it. It
// skips without a server, except in CI.
func pgSchemaDSN(t *testing.T) string {
	t.Helper()
	base := os.Getenv("GATEWAY_TEST_POSTGRES_DSN")
	if base == "" {
		base = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL is unreachable and CI=true: %v", err)
		}
		t.Skipf("skipping: PostgreSQL is unreachable: %v", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	schema := "gwmulti_" + ids.Token(10)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			_ = c.Close(context.Background())
		}
	})
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	return base + sep + "search_path=" + schema
}

// Two gateway instances over one PostgreSQL database share a wallet: concurrent requests
// spread over both can never overspend it.
func TestTwoInstancesShareOneWallet(t *testing.T) {
	dsn := pgSchemaDSN(t)
	ctx := context.Background()
	price := pricing.Price{Input: store.NanosPerUSD, Output: 30_000 * store.NanosPerUSD}
	var gws []*Gateway
	for i := 0; i < 2; i++ {
		s, err := postgres.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		reg, err := NewRegistry([]*Model{{Name: "m", Routes: []Route{{
			ProviderName: "mock", Provider: mock.New(mock.Config{Name: "mock", Latency: 10 * time.Millisecond}),
			UpstreamModel: "m-1", Price: price, MaxOutputTokens: 26,
		}}}})
		if err != nil {
			t.Fatal(err)
		}
		g := &Gateway{Config: billing.Config{Store: s}, Registry: reg}
		g.Init()
		gws = append(gws, g)
	}
	s := gws[0].Store
	ws := ids.New("ws")
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: ws, Name: "shared"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddCredits(ctx, ws, 5*store.NanosPerUSD, "test"); err != nil {
		t.Fatal(err)
	}
	k, plain, _ := NewKey(ws, store.KeyStandard, "k")
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	var genIDs []string
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func(g *Gateway) {
			defer wg.Done()
			req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hello there"}]}`))
			req.Header.Set("Authorization", "Bearer "+plain)
			rec := httptest.NewRecorder()
			g.ServeHTTP(rec, req, "/chat/completions")
			mu.Lock()
			defer mu.Unlock()
			statuses[rec.Code]++
			if rec.Code == 200 {
				genIDs = append(genIDs, rec.Header().Get("X-Generation-Id"))
			}
		}(gws[i%2])
	}
	wg.Wait()
	if statuses[200] == 0 || statuses[402] == 0 || statuses[200]+statuses[402] != 40 {
		t.Fatalf("statuses %v", statuses)
	}
	var spent int64
	for _, id := range genIDs {
		g, err := s.GetGeneration(ctx, ws, id)
		if err != nil {
			t.Fatal(err)
		}
		spent += g.CostNanos
	}
	b, err := s.GetBalance(ctx, ws)
	if err != nil {
		t.Fatal(err)
	}
	if b.BalanceNanos < 0 || b.ReservedNanos != 0 || b.BalanceNanos != 5*store.NanosPerUSD-spent || spent == 0 {
		t.Fatalf("balance %+v, spent %d over %d answers", b, spent, len(genIDs))
	}
}
