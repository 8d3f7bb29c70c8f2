package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/billing"
	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/sqlite"
)

const usdNanos = store.NanosPerUSD

// stubChat is a provider that can be routed to but is never called by these tests.
type stubChat struct{ name string }

func (p stubChat) Name() string { return p.name }
func (p stubChat) Chat(context.Context, *providers.Request) (*providers.Response, error) {
	return nil, errors.New("stub")
}
func (p stubChat) ChatStream(context.Context, *providers.Request) (providers.Stream, error) {
	return nil, errors.New("stub")
}

// stubEmbedder is a stub provider that serves embeddings as well.
type stubEmbedder struct{ stubChat }

func (p stubEmbedder) Embed(context.Context, *providers.EmbeddingRequest) (*providers.EmbeddingResponse, error) {
	return nil, errors.New("stub")
}

// adminGateway is a Gateway over a fresh SQLite store, served through ServeHTTP as the
// Caddy handler does.
type adminGateway struct {
	t *testing.T
	g *Gateway
	s store.Store
}

func newAdminGateway(t *testing.T, models []*Model, setup func(g *Gateway)) *adminGateway {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "gateway.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	reg, err := NewRegistry(models)
	if err != nil {
		t.Fatal(err)
	}
	g := &Gateway{Config: billing.Config{Store: s, JournalDir: filepath.Join(t.TempDir(), "settlements")}, Registry: reg}
	if setup != nil {
		setup(g)
	}
	g.Init()
	return &adminGateway{t: t, g: g, s: s}
}

// route is a Route through a stub provider with the given USD prices per million tokens.
func route(provider, upstream, input, output string) Route {
	var p pricing.Price
	if input != "" {
		p.Input, _ = pricing.ParseUSD(input)
		p.CachedInput, p.CacheWrite = p.Input, p.Input
	}
	if output != "" {
		p.Output, _ = pricing.ParseUSD(output)
		p.Reasoning = p.Output
	}
	return Route{ProviderName: provider, Provider: stubChat{provider}, UpstreamModel: upstream, Price: p}
}

// workspace creates a workspace with credits and a standard and a management key.
func (a *adminGateway) workspace(credits int64) (ws, std, mgmt string) {
	a.t.Helper()
	ctx := context.Background()
	ws = ids.New("ws")
	if err := a.s.CreateWorkspace(ctx, store.Workspace{ID: ws, Name: "team " + ws}); err != nil {
		a.t.Fatal(err)
	}
	if credits > 0 {
		if _, err := a.s.AddCredits(ctx, ws, credits, "test"); err != nil {
			a.t.Fatal(err)
		}
	}
	return ws, a.key(ws, store.KeyStandard, 0, ""), a.key(ws, store.KeyManagement, 0, "")
}

func (a *adminGateway) key(ws string, kind store.KeyKind, limit int64, reset string) string {
	a.t.Helper()
	k, plain, err := NewKey(ws, kind, string(kind))
	if err != nil {
		a.t.Fatal(err)
	}
	k.LimitNanos, k.LimitReset = limit, reset
	k.CreatedAt = a.g.Now()
	if err := a.s.CreateKey(context.Background(), k); err != nil {
		a.t.Fatal(err)
	}
	return plain
}

func kidOf(t *testing.T, plain string) string {
	t.Helper()
	pk, err := ParseKey(plain)
	if err != nil {
		t.Fatal(err)
	}
	return pk.ID
}

// do serves one request and decodes the JSON answer.
func (a *adminGateway) do(method, path, key, body string) (int, map[string]any) {
	a.t.Helper()
	status, _, v := a.doHeader(method, path, key, body)
	return status, v
}

func (a *adminGateway) doHeader(method, path, key, body string) (int, http.Header, map[string]any) {
	a.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, "http://gw/v1"+path, rd)
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	w := httptest.NewRecorder()
	a.g.ServeHTTP(w, r, r.URL.Path[len("/v1"):])
	var v map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		a.t.Fatalf("%s %s: answer is not a JSON object: %v\n%s", method, path, err, w.Body.String())
	}
	return w.Code, w.Header(), v
}

// mustDo is do that fails unless the status is want.
func (a *adminGateway) mustDo(want int, method, path, key, body string) map[string]any {
	a.t.Helper()
	status, v := a.do(method, path, key, body)
	if status != want {
		a.t.Fatalf("%s %s: status %d, want %d: %v", method, path, status, want, v)
	}
	return v
}

// wantError checks the spec's error shape, the status, the code and the param.
func wantError(t *testing.T, what string, status int, v map[string]any, wantStatus int, code, param string) {
	t.Helper()
	e, _ := v["error"].(map[string]any)
	if status != wantStatus || e == nil || e["code"] != code || v["ok"] != false || v["message"] == "" ||
		v["status_code"] != float64(wantStatus) || v["error_type"] == nil || v["error_origin"] == nil {
		t.Fatalf("%s: %d %v, want %d %s", what, status, v, wantStatus, code)
	}
	if param != "" && e["param"] != param {
		t.Fatalf("%s: param %v, want %s (%v)", what, e["param"], param, v)
	}
}

// ids lists the ids of a list answer's items.
func listIDs(v map[string]any) []string {
	var out []string
	for _, it := range v["data"].([]any) {
		out = append(out, it.(map[string]any)["id"].(string))
	}
	return out
}

// walk reads every page of a list and returns all ids, checking the envelope on the way.
func (a *adminGateway) walk(path, key string, limit int) []string {
	a.t.Helper()
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	var all []string
	after := ""
	for range 1000 {
		q := path + sep + "limit=" + strconv.Itoa(limit)
		if after != "" {
			q += "&after=" + after
		}
		v := a.mustDo(200, http.MethodGet, q, key, "")
		page := listIDs(v)
		if v["object"] != "list" || len(page) > limit {
			a.t.Fatalf("GET %s: envelope %v", q, v)
		}
		if len(page) > 0 && (v["first_id"] != page[0] || v["last_id"] != page[len(page)-1]) {
			a.t.Fatalf("GET %s: first_id %v last_id %v for %v", q, v["first_id"], v["last_id"], page)
		}
		all = append(all, page...)
		if v["has_more"] != true {
			return all
		}
		if len(page) != limit {
			a.t.Fatalf("GET %s: a short page (%d) says has_more", q, len(page))
		}
		after = page[len(page)-1]
	}
	a.t.Fatal("pagination never ended")
	return nil
}

// fixedClock is a Gateway clock tests move.
func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }
