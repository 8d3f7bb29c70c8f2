package gemini

import (
	"context"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
)

func textEv(s string) providers.Event { return providers.Event{Type: providers.EventText, Text: s} }

func finishEv(r providers.FinishReason) providers.Event {
	return providers.Event{Type: providers.EventFinish, FinishReason: r}
}

func usageEv(u providers.Usage) providers.Event {
	return providers.Event{Type: providers.EventUsage, Usage: u}
}

func TestStream(t *testing.T) {
	cases := []struct {
		name   string
		frames []string
		want   []providers.Event
	}{
		{
			name: "text deltas; the last usage wins; a chunk without usage keeps it",
			frames: []string{
				`{"candidates":[{"content":{"parts":[{"text":"Hel"}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":7,"totalTokenCount":7},"modelVersion":"gemini-2.5-flash","responseId":"r1"}`,
				`{"candidates":[{"content":{"parts":[{"text":"lo"}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":7,"candidatesTokenCount":2,"totalTokenCount":9}}`,
				`{"candidates":[{"content":{"parts":[{"text":"!"}],"role":"model"},"finishReason":"STOP","index":0}],"modelVersion":"gemini-2.5-flash"}`,
			},
			want: []providers.Event{textEv("Hel"), textEv("lo"), textEv("!"), finishEv(providers.FinishStop),
				usageEv(providers.Usage{Input: 7, Output: 2})},
		},
		{
			name: "thought parts, their signature, then the answer",
			frames: []string{
				`{"candidates":[{"content":{"parts":[{"text":"**Thinking** about it","thought":true}],"role":"model"},"index":0}]}`,
				`{"candidates":[{"content":{"parts":[{"text":"","thoughtSignature":"c2lnLWE="}],"role":"model"},"index":0}]}`,
				`{"candidates":[{"content":{"parts":[{"text":"Answer."}],"role":"model"},"finishReason":"STOP","index":0}],
					"usageMetadata":{"promptTokenCount":4,"cachedContentTokenCount":2,"candidatesTokenCount":2,"thoughtsTokenCount":30,"totalTokenCount":36}}`,
			},
			want: []providers.Event{
				{Type: providers.EventReasoning, Text: "**Thinking** about it"},
				{Type: providers.EventReasoning, Signature: providers.Tag(providers.SigGemini, "c2lnLWE=")},
				textEv("Answer."), finishEv(providers.FinishStop),
				usageEv(providers.Usage{Input: 2, CacheRead: 2, Output: 2, Reasoning: 30}),
			},
		},
		{
			name: "max tokens",
			frames: []string{
				`{"candidates":[{"content":{"parts":[{"text":"cut"}],"role":"model"},"finishReason":"MAX_TOKENS","index":0}],"usageMetadata":{"promptTokenCount":1,"candidatesTokenCount":1}}`,
			},
			want: []providers.Event{textEv("cut"), finishEv(providers.FinishLength), usageEv(providers.Usage{Input: 1, Output: 1})},
		},
		{
			name: "prompt blocked: content_filter, no error",
			frames: []string{
				`{"promptFeedback":{"blockReason":"SAFETY","safetyRatings":[{"category":"HARM_CATEGORY_HARASSMENT","probability":"HIGH"}]},"usageMetadata":{"promptTokenCount":8,"totalTokenCount":8},"modelVersion":"gemini-2.5-flash"}`,
			},
			want: []providers.Event{finishEv(providers.FinishContentFilter), usageEv(providers.Usage{Input: 8})},
		},
		{
			name: "safety finish with no content",
			frames: []string{
				`{"candidates":[{"content":{"parts":[{"text":"Some"}],"role":"model"},"index":0}]}`,
				`{"candidates":[{"finishReason":"SAFETY","index":0,"safetyRatings":[{"category":"HARM_CATEGORY_HATE_SPEECH","probability":"MEDIUM","blocked":true}]}]}`,
			},
			want: []providers.Event{textEv("Some"), finishEv(providers.FinishContentFilter)},
		},
		{
			name: "a second candidate is ignored",
			frames: []string{
				`{"candidates":[{"content":{"parts":[{"text":"B"}]},"index":1},{"content":{"parts":[{"text":"A"}]},"index":0,"finishReason":"STOP"}]}`,
			},
			want: []providers.Event{textEv("A"), finishEv(providers.FinishStop)},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) { writeSSE(w, tc.frames...) })
			st, err := f.provider(t).ChatStream(context.Background(), simpleRequest())
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			got, err := collect(t, st)
			if err != nil {
				t.Fatalf("Err = %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("events\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestStreamFunctionCalls(t *testing.T) {
	// Newer models send the finish reason in a trailing chunk with an empty text part,
	// after the chunk that carried the calls.
	frames := []string{
		`{"candidates":[{"content":{"parts":[{"text":"Let me check."}],"role":"model"},"index":0}]}`,
		`{"candidates":[{"content":{"parts":[
			{"functionCall":{"name":"get_weather","args":{"city":"Paris"}},"thoughtSignature":"Rmlyc3Q="},
			{"functionCall":{"name":"get_weather","args":{"city":"Rome"}}}],"role":"model"},"index":0}],
			"usageMetadata":{"promptTokenCount":20,"candidatesTokenCount":10,"totalTokenCount":30}}`,
		`{"candidates":[{"content":{"parts":[{"functionCall":{"id":"fc-3","name":"get_time","args":{}}}],"role":"model"},"index":0}]}`,
		`{"candidates":[{"content":{"parts":[{"text":""}],"role":"model"},"finishReason":"STOP","index":0}],
			"usageMetadata":{"promptTokenCount":20,"candidatesTokenCount":15,"totalTokenCount":35}}`,
	}
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) { writeSSE(w, frames...) })
	st, err := f.provider(t).ChatStream(context.Background(), simpleRequest())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, err := collect(t, st)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 7 {
		t.Fatalf("%d events, want 7: %+v", len(got), got)
	}
	if got[0] != textEv("Let me check.") || got[1] != (providers.Event{Type: providers.EventReasoning, Signature: providers.Tag(providers.SigGemini, "Rmlyc3Q=")}) {
		t.Errorf("first events: %+v", got[:2])
	}
	calls := got[2:5]
	wantNames := []string{"get_weather", "get_weather", "get_time"}
	wantArgs := []string{`{"city":"Paris"}`, `{"city":"Rome"}`, `{}`}
	seen := map[string]bool{}
	for i, c := range calls {
		if c.Type != providers.EventToolCall || c.Index != i || c.ToolCall.Name != wantNames[i] || c.ToolCall.Arguments != wantArgs[i] || c.ToolCall.ID == "" {
			t.Errorf("call %d: %+v", i, c)
		}
		if seen[c.ToolCall.ID] {
			t.Errorf("id %q repeats", c.ToolCall.ID)
		}
		seen[c.ToolCall.ID] = true
	}
	if !strings.HasPrefix(calls[0].ToolCall.ID, syntheticIDPrefix) || calls[2].ToolCall.ID != "fc-3" {
		t.Errorf("ids: %q %q %q", calls[0].ToolCall.ID, calls[1].ToolCall.ID, calls[2].ToolCall.ID)
	}
	if got[5] != finishEv(providers.FinishToolCalls) {
		t.Errorf("finish = %+v, want tool_calls", got[5])
	}
	if got[6] != usageEv(providers.Usage{Input: 20, Output: 15}) {
		t.Errorf("usage = %+v", got[6])
	}
}

func TestStreamFailures(t *testing.T) {
	cases := []struct {
		name       string
		handler    http.HandlerFunc
		idle       time.Duration
		wantEvents []providers.Event
		check      func(t *testing.T, ue *providers.UpstreamError)
	}{
		{
			name: "in-stream error",
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeSSE(w, `{"candidates":[{"content":{"parts":[{"text":"par"}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":1}}`,
					`{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}`)
			},
			wantEvents: []providers.Event{textEv("par"), usageEv(providers.Usage{Input: 3, Output: 1})},
			check: func(t *testing.T, ue *providers.UpstreamError) {
				if ue.Status != 503 || ue.Code != "UNAVAILABLE" || ue.Category != providers.CategoryServerError || !ue.Retryable || !strings.Contains(ue.Message, "overloaded") {
					t.Errorf("got %+v", ue)
				}
			},
		},
		{
			name: "in-stream error without a code",
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeSSE(w, `{"error":{"message":"quota","status":"RESOURCE_EXHAUSTED"}}`)
			},
			check: func(t *testing.T, ue *providers.UpstreamError) {
				if ue.Status != 0 || ue.Category != providers.CategoryRateLimited || !ue.Retryable {
					t.Errorf("got %+v", ue)
				}
			},
		},
		{
			name: "error frame after a malformed one",
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeSSE(w, `{"candidates":[{"content":{"parts":[{"text":"ok"}]}}]}`, `{"candidates":[{"content":`,
					`{"error":{"code":500,"message":"internal","status":"INTERNAL"},"candidates":"x"}`)
			},
			wantEvents: []providers.Event{textEv("ok")},
			check: func(t *testing.T, ue *providers.UpstreamError) {
				if ue.Status != 500 || ue.Category != providers.CategoryServerError || !ue.Retryable {
					t.Errorf("got %+v", ue)
				}
			},
		},
		{
			name: "connection dropped mid-stream",
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeSSE(w, `{"candidates":[{"content":{"parts":[{"text":"be"}]}}]}`)
				conn, buf, err := http.NewResponseController(w).Hijack()
				if err != nil {
					panic(err)
				}
				// Half a chunk of the chunked encoding, then the connection is gone.
				_, _ = buf.WriteString("40\r\ndata: {\"candi")
				_ = buf.Flush()
				_ = conn.Close()
			},
			wantEvents: []providers.Event{textEv("be")},
			check: func(t *testing.T, ue *providers.UpstreamError) {
				if ue.Status != 0 || ue.Category != providers.CategoryServerError || !ue.Retryable || ue.Err == nil {
					t.Errorf("got %+v", ue)
				}
			},
		},
		{
			name: "malformed function call",
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeSSE(w, `{"candidates":[{"finishReason":"MALFORMED_FUNCTION_CALL","finishMessage":"Malformed function call: f(","index":0}]}`)
			},
			check: func(t *testing.T, ue *providers.UpstreamError) {
				if ue.Code != "MALFORMED_FUNCTION_CALL" || !errors.Is(ue, ErrUnusableAnswer) || !ue.Retryable {
					t.Errorf("got %+v", ue)
				}
			},
		},
		{
			name: "idle timeout",
			idle: 100 * time.Millisecond,
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeSSE(w, `{"candidates":[{"content":{"parts":[{"text":"wait"}]}}]}`)
				select {
				case <-r.Context().Done():
				case <-time.After(5 * time.Second):
				}
			},
			wantEvents: []providers.Event{textEv("wait")},
			check: func(t *testing.T, ue *providers.UpstreamError) {
				if !ue.Timeout || !errors.Is(ue, ErrIdleTimeout) || !ue.Retryable || ue.Category != providers.CategoryServerError {
					t.Errorf("got %+v", ue)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkGoroutines(t)
			f := newFake(t, tc.handler)
			p := f.provider(t, func(c *Config) { c.StreamIdleTimeout = tc.idle })
			st, err := p.ChatStream(context.Background(), simpleRequest())
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			start := time.Now()
			got, err := collect(t, st)
			if time.Since(start) > 3*time.Second {
				t.Errorf("the failure took %v to surface", time.Since(start))
			}
			if !reflect.DeepEqual(got, tc.wantEvents) {
				t.Errorf("events\n got %+v\nwant %+v", got, tc.wantEvents)
			}
			tc.check(t, asUpstream(t, err))
			noKeyIn(t, err)
			if st.Next() {
				t.Error("Next is true after the end")
			}
		})
	}
}

// Malformed frames are skipped and counted; a body that ends cleanly without a finish
// reason ends the stream cleanly, with a finish and the last usage known.
func TestStreamCleanEnds(t *testing.T) {
	cases := []struct {
		name    string
		frames  []string
		want    []providers.Event
		skipped int
	}{
		{
			name: "malformed frames skipped",
			frames: []string{
				`{"candidates":[{"content":{"parts":[{"text":"ok"}]}}]}`,
				`{"candidates":[{"content":`,
				`<html>502</html>`,
				`{"candidates":"x","usageMetadata":{"promptTokenCount":99}}`,
				`{"candidates":[{"content":{"parts":[{"text":"!"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":2}}`,
			},
			want:    []providers.Event{textEv("ok"), textEv("!"), finishEv(providers.FinishStop), usageEv(providers.Usage{Input: 3, Output: 2})},
			skipped: 3,
		},
		{
			name:    "malformed last frame, no finish reason",
			frames:  []string{`{"candidates":[{"content":{"parts":[{"text":"ok"}]}}]}`, `{"candidates":[{"content":`},
			want:    []providers.Event{textEv("ok"), finishEv(providers.FinishStop), usageEv(providers.Usage{})},
			skipped: 1,
		},
		{
			name:   "ended without a finish reason: stop and zero usage",
			frames: []string{`{"candidates":[{"content":{"parts":[{"text":"half"}]}}]}`},
			want:   []providers.Event{textEv("half"), finishEv(providers.FinishStop), usageEv(providers.Usage{})},
		},
		{
			name: "ended without a finish reason: the last usage known",
			frames: []string{
				`{"candidates":[{"content":{"parts":[{"text":"ha"}]}}],"usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":1}}`,
				`{"candidates":[{"content":{"parts":[{"text":"lf"}]}}],"usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":2}}`,
			},
			want: []providers.Event{textEv("ha"), textEv("lf"), finishEv(providers.FinishStop), usageEv(providers.Usage{Input: 4, Output: 2})},
		},
		{
			name:   "ended without a finish reason after a function call",
			frames: []string{`{"candidates":[{"content":{"parts":[{"functionCall":{"id":"c1","name":"f","args":{}}}]}}]}`},
			want: []providers.Event{
				{Type: providers.EventToolCall, ToolCall: providers.ToolCall{ID: "c1", Name: "f", Arguments: "{}"}},
				finishEv(providers.FinishToolCalls), usageEv(providers.Usage{}),
			},
		},
		{
			name: "empty body",
			want: []providers.Event{finishEv(providers.FinishStop), usageEv(providers.Usage{})},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkGoroutines(t)
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) { writeSSE(w, tc.frames...) })
			st, err := f.provider(t).ChatStream(context.Background(), simpleRequest())
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			got, err := collect(t, st)
			if err != nil {
				t.Fatalf("Err = %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("events\n got %+v\nwant %+v", got, tc.want)
			}
			sk, ok := st.(interface{ SkippedFrames() int })
			if !ok {
				t.Fatalf("%T has no SkippedFrames", st)
			}
			if n := sk.SkippedFrames(); n != tc.skipped {
				t.Errorf("%d frames skipped, want %d", n, tc.skipped)
			}
			if st.Next() {
				t.Error("Next is true after the end")
			}
		})
	}
}

func TestStreamContextCancel(t *testing.T) {
	checkGoroutines(t)
	gone := make(chan struct{})
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		writeSSE(w, `{"candidates":[{"content":{"parts":[{"text":"first"}]}}]}`)
		<-r.Context().Done()
		close(gone)
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := f.provider(t).ChatStream(ctx, simpleRequest())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !st.Next() || st.Current() != textEv("first") {
		t.Fatalf("first event: %+v, err %v", st.Current(), st.Err())
	}
	cancel()
	for st.Next() {
	}
	err = st.Err()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Err = %v, want context.Canceled", err)
	}
	if _, ok := providers.AsUpstreamError(err); ok {
		t.Errorf("the caller's cancellation is an *UpstreamError: %v", err)
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream never saw the cancellation")
	}
}

func TestStreamCloseEarly(t *testing.T) {
	checkGoroutines(t)
	gone := make(chan struct{})
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		writeSSE(w, `{"candidates":[{"content":{"parts":[{"text":"a"}]}}]}`)
		<-r.Context().Done()
		close(gone)
	})
	st, err := f.provider(t).ChatStream(context.Background(), simpleRequest())
	if err != nil {
		t.Fatal(err)
	}
	if !st.Next() {
		t.Fatal(st.Err())
	}
	// Close from another goroutine while Next waits, as a handler does when its client
	// leaves.
	go func() {
		time.Sleep(20 * time.Millisecond)
		_ = st.Close()
	}()
	if st.Next() {
		t.Error("Next is true after Close")
	}
	if _, ok := providers.AsUpstreamError(st.Err()); ok {
		t.Errorf("Close made an upstream failure: %v", st.Err())
	}
	_ = st.Close()
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream connection was not released")
	}
}

func TestStreamJSONAnswer(t *testing.T) {
	// A server that ignores alt=sse answers with a JSON array of responses.
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, `[{"candidates":[{"content":{"parts":[{"text":"one "}],"role":"model"},"index":0}]},
			{"candidates":[{"content":{"parts":[{"text":"two"}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":2,"candidatesTokenCount":2}}]`)
	})
	st, err := f.provider(t).ChatStream(context.Background(), simpleRequest())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, err := collect(t, st)
	if err != nil {
		t.Fatal(err)
	}
	want := []providers.Event{textEv("one "), textEv("two"), finishEv(providers.FinishStop), usageEv(providers.Usage{Input: 2, Output: 2})}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events\n got %+v\nwant %+v", got, want)
	}
}

// TestNoGoroutineLeaks runs streams to every kind of end and checks nothing is left
// running once they are closed.
func TestNoGoroutineLeaks(t *testing.T) {
	checkGoroutines(t)
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-Scenario") {
		case "complete":
			writeSSE(w, `{"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"STOP"}]}`)
		default:
			writeSSE(w, `{"candidates":[{"content":{"parts":[{"text":"x"}]}}]}`)
			<-r.Context().Done()
		}
	})
	for _, scenario := range []string{"complete", "close", "cancel", "idle"} {
		p := f.provider(t, func(c *Config) {
			c.Headers = map[string]string{"X-Scenario": scenario}
			c.StreamIdleTimeout = 50 * time.Millisecond
		})
		for i := 0; i < 5; i++ {
			ctx, cancel := context.WithCancel(context.Background())
			st, err := p.ChatStream(ctx, simpleRequest())
			if err != nil {
				t.Fatal(err)
			}
			st.Next()
			switch scenario {
			case "close":
				_ = st.Close()
			case "cancel":
				cancel()
			}
			for st.Next() {
			}
			_ = st.Close()
			cancel()
		}
	}
}

func TestStreamDecodeDirect(t *testing.T) {
	// The stream reads any body, not only HTTP ones: CR-only line endings, comments and
	// named events are handled as the SSE rules say.
	body := ": keep-alive\r" +
		"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]}}]}\r\r" +
		"event: other\rdata: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"ignored\"}]}}]}\r\r" +
		"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"b\"}]},\"finishReason\":\"STOP\"}]}"
	st := newStream(context.Background(), "gemini", upstreamhttp.NewAttempt(context.Background(), 0),
		io.NopCloser(strings.NewReader(body)), 0, nil, func(b []byte) []byte { return b })
	got, err := collect(t, st)
	if err != nil {
		t.Fatal(err)
	}
	want := []providers.Event{textEv("a"), textEv("b"), finishEv(providers.FinishStop)}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events\n got %+v\nwant %+v", got, want)
	}
}
