package module

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// scripted is a fault-injecting OpenAI-wire upstream: call n (from 0) behaves as script(n).
type scripted struct {
	*httptest.Server
	calls atomic.Int64
}

type behaviour func(w http.ResponseWriter, r *http.Request, req map[string]any)

func newScripted(t *testing.T, script func(n int) behaviour) *scripted {
	s := &scripted{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(s.calls.Add(1) - 1)
		var req map[string]any
		_ = json.NewDecoder(r.Body).Decode(&req)
		script(n)(w, r, req)
	}))
	t.Cleanup(s.Close)
	return s
}

func resetBeforeHeaders(w http.ResponseWriter, r *http.Request, _ map[string]any) {
	conn, _, _ := w.(http.Hijacker).Hijack()
	_ = conn.Close()
}

func hang(d time.Duration) behaviour {
	return func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		select {
		case <-r.Context().Done():
		case <-time.After(d):
		}
	}
}

// slowFirstToken sends headers and a role chunk at once, then nothing for d.
func slowFirstToken(d time.Duration) behaviour {
	return func(w http.ResponseWriter, r *http.Request, req map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(d):
		}
	}
}

// resilientProvider is a provider block with fast, test-sized resilience settings.
func resilientProvider(name, baseURL, extra string) string {
	// Test-sized defaults, each unless extra sets its option itself.
	var defaults strings.Builder
	for _, d := range []string{"circuit_breaker off", "header_timeout 300ms", "first_token_timeout 300ms", "stream_idle_timeout 300ms"} {
		if !strings.Contains(extra, strings.Fields(d)[0]) {
			defaults.WriteString("\n\t\t\t" + d)
		}
	}
	return fmt.Sprintf(`
		provider %s {
			type openai
			base_url %s/v1
			api_key sk-upstream-secret-%s
			retry_backoff 10ms 50ms
			retry_after_cap 3s%s
			%s
		}`, name, baseURL, name, defaults.String(), extra)
}

func chatReq(model string, stream bool) string {
	return fmt.Sprintf(`{"model":%q,"stream":%v,"meta":true,"messages":[{"role":"user","content":"hi"}]}`, model, stream)
}

// metaAttempts reads meta.attempts from a non-streamed answer.
func metaAttempts(t *testing.T, body []byte) []map[string]any {
	t.Helper()
	var v struct {
		Meta struct {
			Attempts []map[string]any `json:"attempts"`
		} `json:"meta"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return v.Meta.Attempts
}

func TestRetriesOnTheSameRoute(t *testing.T) {
	ok := chatOK("recovered", 3, 1)
	cases := []struct {
		name     string
		script   func(n int) behaviour
		attempts int
		minTime  time.Duration
	}{
		{"429 with Retry-After", func(n int) behaviour {
			if n == 0 {
				return upstreamError(429, "requests", "rate_limit_exceeded", "slow down", map[string]string{"Retry-After": "1"})
			}
			return ok
		}, 2, time.Second},
		{"429 without Retry-After", func(n int) behaviour {
			if n == 0 {
				return upstreamError(429, "requests", "rate_limit_exceeded", "slow down", nil)
			}
			return ok
		}, 2, 0},
		{"500 once", func(n int) behaviour {
			if n == 0 {
				return upstreamError(500, "server_error", "", "boom", nil)
			}
			return ok
		}, 2, 0},
		{"reset before headers", func(n int) behaviour {
			if n == 0 {
				return resetBeforeHeaders
			}
			return ok
		}, 2, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up := newScripted(t, tc.script)
			env := startGateway(t, resilientProvider("p", up.URL, "")+pricedModel("m", pricedRoute("p", "x")), "")
			_, key := env.workspace(5 * usd)
			began := time.Now()
			status, _, body := env.post(key, "/chat/completions", chatReq("m", false))
			took := time.Since(began)
			if status != 200 || !strings.Contains(string(body), "recovered") {
				t.Fatalf("%d %s", status, body)
			}
			if got := metaAttempts(t, body); len(got) != tc.attempts || int(up.calls.Load()) != tc.attempts {
				t.Fatalf("attempts %v, upstream calls %d", got, up.calls.Load())
			}
			if took < tc.minTime || took > tc.minTime+3*time.Second {
				t.Fatalf("took %s", took)
			}
		})
	}
}

func TestRetriesThenFallback(t *testing.T) {
	down := newScripted(t, func(int) behaviour { return upstreamError(503, "server_error", "", "unavailable", nil) })
	backup := newScripted(t, func(int) behaviour { return chatOK("from backup", 3, 1) })
	env := startGateway(t, resilientProvider("down", down.URL, "retries 2")+resilientProvider("backup", backup.URL, "")+
		pricedModel("m", pricedRoute("down", "x")+pricedRoute("backup", "y")), "")
	_, key := env.workspace(5 * usd)
	status, _, body := env.post(key, "/chat/completions", chatReq("m", false))
	if status != 200 || !strings.Contains(string(body), "from backup") {
		t.Fatalf("%d %s", status, body)
	}
	if down.calls.Load() != 3 || len(metaAttempts(t, body)) != 4 {
		t.Fatalf("down called %d times; attempts %v", down.calls.Load(), metaAttempts(t, body))
	}
	var v struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(body, &v)
	if v.Model != "y" {
		t.Fatalf("model %q does not name the model that answered", v.Model)
	}
}

func TestSilentUpstreamIsNotRetried(t *testing.T) {
	silent := newScripted(t, func(int) behaviour { return hang(10 * time.Second) })
	slow := newScripted(t, func(int) behaviour { return slowFirstToken(10 * time.Second) })
	backup := newScripted(t, func(int) behaviour { return chatOK("from backup", 3, 1) })
	env := startGateway(t, resilientProvider("silent", silent.URL, "")+resilientProvider("slow", slow.URL, "")+resilientProvider("backup", backup.URL, "")+
		pricedModel("m-silent", pricedRoute("silent", "x")+pricedRoute("backup", "y"))+
		pricedModel("m-slow", pricedRoute("slow", "x")+pricedRoute("backup", "y")), "")
	_, key := env.workspace(5 * usd)
	for _, tc := range []struct {
		model string
		up    *scripted
		calls int64
	}{{"m-silent", silent, 1}, {"m-slow", slow, 1}} {
		t.Run(tc.model, func(t *testing.T) {
			began := time.Now()
			status, _, body := env.post(key, "/chat/completions", chatReq(tc.model, true))
			took := time.Since(began)
			if status != 200 || !strings.Contains(string(body), "from ") || !strings.Contains(string(body), "backup") {
				t.Fatalf("%d %s", status, body)
			}
			// No response headers, or headers but no token: the next route at once.
			if tc.up.calls.Load() != tc.calls || took > 3*time.Second {
				t.Fatalf("upstream called %d times, took %s", tc.up.calls.Load(), took)
			}
		})
	}
}

// TestFirstTokenTimeoutFallsBackAtOnce: a route that sends headers and then nothing is cut
// once, after first_token_timeout, and the answer comes from the next route.
func TestFirstTokenTimeoutFallsBackAtOnce(t *testing.T) {
	slow := newScripted(t, func(int) behaviour { return slowFirstToken(20 * time.Second) })
	backup := newScripted(t, func(int) behaviour { return chatOK("from backup", 3, 1) })
	env := startGateway(t, resilientProvider("slow", slow.URL, "first_token_timeout 2s\n\t\t\tstream_idle_timeout 10s")+resilientProvider("backup", backup.URL, "")+
		pricedModel("m", pricedRoute("slow", "x")+pricedRoute("backup", "y")), "")
	_, key := env.workspace(5 * usd)
	began := time.Now()
	status, _, body := env.post(key, "/chat/completions", chatReq("m", true))
	took := time.Since(began)
	if status != 200 || !strings.Contains(string(body), `"provider":"backup"`) || !strings.Contains(string(body), "[DONE]") {
		t.Fatalf("%d %s", status, body)
	}
	// One timeout of 2s, not one per retry of the silent route.
	if slow.calls.Load() != 1 || backup.calls.Load() != 1 || took < 2*time.Second || took >= 4*time.Second {
		t.Fatalf("silent route called %d times, backup %d, answer after %s", slow.calls.Load(), backup.calls.Load(), took)
	}
}

func TestMidStreamFailoverWithPrefill(t *testing.T) {
	const full = "The quick brown fox jumps over the lazy dog."
	broken := newScripted(t, func(int) behaviour {
		return func(w http.ResponseWriter, r *http.Request, req map[string]any) {
			w.Header().Set("Content-Type", "text/event-stream")
			for _, p := range []string{"The quick ", "brown "} {
				fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":null}]}\n\n", p)
				w.(http.Flusher).Flush()
			}
			conn, _, _ := w.(http.Hijacker).Hijack()
			_ = conn.Close()
		}
	})
	var mu sync.Mutex
	var prefills []string
	cont := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		last := req.Messages[len(req.Messages)-1]
		var prefill string
		if err := json.Unmarshal(last.Content, &prefill); err != nil {
			var blocks []struct {
				Text string `json:"text"`
			}
			_ = json.Unmarshal(last.Content, &blocks)
			for _, b := range blocks {
				prefill += b.Text
			}
		}
		mu.Lock()
		prefills = append(prefills, last.Role+":"+prefill)
		mu.Unlock()
		rest := strings.TrimPrefix(full, prefill)
		w.Header().Set("Content-Type", "text/event-stream")
		ev := func(name, data string) { fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data) }
		ev("message_start", `{"type":"message_start","message":{"id":"msg_c","type":"message","role":"assistant","model":"c","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":20,"output_tokens":1}}}`)
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
		b, _ := json.Marshal(rest)
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`+string(b)+`}}`)
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`)
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":7}}`)
		ev("message_stop", `{"type":"message_stop"}`)
	}))
	t.Cleanup(cont.Close)
	env := startGateway(t, resilientProvider("broken", broken.URL, "retries 0")+fmt.Sprintf(`
		provider cont {
			type anthropic
			base_url %s
			api_key sk-ant-x
		}`, cont.URL)+pricedModel("m", pricedRoute("broken", "x")+pricedRoute("cont", "c")), "")
	wsID, key := env.workspace(5 * usd)
	client := env.openai(key)
	var httpResp *http.Response
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say the pangram")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}, option.WithResponseInto(&httpResp))
	acc := openai.ChatCompletionAccumulator{}
	var last openai.ChatCompletionChunk
	for stream.Next() {
		last = stream.Current()
		if !acc.AddChunk(last) {
			t.Fatalf("accumulator refused %s", last.RawJSON())
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if got := acc.Choices[0].Message.Content; got != full {
		t.Fatalf("client received %q, want %q exactly once", got, full)
	}
	if len(prefills) != 1 || !strings.HasPrefix(prefills[0], "assistant:The quick brown") {
		t.Fatalf("continuation requests %q", prefills)
	}
	gen := env.generation(wsID, httpResp.Header.Get("X-Generation-Id"))
	if gen.Provider != "cont" || gen.Status != 200 || len(gen.Attempts) != 2 || gen.Attempts[0].Error == "" {
		t.Fatalf("generation %+v", gen)
	}
	// Both attempts are billed: the broken one by what it delivered, the continuation by its usage.
	var lines int
	for _, l := range gen.CostLines {
		if l.Nanos > 0 {
			lines++
		}
	}
	if lines < 3 || fmt.Sprint(gen.CostNanos) != last.Usage.JSON.ExtraFields["cost_nanos"].Raw() {
		t.Fatalf("cost lines %+v, shown %s", gen.CostLines, last.Usage.JSON.ExtraFields["cost_nanos"].Raw())
	}
}

func TestContextLengthAndContentPolicy(t *testing.T) {
	small := newScripted(t, func(int) behaviour {
		return upstreamError(400, "invalid_request_error", "context_length_exceeded", "This model's maximum context length is 8192 tokens", nil)
	})
	same := newScripted(t, func(int) behaviour { return chatOK("same window", 3, 1) })
	large := newScripted(t, func(int) behaviour { return chatOK("large window", 3, 1) })
	policy := newScripted(t, func(int) behaviour {
		return upstreamError(400, "invalid_request_error", "content_policy_violation", "Your request was rejected by the safety system", nil)
	})
	windowed := func(p string, window int) string {
		return fmt.Sprintf(`
			route %s x {
				input 1
				output 2
				context_window %d
			}`, p, window)
	}
	env := startGateway(t, resilientProvider("small", small.URL, "")+resilientProvider("same", same.URL, "")+resilientProvider("large", large.URL, "")+
		resilientProvider("policy", policy.URL, "")+resilientProvider("backup", same.URL, "")+
		pricedModel("m-ctx", windowed("small", 8192)+windowed("same", 8192)+windowed("large", 128000))+
		pricedModel("m-ctx-none", windowed("small", 8192)+windowed("same", 8192))+
		pricedModel("m-policy", pricedRoute("policy", "x")+pricedRoute("backup", "y")), "")
	_, key := env.workspace(5 * usd)

	status, _, body := env.post(key, "/chat/completions", chatReq("m-ctx", false))
	if status != 200 || !strings.Contains(string(body), "large window") || small.calls.Load() != 1 || same.calls.Load() != 0 {
		t.Fatalf("%d %s (small %d, same %d)", status, body, small.calls.Load(), same.calls.Load())
	}
	status, _, body = env.post(key, "/chat/completions", chatReq("m-ctx-none", false))
	if status != 400 || !strings.Contains(string(body), `"code":"context_length_exceeded"`) || same.calls.Load() != 0 {
		t.Fatalf("no larger window: %d %s", status, body)
	}
	before := same.calls.Load()
	client := env.openai(key)
	_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "m-policy", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "content_policy_violation" || !strings.Contains(apiErr.Message, "safety system") {
		t.Fatalf("content policy: %v", err)
	}
	if same.calls.Load() != before || policy.calls.Load() != 1 {
		t.Fatal("a content-policy refusal was retried or fell back")
	}
}

func TestCircuitBreakerOpensAndRecovers(t *testing.T) {
	var healthy atomic.Bool
	primary := newScripted(t, func(int) behaviour {
		if healthy.Load() {
			return chatOK("from primary", 3, 1)
		}
		return upstreamError(500, "server_error", "", "down", nil)
	})
	backup := newScripted(t, func(int) behaviour { return chatOK("from backup", 3, 1) })
	env := startGateway(t, resilientProvider("primary", primary.URL, "retries 0\n\t\t\tcircuit_breaker 2 500ms")+resilientProvider("backup", backup.URL, "")+
		pricedModel("m", pricedRoute("primary", "x")+pricedRoute("backup", "y")), "")
	_, key := env.workspace(5 * usd)
	for i := 0; i < 2; i++ {
		if status, _, body := env.post(key, "/chat/completions", chatReq("m", false)); status != 200 || !strings.Contains(string(body), "from backup") {
			t.Fatalf("%d %s", status, body)
		}
	}
	if primary.calls.Load() != 2 {
		t.Fatalf("primary called %d times", primary.calls.Load())
	}
	// Open: the primary is skipped.
	status, _, body := env.post(key, "/chat/completions", chatReq("m", false))
	if status != 200 || primary.calls.Load() != 2 || len(metaAttempts(t, body)) != 1 {
		t.Fatalf("open circuit still tried the primary: %d calls, %s", primary.calls.Load(), body)
	}
	// The primary recovers; after the cooldown one probe closes the circuit.
	healthy.Store(true)
	time.Sleep(600 * time.Millisecond)
	status, _, body = env.post(key, "/chat/completions", chatReq("m", false))
	if status != 200 || !strings.Contains(string(body), "from primary") {
		t.Fatalf("after cooldown: %d %s", status, body)
	}
	status, _, body = env.post(key, "/chat/completions", chatReq("m", false))
	if status != 200 || !strings.Contains(string(body), "from primary") {
		t.Fatalf("circuit did not close: %d %s", status, body)
	}
}

// A circuit opens on the route's own faults only: answers that refuse one request (a
// missing previous response, a conflict, an invalid field) leave it closed for everyone.
func TestClientErrorsDoNotOpenTheBreaker(t *testing.T) {
	cases := []struct {
		name   string
		answer behaviour
		opens  bool
	}{
		{"404 previous response not found", upstreamError(404, "invalid_request_error", "previous_response_not_found", "Previous response with id 'resp_x' not found.", nil), false},
		{"400 invalid field", upstreamError(400, "invalid_request_error", "invalid_value", "Invalid value for 'temperature'.", nil), false},
		{"409 conflict", upstreamError(409, "invalid_request_error", "conflict", "The resource is being modified.", nil), false},
		{"422 unprocessable", upstreamError(422, "invalid_request_error", "", "Unprocessable input.", nil), false},
		{"500 server error", upstreamError(500, "server_error", "", "down", nil), true},
		{"503 overloaded", upstreamError(503, "server_error", "", "overloaded", nil), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var healthy atomic.Bool
			primary := newScripted(t, func(int) behaviour {
				if healthy.Load() {
					return chatOK("from primary", 3, 1)
				}
				return tc.answer
			})
			backup := newScripted(t, func(int) behaviour { return chatOK("from backup", 3, 1) })
			env := startGateway(t, resilientProvider("primary", primary.URL, "retries 0\n\t\t\tcircuit_breaker 3 1h")+resilientProvider("backup", backup.URL, "")+
				pricedModel("m", pricedRoute("primary", "x")+pricedRoute("backup", "y")), "")
			_, key := env.workspace(5 * usd)
			const threshold = 3
			for i := 0; i < 2*threshold; i++ {
				env.post(key, "/chat/completions", chatReq("m", false))
			}
			healthy.Store(true)
			before := primary.calls.Load()
			status, _, body := env.post(key, "/chat/completions", chatReq("m", false))
			tried := primary.calls.Load() > before
			if tried == tc.opens {
				t.Fatalf("after %d answers %q the primary was tried: %v, want %v (%d %s)", 2*threshold, tc.name, tried, !tc.opens, status, body)
			}
			if !tc.opens && (status != 200 || !strings.Contains(string(body), "from primary")) {
				t.Fatalf("%d %s", status, body)
			}
		})
	}
}
