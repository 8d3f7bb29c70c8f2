package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamtest"
	"github.com/modelgateway/caddy-modelgateway/providers/sse"
)

// A released answer's buffer is overwritten: a decoded answer still referring to it fails
// the package's tests.
func init() { upstreamhttp.ScribbleReleased = true }

// checkGoroutines fails the test when goroutines started during it are still running at
// its end. Register it before the server and the transport, so that it runs after their
// cleanups. Tests of this package do not run in parallel, which keeps the count meaningful.
func checkGoroutines(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(3 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				var buf bytes.Buffer
				_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
				t.Fatalf("goroutines leaked: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// upstream is a fake OpenAI-compatible server.
type upstream struct {
	*httptest.Server
	transport *http.Transport
	requests  chan *recorded
}

type recorded struct {
	header http.Header
	body   []byte
	path   string
}

func newUpstream(t *testing.T, h http.HandlerFunc) *upstream {
	t.Helper()
	u := &upstream{requests: make(chan *recorded, 16)}
	u.Server, u.transport = upstreamtest.NewServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.requests <- &recorded{header: r.Header.Clone(), body: body, path: r.URL.Path}
		h(w, r)
	})
	return u
}

func (u *upstream) provider(t *testing.T, mod func(*Config)) *Provider {
	t.Helper()
	return upstreamtest.NewProvider(t, New, Config{Name: "test", BaseURL: u.URL + "/v1", APIKey: "sk-test-secret", Transport: u.transport}, mod)
}

func (u *upstream) last(t *testing.T) *recorded {
	t.Helper()
	return upstreamtest.Next(t, u.requests)
}

// sse writes frames as a streaming upstream does, flushing each.
func writeFrames(w http.ResponseWriter, frames ...string) {
	for _, f := range frames {
		_, _ = io.WriteString(w, "data: "+f+"\n\n")
		w.(http.Flusher).Flush()
	}
}

func streamHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
}

func userRequest(text string) *providers.Request {
	return &providers.Request{Model: "gpt-4o", Messages: []providers.Message{
		{Role: providers.RoleUser, Content: []providers.Part{{Type: providers.PartText, Text: text}}},
	}}
}

func collect(t *testing.T, s providers.Stream) ([]providers.Event, error) {
	t.Helper()
	defer s.Close()
	var events []providers.Event
	for s.Next() {
		events = append(events, s.Current())
	}
	return events, s.Err()
}

const (
	chunkRole  = `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}`
	chunkHello = `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null}`
	chunkWorld = `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":" world"},"logprobs":null,"finish_reason":null}],"usage":null}`
	chunkStop  = `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}`
	chunkUsage = `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11,"prompt_tokens_details":{"cached_tokens":4,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`
)

var helloEvents = []providers.Event{
	{Type: providers.EventText, Text: "Hello"},
	{Type: providers.EventText, Text: " world"},
	{Type: providers.EventFinish, FinishReason: providers.FinishStop},
	{Type: providers.EventUsage, Usage: providers.Usage{Input: 5, CacheRead: 4, Output: 2}},
}

func TestNewValidates(t *testing.T) {
	for _, bad := range []Config{
		{BaseURL: "ftp://x"},
		{BaseURL: "localhost:8080"},
		{BaseURL: "http://"},
		{BaseURL: "http://x", MaxTokensField: "tokens"},
		{BaseURL: "http://x", Timeout: -1},
	} {
		if _, err := New(bad); err == nil {
			t.Errorf("%+v: want an error", bad)
		}
	}
	p, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != "openai" || p.url != "https://api.openai.com/v1/chat/completions" || !p.maxCompletion || p.idle != DefaultStreamIdleTimeout {
		t.Fatalf("defaults: %+v", p)
	}
	p, _ = New(Config{BaseURL: "http://localhost:11434/v1/"})
	if p.url != "http://localhost:11434/v1/chat/completions" || p.maxCompletion {
		t.Fatalf("ollama: %+v", p)
	}
}

func TestChat(t *testing.T) {
	checkGoroutines(t)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o-2024",
			"choices":[{"index":0,"message":{"role":"assistant","content":"Hi there","refusal":null},"logprobs":null,"finish_reason":"stop"}],
			"usage":{"prompt_tokens":8,"completion_tokens":3,"total_tokens":11}}`)
	})
	p := u.provider(t, func(c *Config) {
		c.Organization, c.Project = "org-1", "proj-1"
		c.Headers = map[string]string{"X-Extra": "1"}
	})
	req := userRequest("hi")
	req.Stream = true // Chat must not stream whatever the request says
	resp, err := p.Chat(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := &providers.Response{ID: "chatcmpl-1", Model: "gpt-4o-2024", Text: "Hi there", FinishReason: providers.FinishStop,
		Usage: providers.Usage{Input: 8, Output: 3}}
	if fmt.Sprint(resp) != fmt.Sprint(want) {
		t.Fatalf("got %+v", resp)
	}
	got := u.last(t)
	if got.path != "/v1/chat/completions" {
		t.Fatalf("path %s", got.path)
	}
	for k, v := range map[string]string{
		"Authorization": "Bearer sk-test-secret", "Openai-Organization": "org-1", "Openai-Project": "proj-1",
		"Content-Type": "application/json", "X-Extra": "1", "Accept": "application/json",
	} {
		if got.header.Get(k) != v {
			t.Errorf("header %s = %q, want %q", k, got.header.Get(k), v)
		}
	}
	if bytes.Contains(got.body, []byte(`"stream"`)) || !json.Valid(got.body) {
		t.Fatalf("body %s", got.body)
	}
	if !req.Stream {
		t.Fatal("the caller's request was modified")
	}
}

func TestChatWithoutKeySendsNoAuthorization(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":{"message":"You didn't provide an API key.","type":"invalid_request_error"}}`)
	})
	p := u.provider(t, func(c *Config) { c.APIKey = "" })
	_, err := p.Chat(context.Background(), userRequest("hi"))
	ue, ok := providers.AsUpstreamError(err)
	if !ok || ue.Category != providers.CategoryCredentialsNotConfigured {
		t.Fatalf("err = %v", err)
	}
	if h := u.last(t).header; h.Get("Authorization") != "" {
		t.Fatalf("Authorization sent: %q", h.Get("Authorization"))
	}
}

// A key sent through a header line is a key: a 401 then means it is wrong, not missing.
func TestKeyInHeaderIsAKey(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","code":"invalid_api_key"}}`)
	})
	p := u.provider(t, func(c *Config) {
		c.APIKey, c.Headers = "", map[string]string{"Authorization": "Bearer sk-from-a-header"}
	})
	_, err := p.Chat(context.Background(), userRequest("hi"))
	ue, ok := providers.AsUpstreamError(err)
	if !ok || ue.Category != providers.CategoryCredentialsInvalid {
		t.Fatalf("err = %v", err)
	}
	if h := u.last(t).header; h.Get("Authorization") != "Bearer sk-from-a-header" {
		t.Fatalf("Authorization sent: %q", h.Get("Authorization"))
	}
}

func TestErrorResponses(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		header    map[string]string
		body      string
		category  providers.Category
		retryable bool
		code      string
		after     time.Duration
	}{
		{"400 context", 400, nil, `{"error":{"message":"too long","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
			providers.CategoryInvalidRequest, false, "context_length_exceeded", 0},
		{"401", 401, nil, `{"error":{"message":"Incorrect API key provided: sk-test-secret","type":"invalid_request_error","code":"invalid_api_key"}}`,
			providers.CategoryCredentialsInvalid, false, "invalid_api_key", 0},
		{"403 region", 403, nil, `{"error":{"code":"unsupported_country_region_territory","message":"Country, region, or territory not supported","type":"request_forbidden"}}`,
			providers.CategoryRegionRestriction, false, "unsupported_country_region_territory", 0},
		{"404", 404, nil, `{"error":{"message":"The model x does not exist","type":"invalid_request_error","code":"model_not_found"}}`,
			providers.CategoryModelUnavailable, false, "model_not_found", 0},
		{"429", 429, map[string]string{"Retry-After": "3"}, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`,
			providers.CategoryRateLimited, true, "rate_limit_exceeded", 3 * time.Second},
		{"429 quota", 429, nil, `{"error":{"message":"quota","type":"insufficient_quota","code":"insufficient_quota"}}`,
			providers.CategoryAccessMissing, false, "insufficient_quota", 0},
		{"500", 500, nil, `{"error":{"message":"oops","type":"server_error"}}`, providers.CategoryServerError, true, "", 0},
		{"503", 503, map[string]string{"Content-Type": "text/html"}, `<html>overloaded</html>`, providers.CategoryServerError, true, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkGoroutines(t)
			u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			})
			p := u.provider(t, nil)
			calls := map[string]func() error{
				"chat": func() error { _, err := p.Chat(context.Background(), userRequest("x")); return err },
				"stream": func() error {
					s, err := p.ChatStream(context.Background(), userRequest("x"))
					if s != nil {
						t.Fatal("a stream with an error")
					}
					return err
				},
				"forward": func() error {
					_, err := p.Forward(context.Background(), &providers.RawRequest{Format: providers.FormatOpenAIChat, Body: []byte(`{}`)})
					return err
				},
			}
			for name, call := range calls {
				err := call()
				ue, ok := providers.AsUpstreamError(err)
				if !ok {
					t.Fatalf("%s: err = %v, want an UpstreamError", name, err)
				}
				if ue.Status != tc.status || ue.Category != tc.category || ue.Retryable != tc.retryable || ue.Code != tc.code || ue.RetryAfter != tc.after {
					t.Fatalf("%s: got %+v", name, ue)
				}
				if strings.Contains(ue.Error(), "sk-test-secret") || strings.Contains(ue.Payload, "sk-test-secret") || strings.Contains(ue.Message, "sk-test-secret") {
					t.Fatalf("%s: the key leaked into the error: %+v", name, ue)
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
	p, err := New(Config{BaseURL: "http://" + addr + "/v1", APIKey: "sk-test-secret", Transport: &http.Transport{}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Chat(context.Background(), userRequest("x"))
	ue, ok := providers.AsUpstreamError(err)
	if !ok || ue.Status != 0 || !ue.Retryable || ue.Timeout || ue.Category != providers.CategoryServerError || ue.Err == nil {
		t.Fatalf("err = %#v", err)
	}
	if strings.Contains(err.Error(), "sk-test-secret") {
		t.Fatal("key in the error")
	}
}

func TestResponseHeaderTimeout(t *testing.T) {
	checkGoroutines(t)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	u.transport.ResponseHeaderTimeout = 50 * time.Millisecond
	p := u.provider(t, nil)
	_, err := p.ChatStream(context.Background(), userRequest("x"))
	ue, ok := providers.AsUpstreamError(err)
	if !ok || ue.Status != 0 || !ue.Timeout || !ue.Retryable || ue.Category != providers.CategoryServerError {
		t.Fatalf("err = %#v", err)
	}
}

func TestAttemptTimeout(t *testing.T) {
	checkGoroutines(t)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	p := u.provider(t, func(c *Config) { c.Timeout = 50 * time.Millisecond })
	_, err := p.Chat(context.Background(), userRequest("x"))
	ue, ok := providers.AsUpstreamError(err)
	if !ok || !ue.Timeout || !errors.Is(err, ErrAttemptTimeout) || errors.Is(err, context.Canceled) {
		t.Fatalf("err = %#v", err)
	}
}

func TestCancelBeforeHeaders(t *testing.T) {
	checkGoroutines(t)
	seen := make(chan struct{})
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		close(seen)
	})
	p := u.provider(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err := p.Chat(ctx, userRequest("x"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if _, ok := providers.AsUpstreamError(err); ok {
		t.Fatal("a cancellation must not be an UpstreamError")
	}
	select {
	case <-seen:
	case <-time.After(2 * time.Second):
		t.Fatal("the upstream did not see the cancellation")
	}
}

func TestChatStream(t *testing.T) {
	checkGoroutines(t)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		streamHeaders(w)
		writeFrames(w, chunkRole, chunkHello, chunkWorld, chunkStop, chunkUsage, "[DONE]")
	})
	p := u.provider(t, nil)
	s, err := p.ChatStream(context.Background(), userRequest("hi"))
	if err != nil {
		t.Fatal(err)
	}
	events, err := collect(t, s)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(events) != fmt.Sprint(helloEvents) {
		t.Fatalf("events\n%+v\nwant\n%+v", events, helloEvents)
	}
	got := u.last(t)
	if got.header.Get("Accept") != "text/event-stream" {
		t.Fatalf("Accept %q", got.header.Get("Accept"))
	}
	var body map[string]any
	_ = json.Unmarshal(got.body, &body)
	if body["stream"] != true || fmt.Sprint(body["stream_options"]) != "map[include_usage:true]" {
		t.Fatalf("body %s", got.body)
	}
	if err := s.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
}

// The connection of a finished stream goes back to the pool.
func TestChatStreamReusesConnection(t *testing.T) {
	checkGoroutines(t)
	var mu sync.Mutex
	conns := make(map[string]bool)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		conns[r.RemoteAddr] = true
		mu.Unlock()
		streamHeaders(w)
		writeFrames(w, chunkHello, chunkStop, chunkUsage, "[DONE]")
		// The end of the body comes after [DONE], in another packet.
		time.Sleep(20 * time.Millisecond)
	})
	// A loaded test machine must not turn a slow drain into a failure.
	defer func(d time.Duration) { drainTimeout = d }(drainTimeout)
	drainTimeout = 5 * time.Second
	p := u.provider(t, nil)
	for range 3 {
		s, err := p.ChatStream(context.Background(), userRequest("hi"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := collect(t, s); err != nil {
			t.Fatal(err)
		}
		u.last(t)
		// The transport puts the connection back in its pool just after the body's end.
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(conns) != 1 {
		t.Fatalf("%d connections for 3 streams", len(conns))
	}
}

func TestChatStreamToolCalls(t *testing.T) {
	checkGoroutines(t)
	frames := []string{
		`{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}]}`,
		`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]},"finish_reason":null}]}`,
		`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]},"finish_reason":null}]}`,
		`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"get_time","arguments":""}}]},"finish_reason":null}]}`,
		`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{}"}}]},"finish_reason":null}]}`,
		`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"id":"call_c","type":"function","function":{"name":"noop","arguments":"{}"}}]},"finish_reason":null}]}`,
		`{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		`{"id":"c","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":10,"total_tokens":30}}`,
		"[DONE]",
	}
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		streamHeaders(w)
		writeFrames(w, frames...)
	})
	p := u.provider(t, nil)
	s, err := p.ChatStream(context.Background(), userRequest("weather and time"))
	if err != nil {
		t.Fatal(err)
	}
	events, err := collect(t, s)
	if err != nil {
		t.Fatal(err)
	}
	calls := accumulate(events)
	want := []providers.ToolCall{
		{ID: "call_a", Name: "get_weather", Arguments: `{"city":"Paris"}`},
		{ID: "call_b", Name: "get_time", Arguments: "{}"},
		{ID: "call_c", Name: "noop", Arguments: "{}"},
	}
	if fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Fatalf("calls %+v", calls)
	}
	last := events[len(events)-2:]
	if last[0].Type != providers.EventFinish || last[0].FinishReason != providers.FinishToolCalls ||
		last[1].Type != providers.EventUsage || last[1].Usage != (providers.Usage{Input: 20, Output: 10}) {
		t.Fatalf("tail %+v", last)
	}
}

// accumulate rebuilds the tool calls of a stream as a client would.
func accumulate(events []providers.Event) []providers.ToolCall {
	var calls []providers.ToolCall
	for _, e := range events {
		if e.Type != providers.EventToolCall {
			continue
		}
		for len(calls) <= e.Index {
			calls = append(calls, providers.ToolCall{})
		}
		c := &calls[e.Index]
		if e.ToolCall.ID != "" {
			c.ID = e.ToolCall.ID
		}
		if e.ToolCall.Name != "" {
			c.Name = e.ToolCall.Name
		}
		c.Arguments += e.ToolCall.Arguments
	}
	return calls
}

func TestStreamToolCallIndexes(t *testing.T) {
	tests := []struct {
		name   string
		frames []string
		want   []providers.ToolCall
	}{
		{
			name: "every call numbered 0",
			frames: []string{
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"x\""}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"b","function":{"name":"g","arguments":"{}"}}]}}]}`,
			},
			want: []providers.ToolCall{{ID: "a", Name: "f", Arguments: `{"x":1}`}, {ID: "b", Name: "g", Arguments: "{}"}},
		},
		{
			name: "no indexes, ids repeated",
			frames: []string{
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"a","function":{"name":"f","arguments":"{"}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"a","function":{"arguments":"}"}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"b","function":{"name":"g","arguments":"{}"}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"arguments":" "}}]}}]}`,
			},
			want: []providers.ToolCall{{ID: "a", Name: "f", Arguments: "{}"}, {ID: "b", Name: "g", Arguments: "{} "}},
		},
		{
			name: "indexes from 1, two calls in one delta",
			frames: []string{
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"a","function":{"name":"f","arguments":"{}"}},{"index":2,"id":"b","function":{"name":"g","arguments":"{}"}}]}}]}`,
			},
			want: []providers.ToolCall{{ID: "a", Name: "f", Arguments: "{}"}, {ID: "b", Name: "g", Arguments: "{}"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := ""
			for _, f := range append(tc.frames, "[DONE]") {
				body += "data: " + f + "\n\n"
			}
			events, err := collect(t, bodyStream(body))
			if err != nil {
				t.Fatal(err)
			}
			if calls := accumulate(events); fmt.Sprint(calls) != fmt.Sprint(tc.want) {
				t.Fatalf("calls %+v", calls)
			}
		})
	}
}

// bodyStream decodes a stream body held in memory.
func bodyStream(body string) *chatStream {
	at := upstreamhttp.NewAttempt(context.Background(), 0)
	return newChatStream(context.Background(), "test", at, upstreamhttp.NewIdleBody(io.NopCloser(strings.NewReader(body)), 0, "test"))
}

func TestStreamEnds(t *testing.T) {
	stop := providers.Event{Type: providers.EventFinish, FinishReason: providers.FinishStop}
	zeroUsage := providers.Event{Type: providers.EventUsage}
	tests := []struct {
		name    string
		body    string
		events  int
		tail    []providers.Event // the last events, when checked
		skipped int
		err     error // nil for a clean end
		message string
	}{
		{name: "done", body: "data: " + chunkHello + "\n\ndata: [DONE]\n\n", events: 1},
		{name: "done without blank line", body: "data: " + chunkHello + "\n\ndata: [DONE]", events: 1},
		{name: "no done after finish and usage", body: "data: " + chunkHello + "\n\ndata: " + chunkStop + "\n\ndata: " + chunkUsage + "\n\n", events: 3},
		// A clean end without [DONE] is completed with what is pending: here the usage.
		{name: "no done, no usage", body: "data: " + chunkHello + "\n\ndata: " + chunkStop + "\n\n", events: 3, tail: []providers.Event{stop, zeroUsage}},
		{name: "no done, no finish", body: "data: " + chunkHello + "\n\ndata: " + chunkUsage + "\n\n", events: 4,
			tail: []providers.Event{stop, {Type: providers.EventUsage, Usage: providers.Usage{Input: 5, CacheRead: 4, Output: 2}}}},
		{name: "no done after tool calls", body: `data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}}]}}]}` + "\n\n", events: 3,
			tail: []providers.Event{{Type: providers.EventFinish, FinishReason: providers.FinishToolCalls}, zeroUsage}},
		{name: "usage before content, no done", body: "data: " + chunkUsage + "\n\ndata: " + chunkHello + "\n\ndata: " + chunkStop + "\n\n", events: 4,
			tail: []providers.Event{stop, {Type: providers.EventUsage, Usage: providers.Usage{Input: 5, CacheRead: 4, Output: 2}}}},
		{name: "empty body", body: "", events: 2, tail: []providers.Event{stop, zeroUsage}},
		{name: "comments only", body: ": keep-alive\n\n", events: 2, tail: []providers.Event{stop, zeroUsage}},
		// Malformed frames are skipped and counted.
		{name: "malformed frame", body: "data: " + chunkHello + "\n\ndata: {\"choices\":[\n\n", events: 3, skipped: 1, tail: []providers.Event{stop, zeroUsage}},
		{name: "malformed usage", body: `data: {"choices":[],"usage":{"prompt_tokens":"x"}}` + "\n\n", events: 2, skipped: 1, tail: []providers.Event{stop, zeroUsage}},
		{name: "malformed frames between good ones", body: "data: " + chunkHello + "\n\ndata: not json\n\n" +
			`data: {"choices":"x"}` + "\n\n" +
			`data: {"choices":[{"index":0,"delta":{"content":5},"finish_reason":"stop"}]}` + "\n\n" +
			`data: {"choices":[{"index":0,"delta":{"content":"!"}}],"usage":{"prompt_tokens":[]}}` + "\n\n" +
			"data: " + chunkWorld + "\n\ndata: " + chunkStop + "\n\ndata: " + chunkUsage + "\n\ndata: [DONE]\n\n",
			events: 4, skipped: 4, tail: []providers.Event{
				{Type: providers.EventText, Text: "Hello"}, {Type: providers.EventText, Text: " world"}, stop,
				{Type: providers.EventUsage, Usage: providers.Usage{Input: 5, CacheRead: 4, Output: 2}}}},
		{name: "error frame", body: "data: " + chunkHello + "\n\n" + `data: {"error":{"message":"The server had an error","type":"server_error","param":null,"code":null}}` + "\n\n", events: 1, err: ErrStreamError, message: "The server had an error"},
		{name: "error frame after a skipped one", body: "data: oops\n\n" + `data: {"error":"boom"}` + "\n\n", skipped: 1, err: ErrStreamError, message: "boom"},
		{name: "error frame of the wrong shape", body: `data: {"error":{"message":"boom"},"choices":"x"}` + "\n\n", err: ErrStreamError, message: "boom"},
		{name: "event error", body: "event: error\ndata: {\"message\":\"overloaded\"}\n\n", err: ErrStreamError, message: "overloaded"},
		{name: "event error that is not JSON", body: "event: error\ndata: oops\n\n", err: ErrStreamError},
		{name: "null error key is no error", body: "data: {\"error\":null,\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n", events: 1},
		{name: "comments and other events skipped", body: ": OPENROUTER PROCESSING\n\nevent: ping\ndata: {}\n\ndata: " + chunkHello + "\n\ndata: [DONE]\n\n", events: 1},
		{name: "frames after done ignored", body: "data: [DONE]\n\ndata: " + chunkHello + "\n\n"},
		{name: "groq usage", body: "data: " + chunkStop + "\n\n" + `data: {"choices":[],"x_groq":{"usage":{"prompt_tokens":3,"completion_tokens":1}}}` + "\n\n", events: 2},
		{name: "event too large", body: "data: " + strings.Repeat("x", sse.DefaultMaxEventBytes+1) + "\n\n", err: ErrMalformedFrame},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := bodyStream(tc.body)
			events, err := collect(t, s)
			if len(events) != tc.events {
				t.Fatalf("%d events: %+v", len(events), events)
			}
			if tail := events[len(events)-len(tc.tail):]; fmt.Sprint(tail) != fmt.Sprint(tc.tail) {
				t.Fatalf("events end with %+v, want %+v", tail, tc.tail)
			}
			if n := s.SkippedFrames(); n != tc.skipped {
				t.Fatalf("%d frames skipped, want %d", n, tc.skipped)
			}
			if tc.err == nil {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			ue, ok := providers.AsUpstreamError(err)
			if !ok || !errors.Is(err, tc.err) {
				t.Fatalf("err = %#v, want an UpstreamError wrapping %v", err, tc.err)
			}
			if tc.message != "" && ue.Message != tc.message {
				t.Fatalf("message %q", ue.Message)
			}
		})
	}
}

// Over HTTP: a malformed frame is skipped and counted, the stream exposes the count through
// the optional interface, and a body that ends without [DONE] ends cleanly.
func TestStreamSkipsMalformedFrames(t *testing.T) {
	checkGoroutines(t)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		streamHeaders(w)
		writeFrames(w, chunkRole, chunkHello, "<html>bad gateway</html>", chunkWorld, `{"choices":[{"index":"0"}]}`, chunkStop, chunkUsage)
	})
	p := u.provider(t, nil)
	s, err := p.ChatStream(context.Background(), userRequest("hi"))
	if err != nil {
		t.Fatal(err)
	}
	events, err := collect(t, s)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(events) != fmt.Sprint(helloEvents) {
		t.Fatalf("events\n%+v\nwant\n%+v", events, helloEvents)
	}
	sk, ok := s.(interface{ SkippedFrames() int })
	if !ok {
		t.Fatalf("%T has no SkippedFrames", s)
	}
	if n := sk.SkippedFrames(); n != 2 {
		t.Fatalf("%d frames skipped, want 2", n)
	}
}

func TestStreamMidStreamDrop(t *testing.T) {
	checkGoroutines(t)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		streamHeaders(w)
		writeFrames(w, chunkRole, chunkHello)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	})
	p := u.provider(t, nil)
	s, err := p.ChatStream(context.Background(), userRequest("hi"))
	if err != nil {
		t.Fatal(err)
	}
	events, err := collect(t, s)
	if len(events) != 1 || events[0].Text != "Hello" {
		t.Fatalf("events %+v", events)
	}
	ue, ok := providers.AsUpstreamError(err)
	if !ok || !ue.Retryable || ue.Category != providers.CategoryServerError || ue.Timeout {
		t.Fatalf("err = %#v", err)
	}
}

func TestStreamIdleTimeout(t *testing.T) {
	checkGoroutines(t)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		streamHeaders(w)
		writeFrames(w, chunkHello)
		<-r.Context().Done()
	})
	p := u.provider(t, func(c *Config) { c.StreamIdleTimeout = 300 * time.Millisecond })
	s, err := p.ChatStream(context.Background(), userRequest("hi"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	events, err := collect(t, s)
	if len(events) != 1 {
		t.Fatalf("events %+v", events)
	}
	ue, ok := providers.AsUpstreamError(err)
	if !ok || !ue.Timeout || !errors.Is(err, ErrIdleTimeout) {
		t.Fatalf("err = %#v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v", d)
	}
}

// Steady traffic keeps a stream alive longer than the idle timeout.
func TestStreamIdleTimeoutResetByTraffic(t *testing.T) {
	checkGoroutines(t)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		streamHeaders(w)
		for range 6 {
			writeFrames(w, chunkHello)
			time.Sleep(50 * time.Millisecond)
		}
		writeFrames(w, "[DONE]")
	})
	// 6 × 50 ms is longer than the timeout, each gap much shorter.
	p := u.provider(t, func(c *Config) { c.StreamIdleTimeout = 250 * time.Millisecond })
	s, err := p.ChatStream(context.Background(), userRequest("hi"))
	if err != nil {
		t.Fatal(err)
	}
	events, err := collect(t, s)
	if err != nil || len(events) != 6 {
		t.Fatalf("%d events, err %v", len(events), err)
	}
}

func TestStreamCancel(t *testing.T) {
	checkGoroutines(t)
	seen := make(chan struct{})
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		streamHeaders(w)
		writeFrames(w, chunkHello)
		<-r.Context().Done()
		close(seen)
	})
	p := u.provider(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := p.ChatStream(ctx, userRequest("hi"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Next() || s.Current().Text != "Hello" {
		t.Fatalf("first event: %v", s.Err())
	}
	cancel()
	if s.Next() {
		t.Fatal("an event after the cancellation")
	}
	if !errors.Is(s.Err(), context.Canceled) {
		t.Fatalf("err = %v", s.Err())
	}
	if _, ok := providers.AsUpstreamError(s.Err()); ok {
		t.Fatal("a cancellation must not be an UpstreamError")
	}
	select {
	case <-seen:
	case <-time.After(2 * time.Second):
		t.Fatal("the upstream did not see the cancellation")
	}
}

// Close from another goroutine unblocks a Next waiting on a silent upstream.
func TestStreamCloseUnblocksNext(t *testing.T) {
	checkGoroutines(t)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		streamHeaders(w)
		<-r.Context().Done()
	})
	p := u.provider(t, nil)
	s, err := p.ChatStream(context.Background(), userRequest("hi"))
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, func() { _ = s.Close() })
	if s.Next() {
		t.Fatal("an event from a silent upstream")
	}
	if s.Err() == nil {
		t.Fatal("no error after Close")
	}
}

func TestStreamJSONFallback(t *testing.T) {
	checkGoroutines(t)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_, _ = io.WriteString(w, `{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"whole",
			"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}],
			"usage":{"prompt_tokens":2,"completion_tokens":1}}`)
	})
	p := u.provider(t, nil)
	s, err := p.ChatStream(context.Background(), userRequest("hi"))
	if err != nil {
		t.Fatal(err)
	}
	events, err := collect(t, s)
	if err != nil {
		t.Fatal(err)
	}
	want := []providers.Event{
		{Type: providers.EventText, Text: "whole"},
		{Type: providers.EventToolCall, ToolCall: providers.ToolCall{ID: "c", Name: "f", Arguments: "{}"}},
		{Type: providers.EventFinish, FinishReason: providers.FinishToolCalls},
		{Type: providers.EventUsage, Usage: providers.Usage{Input: 2, Output: 1}},
	}
	if fmt.Sprint(events) != fmt.Sprint(want) {
		t.Fatalf("events %+v", events)
	}
}

func TestChatMalformedBody(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		err      error
		category providers.Category
	}{
		{"garbage", `not json`, ErrMalformedResponse, providers.CategoryServerError},
		{"no choices", `{"id":"x","choices":[]}`, ErrMalformedResponse, providers.CategoryServerError},
		{"error with 200", `{"error":{"message":"quota","code":"insufficient_quota"}}`, ErrStreamError, providers.CategoryAccessMissing},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, tc.body)
			})
			_, err := u.provider(t, nil).Chat(context.Background(), userRequest("x"))
			ue, ok := providers.AsUpstreamError(err)
			if !ok || !errors.Is(err, tc.err) || ue.Category != tc.category {
				t.Fatalf("err = %#v", err)
			}
		})
	}
}

func TestForward(t *testing.T) {
	checkGoroutines(t)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", "req_1")
		streamHeaders(w)
		writeFrames(w, chunkHello, "[DONE]")
	})
	p := u.provider(t, nil)
	in := http.Header{}
	in.Set("Authorization", "Bearer client-key")
	in.Set("X-Api-Key", "client-key")
	in.Set("Cookie", "session=1")
	in.Set("Api-Key", "client-key")
	in.Set("OpenAI-Organization", "org-client")
	in.Set("OpenAI-Beta", "assistants=v2")
	in.Set("Traceparent", "00-abc-def-01")
	body := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"stream":true,"unknown_field":1}`)
	resp, err := p.Forward(context.Background(), &providers.RawRequest{Format: providers.FormatOpenAIChat, Body: body, Stream: true, Header: in})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != 200 || resp.Header.Get("X-Request-Id") != "req_1" || string(raw) != "data: "+chunkHello+"\n\ndata: [DONE]\n\n" {
		t.Fatalf("response %d %v %q", resp.Status, resp.Header, raw)
	}
	got := u.last(t)
	if !bytes.Equal(got.body, body) {
		t.Fatalf("body changed: %s", got.body)
	}
	want := map[string]string{
		"Authorization": "Bearer sk-test-secret", "X-Api-Key": "", "Cookie": "", "Api-Key": "", "Openai-Organization": "",
		"Openai-Beta": "assistants=v2", "Traceparent": "00-abc-def-01", "Accept": "text/event-stream", "Content-Type": "application/json",
	}
	for k, v := range want {
		if got.header.Get(k) != v {
			t.Errorf("header %s = %q, want %q", k, got.header.Get(k), v)
		}
	}

	if _, err := p.Forward(context.Background(), &providers.RawRequest{Format: providers.FormatAnthropic}); err == nil {
		t.Fatal("forwarded a foreign format")
	}
}

func TestForwardIdleTimeout(t *testing.T) {
	checkGoroutines(t)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		streamHeaders(w)
		writeFrames(w, chunkHello)
		<-r.Context().Done()
	})
	p := u.provider(t, func(c *Config) { c.StreamIdleTimeout = 80 * time.Millisecond })
	resp, err := p.Forward(context.Background(), &providers.RawRequest{Format: providers.FormatOpenAIChat, Body: []byte(`{}`), Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	ue, ok := providers.AsUpstreamError(err)
	if !ok || !ue.Timeout || !errors.Is(err, ErrIdleTimeout) {
		t.Fatalf("err = %#v", err)
	}
}

func TestForwardCancelWhileReading(t *testing.T) {
	checkGoroutines(t)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		streamHeaders(w)
		writeFrames(w, chunkHello)
		<-r.Context().Done()
	})
	p := u.provider(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := p.Forward(ctx, &providers.RawRequest{Format: providers.FormatOpenAIChat, Body: []byte(`{}`), Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err = io.ReadAll(resp.Body)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if _, ok := providers.AsUpstreamError(err); ok {
		t.Fatal("a cancellation must not be an UpstreamError")
	}
}

func TestMaxTokensField(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"choices":[{"message":{"content":"x"},"finish_reason":"stop"}]}`)
	})
	req := userRequest("x")
	req.MaxTokens = ptr(int64(9))
	for field, want := range map[string]string{"": `"max_tokens":9`, "max_tokens": `"max_tokens":9`, "max_completion_tokens": `"max_completion_tokens":9`} {
		p := u.provider(t, func(c *Config) { c.MaxTokensField = field })
		if _, err := p.Chat(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		if body := u.last(t).body; !bytes.Contains(body, []byte(want)) {
			t.Errorf("field %q: body %s", field, body)
		}
	}
}

// TestStreamReleasesItsReaderAtDone: a stream that ends at [DONE], before its body does,
// gives its SSE reader's buffer back (sse.Reader.Release): the reader reads nothing more,
// though the body still holds a frame.
func TestStreamReleasesItsReaderAtDone(t *testing.T) {
	s := bodyStream("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\ndata: {\"choices\":[]}\n\n")
	for s.Next() {
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if s.rd.Next() {
		t.Fatal("the reader read on after [DONE]: its buffer was not released")
	}
}
