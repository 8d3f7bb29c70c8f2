package module

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/modelgateway/caddy-modelgateway/store/sqlite"
)

// TestUnsetCredentialIsRefusedAtOnce: a provider whose api_key names an unset environment
// variable is refused with credentials_not_configured, and the upstream never hears of it.
func TestUnsetCredentialIsRefusedAtOnce(t *testing.T) {
	up := newScripted(t, func(int) behaviour { return chatOK("should not be asked", 1, 1) })
	env := startGateway(t, unsetKeyProvider(t, "nokey", up.URL)+pricedModel("m", pricedRoute("nokey", "x")), "")
	_, key := env.workspace(5 * usd)
	for _, stream := range []bool{false, true} {
		began := time.Now()
		status, _, body := env.post(key, "/chat/completions", chatReq("m", stream))
		var v struct {
			Error        any `json:"error"`
			AttemptCount int `json:"attempt_count"`
			Diagnostics  struct {
				Category string `json:"category"`
			} `json:"provider_failure_diagnostics"`
		}
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("%d %s", status, body)
		}
		if status < 400 || v.Diagnostics.Category != "credentials_not_configured" || v.AttemptCount != 1 {
			t.Fatalf("stream %v: %d %s", stream, status, body)
		}
		if took := time.Since(began); took > 2*time.Second {
			t.Fatalf("refused after %s", took)
		}
	}
	if n := up.calls.Load(); n != 0 {
		t.Fatalf("the upstream was called %d times", n)
	}
}

// TestHeadOnGetRoutes: HEAD answers wherever GET does, with GET's status and headers and
// no body; a POST-only route names HEAD nowhere in Allow.
func TestHeadOnGetRoutes(t *testing.T) {
	env := startGateway(t, `
		provider mk {
			type mock
		}`+pricedModel("m", pricedRoute("mk", "x")), "")
	_, key := env.workspace(5 * usd)
	head := func(path, key string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodHead, env.baseURL+"/v1"+path, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := doRetryingDial(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if b, _ := io.ReadAll(resp.Body); len(b) != 0 {
			t.Fatalf("HEAD %s answered a body: %q", path, b)
		}
		return resp
	}
	for _, path := range []string{"/models", "/gateway/models", "/providers", "/pricing/models", "/key", "/health"} {
		resp := head(path, key)
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Errorf("HEAD %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	if resp := head("/models", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("HEAD /models without a key: %d", resp.StatusCode)
	}
	resp := head("/chat/completions", key)
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Errorf("HEAD /chat/completions: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	resp = head("/keys", key)
	if allow := resp.Header.Get("Allow"); resp.StatusCode != http.StatusForbidden && !strings.Contains(allow, "HEAD") {
		t.Errorf("HEAD /keys with a standard key: %d, Allow %q", resp.StatusCode, allow)
	}
}

// TestNoCredentialInLogs: with Caddy's access log on (as the README configures it) and
// every log of the process at debug level, no gateway key, sent as a bearer token or as
// x-api-key, valid or not, and no upstream key reaches a log line.
func TestNoCredentialInLogs(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_DATA_HOME", filepath.Join(dir, "data"))
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	accessLog, processLog := filepath.Join(dir, "access.log"), filepath.Join(dir, "process.log")
	down := newScripted(t, func(int) behaviour { return upstreamError(500, "server_error", "", "boom", nil) })
	port := freePort(t)
	env := &gatewayEnv{t: t, baseURL: fmt.Sprintf("http://127.0.0.1:%d", port), dbPath: filepath.Join(dir, "gateway.db")}
	loadCaddyfile(t, fmt.Sprintf(`{
%s
	model_gateway {
		store sqlite %s
		credit_lease_linger 0
		provider down {
			type openai
			base_url %s/v1
			api_key sk-upstream-very-secret
			retries 1
			retry_backoff 1ms 2ms
		}
		provider mk {
			type mock
		}
		model m {
			route down x {
				input 1
				output 1
			}
			route mk x {
				input 1
				output 1
			}
		}
	}
}

http://127.0.0.1:%d {
	log {
		output file %s
		format filter {
			request>headers>X-Api-Key replace REDACTED
		}
	}
	route /v1/* {
		model_gateway
	}
}
`, loggedGlobals(processLog, "level DEBUG"), env.dbPath, down.URL, port, accessLog))
	t.Cleanup(func() { _ = caddy.Stop() })
	s, err := sqlite.Open(context.Background(), env.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	env.store = s
	_, key := env.workspace(5 * usd)
	secret := key[strings.LastIndex(key, "_")+1:]
	wrong := key[:len(key)-4] + "abcd"

	send := func(path, body string, header http.Header) {
		t.Helper()
		method := http.MethodGet
		if body != "" {
			method = http.MethodPost
		}
		req, _ := http.NewRequest(method, env.baseURL+"/v1"+path, strings.NewReader(body))
		req.Header = header
		resp, err := doRetryingDial(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	for _, k := range []string{key, wrong} {
		for _, h := range []http.Header{{"Authorization": {"Bearer " + k}}, {"X-Api-Key": {k}}} {
			send("/chat/completions", chatReq("m", false), h)
			send("/chat/completions", chatReq("m", true), h)
			send("/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, h)
			send("/models", "", h)
			send("/nowhere", "", h)
		}
	}
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	logs := map[string]string{}
	for _, path := range []string{accessLog, processLog} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		logs[path] = string(b)
	}
	if !strings.Contains(logs[accessLog], "/v1/chat/completions") || !strings.Contains(logs[accessLog], "X-Api-Key") {
		t.Fatalf("the access log has not logged the requests:\n%s", logs[accessLog])
	}
	for path, text := range logs {
		for _, s := range []string{secret, wrong[strings.LastIndex(wrong, "_")+1:], "sk-upstream-very-secret"} {
			if i := strings.Index(text, s); i >= 0 {
				t.Errorf("%s holds a credential: ...%s...", filepath.Base(path), text[max(0, i-80):min(len(text), i+len(s)+20)])
			}
		}
	}
}
