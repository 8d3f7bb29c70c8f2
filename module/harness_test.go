package module

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/modelgateway/caddy-modelgateway/handlers"
	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/sqlite"
)

// gatewayEnv is a real Caddy server running in this process with the gateway configured,
// plus a second handle on its SQLite store for setting up workspaces and checking results.
type gatewayEnv struct {
	t       *testing.T
	baseURL string // http://127.0.0.1:port
	dbPath  string
	store   store.Store
	// mgmt holds a management key per workspace, made by balance.
	mgmt map[string]string
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// gatewayCaddyfile renders a test Caddyfile: global gateway options (providers, models) and
// the handler's options. Credit leases do not linger unless gatewayBlock says otherwise, so
// that a wallet holds nothing once its requests are answered.
func gatewayCaddyfile(port int, dbPath, gatewayBlock, handlerBlock string) string {
	return gatewayCaddyfileOn(port, "sqlite "+dbPath, gatewayBlock, handlerBlock)
}

// gatewayCaddyfileOn is gatewayCaddyfile on the store storeArgs names ("sqlite <path>",
// "postgres <dsn>").
func gatewayCaddyfileOn(port int, storeArgs, gatewayBlock, handlerBlock string) string {
	if !strings.Contains(gatewayBlock, "credit_lease_linger") {
		gatewayBlock = "\t\tcredit_lease_linger 0\n" + gatewayBlock
	}
	return fmt.Sprintf(`{
	admin off
	persist_config off
	grace_period 1ns
	model_gateway {
		store %s
%s
	}
}

http://127.0.0.1:%d {
	route /v1/* {
		model_gateway {
%s
		}
	}
	respond "not the gateway" 418
}
`, storeArgs, gatewayBlock, port, handlerBlock)
}

// startGateway loads the configuration into the in-process Caddy and stops it at cleanup.
func startGateway(t *testing.T, gatewayBlock, handlerBlock string) *gatewayEnv {
	t.Helper()
	return startGatewayIn(t, t.TempDir(), gatewayBlock, handlerBlock)
}

// startGatewayIn is startGateway on the database and data directories under dir, which a
// gateway that ran before may have left.
func startGatewayIn(t *testing.T, dir, gatewayBlock, handlerBlock string) *gatewayEnv {
	t.Helper()
	setDataDirs(t, dir)
	port := freePort(t)
	env := &gatewayEnv{t: t, baseURL: fmt.Sprintf("http://127.0.0.1:%d", port), dbPath: filepath.Join(dir, "gateway.db")}
	loadCaddyfile(t, gatewayCaddyfile(port, env.dbPath, gatewayBlock, handlerBlock))
	t.Cleanup(func() { _ = caddy.Stop() })
	env.openStore()
	return env
}

// setDataDirs puts Caddy's data and configuration directories under dir.
func setDataDirs(t *testing.T, dir string) {
	t.Setenv("XDG_DATA_HOME", filepath.Join(dir, "data"))
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
}

// openStore gives the test its own handle on the gateway's SQLite store, closed at cleanup.
func (e *gatewayEnv) openStore() {
	e.t.Helper()
	s, err := sqlite.Open(context.Background(), e.dbPath)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = s.Close() })
	e.store = s
}

func loadCaddyfile(t *testing.T, cf string) {
	t.Helper()
	cfgJSON, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt(caddyfile.Format([]byte(cf)), nil)
	if err != nil {
		t.Fatalf("adapting: %v\n%s", err, cf)
	}
	for _, w := range warnings {
		t.Logf("caddyfile warning: %s", w.String())
	}
	if err := caddy.Load(cfgJSON, true); err != nil {
		t.Fatalf("loading: %v", err)
	}
	// The previous configuration's servers close their connections as they stop (the tests'
	// grace period is 1ns): do not reuse them.
	http.DefaultClient.CloseIdleConnections()
	testClient.CloseIdleConnections()
	// The old servers' accept loops stop just after Load returns; a connection they take in
	// that instant is reset. Let them finish.
	time.Sleep(50 * time.Millisecond)
}

// workspace creates a workspace with credits and returns a standard key for it.
func (e *gatewayEnv) workspace(creditsNanos int64) (wsID, key string) {
	e.t.Helper()
	ctx := context.Background()
	wsID = fmt.Sprintf("ws_test%d", time.Now().UnixNano())
	if err := e.store.CreateWorkspace(ctx, store.Workspace{ID: wsID, Name: "test", CreatedAt: time.Now()}); err != nil {
		e.t.Fatal(err)
	}
	if creditsNanos > 0 {
		if _, err := e.store.AddCredits(ctx, wsID, creditsNanos, "test"); err != nil {
			e.t.Fatal(err)
		}
	}
	return wsID, e.key(wsID, store.KeyStandard)
}

func (e *gatewayEnv) key(wsID string, kind store.KeyKind) string {
	e.t.Helper()
	k, plain, err := handlers.NewKey(wsID, kind, "test")
	if err != nil {
		e.t.Fatal(err)
	}
	k.CreatedAt = time.Now()
	if err := e.store.CreateKey(context.Background(), k); err != nil {
		e.t.Fatal(err)
	}
	return plain
}

// balance reads a workspace's wallet through the gateway (GET /credits, with a management
// key made for it on first use), which waits for the gateway's settlement journal: the
// test's own store would see journaled settlements only once the writer has applied them.
func (e *gatewayEnv) balance(wsID string) store.Balance {
	e.t.Helper()
	key, ok := e.mgmt[wsID]
	if !ok {
		key = e.key(wsID, store.KeyManagement)
		if e.mgmt == nil {
			e.mgmt = map[string]string{}
		}
		e.mgmt[wsID] = key
	}
	v := e.expect(http.StatusOK, http.MethodGet, key, "/credits", "")["data"].(map[string]any)
	balance, _ := v["balance_nanos"].(float64)
	reserved, _ := v["reserved_nanos"].(float64)
	return store.Balance{WorkspaceID: wsID, BalanceNanos: int64(balance), ReservedNanos: int64(reserved)}
}

// generation waits briefly for a generation record. The test's store is a second store on
// the gateway's database: the gateway's own reads wait for its settlement journal, this one
// sees a journaled settlement once the gateway's writer has applied it (within the 100 ms it
// gathers them, plus the commit).
func (e *gatewayEnv) generation(wsID, id string) store.Generation {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		g, err := e.store.GetGeneration(context.Background(), wsID, id)
		if err == nil {
			return g
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("generation %s: %v", id, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// doRetryingDial sends req, again if the connection was refused before anything was sent:
// right after a reload the old listener may still take a connection as it closes.
func doRetryingDial(req *http.Request) (*http.Response, error) {
	for i := 0; ; i++ {
		if req.GetBody != nil && i > 0 {
			req.Body, _ = req.GetBody()
		}
		resp, err := testClient.Do(req)
		var op *net.OpError
		if err == nil || i == 5 || !errors.As(err, &op) || op.Op != "dial" {
			return resp, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testClient is the HTTP client of raw requests and of the SDK clients. Keep-alives are off:
// tests reload the configuration, and a POST on a connection the old server is closing fails.
var testClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func (e *gatewayEnv) openai(key string, opts ...option.RequestOption) openai.Client {
	base := []option.RequestOption{option.WithBaseURL(e.baseURL + "/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0),
		option.WithRequestTimeout(20 * time.Second), option.WithHTTPClient(testClient)}
	return openai.NewClient(append(base, opts...)...)
}

// post sends a raw JSON request and returns status, headers and body.
func (e *gatewayEnv) post(key, path, body string) (int, http.Header, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.baseURL+"/v1"+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := doRetryingDial(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data
}

func (e *gatewayEnv) get(key, path string) (int, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.baseURL+"/v1"+path, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := doRetryingDial(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// fakeOpenAI is an upstream speaking the chat completions wire format. Its behaviour is a
// function so each test scripts its failures.
type fakeOpenAI struct {
	*httptest.Server
	calls    atomic.Int64
	mu       sync.Mutex
	bodies   []map[string]any
	headers  []http.Header
	behave   func(w http.ResponseWriter, r *http.Request, req map[string]any)
	canceled chan struct{}
}

func newFakeOpenAI(t *testing.T, behave func(w http.ResponseWriter, r *http.Request, req map[string]any)) *fakeOpenAI {
	f := &fakeOpenAI{behave: behave, canceled: make(chan struct{}, 16)}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.calls.Add(1)
		var req map[string]any
		data, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(data, &req)
		f.mu.Lock()
		f.bodies = append(f.bodies, req)
		f.headers = append(f.headers, r.Header.Clone())
		f.mu.Unlock()
		if r.URL.Path != "/v1/chat/completions" {
			http.Error(w, `{"error":{"message":"unknown path","type":"invalid_request_error"}}`, 404)
			return
		}
		f.behave(w, r, req)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeOpenAI) lastBody() map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bodies[len(f.bodies)-1]
}

func (f *fakeOpenAI) lastHeader() http.Header {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.headers[len(f.headers)-1]
}

// chatOK answers a non-streamed completion with fixed usage.
func chatOK(text string, prompt, completion int) func(w http.ResponseWriter, r *http.Request, req map[string]any) {
	return func(w http.ResponseWriter, r *http.Request, req map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		if req["stream"] == true {
			streamChat(w, req["model"].(string), strings.SplitAfter(text, " "), prompt, completion, 0)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "chatcmpl-upstream1", "object": "chat.completion", "created": 1700000000, "model": req["model"],
			"system_fingerprint": "fp_test", "unknown_future_field": map[string]any{"kept": true},
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text, "refusal": nil}, "logprobs": nil, "finish_reason": "stop"}},
			"usage": map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
				"prompt_tokens_details": map[string]any{"cached_tokens": 0}, "completion_tokens_details": map[string]any{"reasoning_tokens": 0}},
		})
	}
}

// streamChat writes an OpenAI chat stream: role chunk, one chunk per piece, a finish chunk,
// the usage chunk (choices: []) and [DONE].
func streamChat(w http.ResponseWriter, model string, pieces []string, prompt, completion int, gap time.Duration) {
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	chunk := func(delta map[string]any, finish any) {
		b, _ := json.Marshal(map[string]any{"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1700000000, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}, "usage": nil})
		fmt.Fprintf(w, "data: %s\n\n", b)
		fl.Flush()
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	for _, p := range pieces {
		time.Sleep(gap)
		chunk(map[string]any{"content": p}, nil)
	}
	chunk(map[string]any{}, "stop")
	b, _ := json.Marshal(map[string]any{"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1700000000, "model": model, "choices": []any{},
		"usage": map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}})
	fmt.Fprintf(w, "data: %s\n\n", b)
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
}

// upstreamError answers with OpenAI's error shape.
func upstreamError(status int, typ, code, msg string, header map[string]string) func(w http.ResponseWriter, r *http.Request, req map[string]any) {
	return func(w http.ResponseWriter, r *http.Request, req map[string]any) {
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}})
	}
}

// providerBlock is a Caddyfile provider entry for a fake upstream.
func providerBlock(name, baseURL string) string {
	return fmt.Sprintf(`
		provider %s {
			type openai
			base_url %s/v1
			api_key sk-upstream-secret-%s
			stream_idle_timeout 2s
			retries 0
			circuit_breaker off
		}`, name, baseURL, name)
}

// waitGoroutines waits for the goroutine count to come back to about where it was.
func waitGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= before+2 {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines leaked: %d before, %d after\n%s", before, n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}
