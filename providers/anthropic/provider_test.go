package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamtest"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// A released answer's buffer is overwritten: a decoded answer still referring to it fails
// the package's tests.
func init() { upstreamhttp.ScribbleReleased = true }

const testKey = "sk-ant-api03-secret-test-key"

// newTestProvider returns a provider of the fake upstream at url, with its own transport so
// that its idle connections can be closed.
func newTestProvider(t *testing.T, url string, mutate ...func(*Config)) *Provider {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return upstreamtest.NewProvider(t, New, Config{Name: "claude", BaseURL: url, APIKey: testKey, Transport: tr}, mutate...)
}

var hello = &providers.Request{
	Model:    "claude-sonnet-4-5",
	Messages: []providers.Message{{Role: providers.RoleUser, Content: []providers.Part{text("Hello")}}},
}

func TestNew(t *testing.T) {
	p, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != "anthropic" || p.url != "https://api.anthropic.com/v1/messages" || p.up.Header.Get("Anthropic-Version") != "2023-06-01" ||
		p.idle != DefaultStreamIdleTimeout || p.maxTokens != DefaultMaxTokens || p.up.Header.Get("X-Api-Key") != "" {
		t.Errorf("defaults: %+v", p)
	}
	for _, cfg := range []Config{
		{BaseURL: "ftp://x"}, {BaseURL: "/relative"}, {Timeout: -1}, {DefaultMaxTokens: -1}, {APIKey: "a\nb"},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	if got := (&Provider{}).Formats(); len(got) != 1 || got[0] != providers.FormatAnthropic {
		t.Errorf("Formats = %v", got)
	}
}

func TestChat(t *testing.T) {
	var got struct {
		path, key, version, accept, beta string
		body                             map[string]any
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.path, got.key, got.version, got.accept = r.URL.Path, r.Header.Get("X-Api-Key"), r.Header.Get("Anthropic-Version"), r.Header.Get("Accept")
		got.beta = r.Header.Get("Anthropic-Beta")
		_ = json.NewDecoder(r.Body).Decode(&got.body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Request-Id", "req_011")
		_, _ = io.WriteString(w, messageResponse)
	}))
	defer srv.Close()
	p := newTestProvider(t, srv.URL+"/", func(c *Config) {
		c.Version = "2024-01-01"
		c.DefaultMaxTokens = 1000
		c.Headers = map[string]string{"Anthropic-Beta": "tools-2024", "X-Api-Key": "overridden"}
	})
	resp, err := p.Chat(context.Background(), hello)
	if err != nil {
		t.Fatal(err)
	}
	if got.path != "/v1/messages" || got.key != testKey || got.version != "2024-01-01" || got.accept != "application/json" || got.beta != "tools-2024" {
		t.Errorf("request: %+v", got)
	}
	if got.body["max_tokens"] != 1000.0 || got.body["stream"] != nil || got.body["model"] != "claude-sonnet-4-5" {
		t.Errorf("body: %v", got.body)
	}
	// The whole answer, read after its body's buffer was released and overwritten (init):
	// nothing of it may refer to that buffer.
	if resp.ID != "msg_01XFDUDYJgAACzvnptvVoYEL" || resp.Model != "claude-sonnet-4-5-20250929" || resp.Text != "Checking now." ||
		len(resp.ToolCalls) != 2 || resp.ToolCalls[0].ID == "" || resp.ToolCalls[0].Name == "" || resp.Usage.CacheRead != 3000 {
		t.Errorf("response: %+v", resp)
	}
}

func TestChatMalformed(t *testing.T) {
	cases := []struct {
		body string
		cat  providers.Category
		typ  string
	}{
		{`<html>oops</html>`, providers.CategoryServerError, ""},
		{`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, providers.CategoryServerError, "overloaded_error"},
	}
	for _, tc := range cases {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, tc.body)
		}))
		_, err := newTestProvider(t, srv.URL).Chat(context.Background(), hello)
		srv.Close()
		ue, ok := providers.AsUpstreamError(err)
		if !ok || ue.Category != tc.cat || ue.Type != tc.typ || !ue.Retryable {
			t.Errorf("%s: err = %#v", tc.body, err)
		}
	}
}

// errorBody is Anthropic's error body.
func errorBody(typ, msg string) string {
	return `{"type":"error","error":{"type":"` + typ + `","message":"` + msg + `"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`
}

func TestErrors(t *testing.T) {
	cases := []struct {
		name       string
		status     int
		header     map[string]string
		body       string
		noKey      bool
		cat        providers.Category
		retryable  bool
		code       string
		retryAfter time.Duration
		timeout    bool
	}{
		{name: "400 invalid request", status: 400, body: errorBody("invalid_request_error", "messages: text content blocks must be non-empty"),
			cat: providers.CategoryInvalidRequest, code: "invalid_request_error"},
		{name: "400 prompt too long", status: 400, body: errorBody("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"),
			cat: providers.CategoryInvalidRequest, code: "context_length_exceeded"},
		{name: "400 credit balance", status: 400, body: errorBody("invalid_request_error", "Your credit balance is too low to access the Anthropic API."),
			cat: providers.CategoryAccessMissing, code: "invalid_request_error"},
		{name: "401 bad key", status: 401, body: errorBody("authentication_error", "invalid x-api-key"),
			cat: providers.CategoryCredentialsInvalid, code: "authentication_error"},
		{name: "401 no key configured", status: 401, noKey: true, body: errorBody("authentication_error", "x-api-key header is required"),
			cat: providers.CategoryCredentialsNotConfigured, code: "authentication_error"},
		{name: "402 billing", status: 402, body: errorBody("billing_error", "Payment required"),
			cat: providers.CategoryAccessMissing, code: "billing_error"},
		{name: "403 permission", status: 403, body: errorBody("permission_error", "Your API key does not have permission to use the specified resource."),
			cat: providers.CategoryCredentialsInvalid, code: "permission_error"},
		{name: "404 model", status: 404, body: errorBody("not_found_error", "model: claude-nope"),
			cat: providers.CategoryModelUnavailable, code: "not_found_error"},
		{name: "413 too large", status: 413, body: errorBody("request_too_large", "Request exceeds the maximum allowed number of bytes."),
			cat: providers.CategoryInvalidRequest, code: "request_too_large"},
		{name: "413 from the proxy in front", status: 413, body: "<html><body>413 Request Entity Too Large</body></html>",
			cat: providers.CategoryInvalidRequest, code: "request_too_large"},
		{name: "429 with retry-after", status: 429, header: map[string]string{"Retry-After": "7"},
			body: errorBody("rate_limit_error", "This request would exceed the rate limit for your organization of 50 requests per minute."),
			cat:  providers.CategoryRateLimited, retryable: true, code: "rate_limit_error", retryAfter: 7 * time.Second},
		{name: "429 without retry-after", status: 429,
			body: errorBody("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"),
			cat:  providers.CategoryRateLimited, retryable: true, code: "rate_limit_error"},
		{name: "429 spend cap", status: 429,
			body: errorBody("rate_limit_error", "You have reached your monthly spend limit for this workspace."),
			cat:  providers.CategoryAccessMissing, code: "rate_limit_error"},
		{name: "429 spend cap by error code", status: 429, header: map[string]string{"Retry-After": "60"},
			body: `{"type":"error","error":{"type":"rate_limit_error","message":"limit reached","details":{"error_code":"enforced_spend_limit_reached"}}}`,
			cat:  providers.CategoryAccessMissing, code: "rate_limit_error", retryAfter: time.Minute},
		{name: "500 api error", status: 500, body: errorBody("api_error", "Internal server error"),
			cat: providers.CategoryServerError, retryable: true, code: "api_error"},
		{name: "504 timeout", status: 504, body: errorBody("timeout_error", "Request timed out"),
			cat: providers.CategoryServerError, retryable: true, code: "timeout_error", timeout: true},
		{name: "529 overloaded", status: 529, header: map[string]string{"Retry-After-Ms": "1500"}, body: errorBody("overloaded_error", "Overloaded"),
			cat: providers.CategoryServerError, retryable: true, code: "overloaded_error", retryAfter: 1500 * time.Millisecond},
		{name: "redirect", status: 307, header: map[string]string{"Location": "https://evil.test/"}, body: "",
			cat: providers.CategoryServerError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				// An upstream that echoes the key must not leak it through the error.
				_, _ = io.WriteString(w, strings.Replace(tc.body, "invalid x-api-key", "invalid x-api-key "+r.Header.Get("X-Api-Key"), 1))
			}))
			defer srv.Close()
			p := newTestProvider(t, srv.URL, func(c *Config) {
				if tc.noKey {
					c.APIKey = ""
				}
			})
			for _, stream := range []bool{false, true} {
				var err error
				if stream {
					_, err = p.ChatStream(context.Background(), hello)
				} else {
					_, err = p.Chat(context.Background(), hello)
				}
				ue, ok := providers.AsUpstreamError(err)
				if !ok {
					t.Fatalf("stream %v: err = %v, not an UpstreamError", stream, err)
				}
				if ue.Status != tc.status || ue.Category != tc.cat || ue.Retryable != tc.retryable || ue.Code != tc.code ||
					ue.RetryAfter != tc.retryAfter || ue.Timeout != tc.timeout || ue.Provider != "claude" {
					t.Errorf("stream %v: got %+v", stream, ue)
				}
				if strings.HasPrefix(tc.body, "{") && (ue.Message == "" || ue.Type != tc.code && tc.code != "context_length_exceeded") {
					t.Errorf("message/type not read: %+v", ue)
				}
				if strings.Contains(ue.Error(), testKey) || strings.Contains(ue.Payload, testKey) || strings.Contains(ue.Message, testKey) {
					t.Errorf("the API key leaked into the error: %+v", ue)
				}
			}
		})
	}
}

func TestConnectionRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	p := newTestProvider(t, "http://"+addr)
	_, err = p.Chat(context.Background(), hello)
	ue, ok := providers.AsUpstreamError(err)
	if !ok || ue.Status != 0 || ue.Category != providers.CategoryServerError || !ue.Retryable || ue.Err == nil {
		t.Fatalf("err = %#v", err)
	}
	if strings.Contains(err.Error(), testKey) {
		t.Error("key in error")
	}
	if _, err := p.ChatStream(context.Background(), hello); err == nil {
		t.Error("stream to a closed port succeeded")
	}
}

func TestAttemptTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	p := newTestProvider(t, srv.URL, func(c *Config) { c.Timeout = 50 * time.Millisecond })
	_, err := p.Chat(context.Background(), hello)
	ue, ok := providers.AsUpstreamError(err)
	if !ok || !ue.Timeout || !ue.Retryable || ue.Status != 0 || !errors.Is(err, ErrAttemptTimeout) {
		t.Fatalf("err = %#v", err)
	}
}

func TestCancelBeforeHeaders(t *testing.T) {
	seen := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // the server notices a client gone only once the body is read
		<-r.Context().Done()
		close(seen)
	}))
	defer srv.Close()
	p := newTestProvider(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := p.ChatStream(ctx, hello)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's error", err)
	}
	if _, ok := providers.AsUpstreamError(err); ok {
		t.Fatalf("caller cancellation reported as an upstream failure: %v", err)
	}
	select {
	case <-seen:
	case <-time.After(2 * time.Second):
		t.Fatal("the upstream never saw the cancellation")
	}
}

func TestForward(t *testing.T) {
	body := []byte(`{"model":"claude-x","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"stream":true}`)
	var gotBody []byte
	var gotHeader http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotBody, _ = io.ReadAll(r.Body)
		gotHeader = r.Header.Clone()
		if bytes.Contains(gotBody, []byte(`"fail"`)) {
			w.WriteHeader(529)
			_, _ = io.WriteString(w, errorBody("overloaded_error", "Overloaded"))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	}))
	defer srv.Close()
	p := newTestProvider(t, srv.URL)
	in := http.Header{}
	in.Set("Anthropic-Beta", "interleaved-thinking-2025-05-14")
	in.Set("X-Api-Key", "client-key")
	in.Set("Authorization", "Bearer client-token")
	in.Set("Cookie", "session=1")
	in.Set("Anthropic-Version", "1999-01-01")
	resp, err := p.Forward(context.Background(), &providers.RawRequest{Format: providers.FormatAnthropic, Body: body, Stream: true, Header: in})
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || !strings.Contains(string(out), "message_stop") || resp.Status != 200 {
		t.Fatalf("forwarded answer %q, %v", out, err)
	}
	if !bytes.Equal(gotBody, body) {
		t.Errorf("body changed: %s", gotBody)
	}
	if gotHeader.Get("Anthropic-Beta") != "interleaved-thinking-2025-05-14" || gotHeader.Get("X-Api-Key") != testKey ||
		gotHeader.Get("Authorization") != "" || gotHeader.Get("Cookie") != "" || gotHeader.Get("Anthropic-Version") != DefaultVersion ||
		gotHeader.Get("Accept") != "text/event-stream" {
		t.Errorf("upstream headers: %v", gotHeader)
	}
	_, err = p.Forward(context.Background(), &providers.RawRequest{Format: providers.FormatAnthropic, Body: []byte(`{"fail":1}`)})
	if ue, ok := providers.AsUpstreamError(err); !ok || ue.Status != 529 || ue.Category != providers.CategoryServerError {
		t.Errorf("err = %v", err)
	}
	if _, err := p.Forward(context.Background(), &providers.RawRequest{Format: providers.FormatOpenAIChat, Body: body}); err == nil {
		t.Error("forwarded a chat body")
	}
}
