package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/packages/ssestream"

	"github.com/modelgateway/caddy-modelgateway/internal/bufs"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/sse"
)

// upstreamStream is a stream as the API sends it: ping, thinking with its signature, text,
// two tool calls whose input arrives in pieces, cumulative usage in message_delta.
const upstreamStream = `event: message_start
data: {"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":472,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"cache_creation":{"ephemeral_5m_input_tokens":100,"ephemeral_1h_input_tokens":0},"output_tokens":2,"service_tier":"standard"}}}

event: ping
data: {"type": "ping"}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"The user wants "}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"two cities."}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM1gbcDa9GJwZA"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Let me check "}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"both cities."}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_01A","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Pa"}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"ris\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: content_block_start
data: {"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_01B","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}

event: content_block_delta
data: {"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":" \"London\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":3}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}

event: message_stop
data: {"type":"message_stop"}

`

// writeChunked writes s in small pieces, flushing each, so that events and lines arrive
// split across reads.
func writeChunked(w http.ResponseWriter, s string, size int) {
	f, _ := w.(http.Flusher)
	for len(s) > 0 {
		n := min(size, len(s))
		_, _ = io.WriteString(w, s[:n])
		if f != nil {
			f.Flush()
		}
		s = s[n:]
	}
}

func sseServer(t *testing.T, body string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		writeChunked(w, body, 37)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func collect(s providers.Stream) []providers.Event {
	var evs []providers.Event
	for s.Next() {
		evs = append(evs, s.Current())
	}
	return evs
}

func TestStreamDecode(t *testing.T) {
	var sent map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewDecoder(r.Body).Decode(&sent)
		if r.Header.Get("Accept") != "text/event-stream" {
			t.Errorf("accept %q", r.Header.Get("Accept"))
		}
		w.Header().Set("Content-Type", "text/event-stream")
		writeChunked(w, upstreamStream, 29)
	}))
	defer srv.Close()
	s, err := newTestProvider(t, srv.URL).ChatStream(context.Background(), hello)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	evs := collect(s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if sent["stream"] != true || sent["max_tokens"] != 4096.0 {
		t.Errorf("request body %v", sent)
	}
	start := providers.Usage{Input: 472, CacheWrite: 100, CacheRead: 2000, Output: 2}
	final := providers.Usage{Input: 472, CacheWrite: 100, CacheRead: 2000, Output: 89}
	want := []providers.Event{
		{Type: providers.EventUsage, Usage: start},
		{Type: providers.EventReasoning, Text: "The user wants "},
		{Type: providers.EventReasoning, Text: "two cities."},
		{Type: providers.EventReasoning, Signature: providers.Tag(providers.SigAnthropic, "EqQBCgIYAhIM1gbcDa9GJwZA")},
		{Type: providers.EventText, Text: "Let me check "},
		{Type: providers.EventText, Text: "both cities."},
		{Type: providers.EventToolCall, Index: 0, ToolCall: providers.ToolCall{ID: "toolu_01A", Name: "get_weather"}},
		{Type: providers.EventToolCall, Index: 0, ToolCall: providers.ToolCall{Arguments: `{"city": "Pa`}},
		{Type: providers.EventToolCall, Index: 0, ToolCall: providers.ToolCall{Arguments: `ris"}`}},
		{Type: providers.EventToolCall, Index: 1, ToolCall: providers.ToolCall{ID: "toolu_01B", Name: "get_weather"}},
		{Type: providers.EventToolCall, Index: 1, ToolCall: providers.ToolCall{Arguments: `{"city":`}},
		{Type: providers.EventToolCall, Index: 1, ToolCall: providers.ToolCall{Arguments: ` "London"}`}},
		{Type: providers.EventFinish, FinishReason: providers.FinishToolCalls},
		{Type: providers.EventUsage, Usage: final},
	}
	if !reflect.DeepEqual(evs, want) {
		t.Fatalf("events\n%+v\nwant\n%+v", evs, want)
	}
}

func TestStreamDecodeVariants(t *testing.T) {
	start := `event: message_start
data: {"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"x","content":[],"usage":{"input_tokens":5,"cache_creation_input_tokens":null,"cache_read_input_tokens":null,"output_tokens":1}}}

`
	cases := []struct {
		name    string
		body    string
		skipped int // frames skipped as malformed
		check   func(t *testing.T, evs []providers.Event, err error)
	}{{
		name: "stop sequence, usage repeated in message_delta replaces and never adds",
		body: start + `event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"1, 2, 3"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"citations_delta","citation":{"type":"char_location"}}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"stop_sequence","stop_sequence":"4"},"usage":{"input_tokens":5,"cache_read_input_tokens":7,"output_tokens":10,"output_tokens_details":{"thinking_tokens":3}}}

event: message_stop
data: {"type":"message_stop"}

`,
		check: func(t *testing.T, evs []providers.Event, err error) {
			if err != nil {
				t.Fatal(err)
			}
			last := evs[len(evs)-1]
			fin := evs[len(evs)-2]
			if fin.Type != providers.EventFinish || fin.FinishReason != providers.FinishStop || fin.StopSequence != "4" {
				t.Errorf("finish %+v", fin)
			}
			if last.Usage != (providers.Usage{Input: 5, CacheRead: 7, Output: 7, Reasoning: 3}) {
				t.Errorf("usage %+v", last.Usage)
			}
		},
	}, {
		name: "no event lines: dispatched on the data type; server tool blocks skipped",
		body: strings.ReplaceAll(start, "event: message_start\n", "") + `data: {"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}}

data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"q\":1}"}}

data: {"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"xyz"}}

data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_9","name":"f","input":{"whole":true}}}

data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":3}}

data: {"type":"message_stop"}

`,
		check: func(t *testing.T, evs []providers.Event, err error) {
			if err != nil {
				t.Fatal(err)
			}
			want := []providers.Event{
				{Type: providers.EventUsage, Usage: providers.Usage{Input: 5, Output: 1}},
				{Type: providers.EventToolCall, Index: 0, ToolCall: providers.ToolCall{ID: "toolu_9", Name: "f", Arguments: `{"whole":true}`}},
				{Type: providers.EventFinish, FinishReason: providers.FinishToolCalls},
				{Type: providers.EventUsage, Usage: providers.Usage{Input: 5, Output: 3}},
			}
			if !reflect.DeepEqual(evs, want) {
				t.Errorf("events\n%+v\nwant\n%+v", evs, want)
			}
		},
	}, {
		name: "in-stream error event",
		body: start + `event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}

event: error
data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}

`,
		check: func(t *testing.T, evs []providers.Event, err error) {
			ue, ok := providers.AsUpstreamError(err)
			if !ok || ue.Type != "overloaded_error" || ue.Code != "overloaded_error" || ue.Message != "Overloaded" ||
				ue.Category != providers.CategoryServerError || !ue.Retryable || ue.Status != 529 {
				t.Fatalf("err = %#v", err)
			}
			if len(evs) != 2 || evs[1].Text != "Hi" {
				t.Errorf("events before the error: %+v", evs)
			}
		},
	}, {
		name: "in-stream rate limit error",
		body: start + "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"slow down\"}}\n\n",
		check: func(t *testing.T, evs []providers.Event, err error) {
			ue, ok := providers.AsUpstreamError(err)
			if !ok || ue.Category != providers.CategoryRateLimited || !ue.Retryable {
				t.Fatalf("err = %#v", err)
			}
		},
	}, {
		name: "in-stream error event that is not JSON",
		body: start + "event: error\ndata: upstream overloaded\n\n",
		check: func(t *testing.T, evs []providers.Event, err error) {
			if _, ok := providers.AsUpstreamError(err); !ok || len(evs) != 1 {
				t.Fatalf("events %+v, err = %#v", evs, err)
			}
		},
	}, {
		name:    "error type in the data of an unnamed event",
		body:    start + "data: not json\n\n" + `data: {"type":"error","error":{"type":"api_error","message":"boom"}}` + "\n\n",
		skipped: 1,
		check: func(t *testing.T, evs []providers.Event, err error) {
			ue, ok := providers.AsUpstreamError(err)
			if !ok || ue.Message != "boom" || len(evs) != 1 {
				t.Fatalf("events %+v, err = %#v", evs, err)
			}
		},
	}, {
		name: "clean EOF before message_delta ends cleanly with a finish and the usage",
		body: start + `event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hal"}}

`,
		check: func(t *testing.T, evs []providers.Event, err error) {
			if err != nil {
				t.Fatal(err)
			}
			want := []providers.Event{
				{Type: providers.EventUsage, Usage: providers.Usage{Input: 5, Output: 1}},
				{Type: providers.EventText, Text: "Hal"},
				{Type: providers.EventFinish, FinishReason: providers.FinishStop},
				{Type: providers.EventUsage, Usage: providers.Usage{Input: 5, Output: 1}},
			}
			if !reflect.DeepEqual(evs, want) {
				t.Errorf("events\n%+v\nwant\n%+v", evs, want)
			}
		},
	}, {
		name: "clean EOF after a tool call finishes with tool_calls",
		body: start + `data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{}}}

data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{}"}}

`,
		check: func(t *testing.T, evs []providers.Event, err error) {
			if err != nil {
				t.Fatal(err)
			}
			if n := len(evs); n != 5 || evs[n-2].FinishReason != providers.FinishToolCalls || evs[n-1].Type != providers.EventUsage {
				t.Errorf("events %+v", evs)
			}
		},
	}, {
		name: "empty body ends cleanly with stop and zero usage",
		body: ": keep-alive\n\n",
		check: func(t *testing.T, evs []providers.Event, err error) {
			want := []providers.Event{
				{Type: providers.EventFinish, FinishReason: providers.FinishStop},
				{Type: providers.EventUsage},
			}
			if err != nil || !reflect.DeepEqual(evs, want) {
				t.Fatalf("events %+v, err %v", evs, err)
			}
		},
	}, {
		name: "EOF after message_delta without message_stop is complete",
		body: start + "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"},\"usage\":{\"output_tokens\":4}}\n\n",
		check: func(t *testing.T, evs []providers.Event, err error) {
			want := []providers.Event{
				{Type: providers.EventUsage, Usage: providers.Usage{Input: 5, Output: 1}},
				{Type: providers.EventFinish, FinishReason: providers.FinishLength},
				{Type: providers.EventUsage, Usage: providers.Usage{Input: 5, Output: 4}},
			}
			if err != nil || !reflect.DeepEqual(evs, want) {
				t.Fatalf("events %+v, err %v", evs, err)
			}
		},
	}, {
		name: "EOF after message_delta without usage sends the usage after the finish",
		body: start + "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\n",
		check: func(t *testing.T, evs []providers.Event, err error) {
			want := []providers.Event{
				{Type: providers.EventUsage, Usage: providers.Usage{Input: 5, Output: 1}},
				{Type: providers.EventFinish, FinishReason: providers.FinishStop},
				{Type: providers.EventUsage, Usage: providers.Usage{Input: 5, Output: 1}},
			}
			if err != nil || !reflect.DeepEqual(evs, want) {
				t.Fatalf("events %+v, err %v", evs, err)
			}
		},
	}, {
		name: "malformed frames are skipped and counted",
		body: start + `event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta",

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}

event: content_block_start
data: {"type":"content_block_start","content_block":{"type":"text","text":"no index"}}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_bad","name":"f","input":{"a":1,}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{}"}}

event: content_block_delta
data: {"type":"content_block_delta","index":4,"delta":{"type":"input_json_delta","partial_json":"{}"}}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_ok","name":"g","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"not here"}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{}"}}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":"many"}}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":6}}

event: message_stop
data: {"type":"message_stop"}

`,
		skipped: 7,
		check: func(t *testing.T, evs []providers.Event, err error) {
			if err != nil {
				t.Fatal(err)
			}
			want := []providers.Event{
				{Type: providers.EventUsage, Usage: providers.Usage{Input: 5, Output: 1}},
				{Type: providers.EventText, Text: "Hi"},
				{Type: providers.EventToolCall, Index: 0, ToolCall: providers.ToolCall{ID: "toolu_ok", Name: "g"}},
				{Type: providers.EventToolCall, Index: 0, ToolCall: providers.ToolCall{Arguments: "{}"}},
				{Type: providers.EventFinish, FinishReason: providers.FinishToolCalls},
				{Type: providers.EventUsage, Usage: providers.Usage{Input: 5, Output: 6}},
			}
			if !reflect.DeepEqual(evs, want) {
				t.Errorf("events\n%+v\nwant\n%+v", evs, want)
			}
		},
	}, {
		name:    "malformed frame then a clean end without message_stop",
		body:    start + "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\n\n",
		skipped: 1,
		check: func(t *testing.T, evs []providers.Event, err error) {
			if err != nil || len(evs) != 3 || evs[1].FinishReason != providers.FinishStop {
				t.Fatalf("events %+v, err %v", evs, err)
			}
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := newTestProvider(t, sseServer(t, tc.body).URL).ChatStream(context.Background(), hello)
			if err != nil {
				t.Fatal(err)
			}
			evs := collect(s)
			tc.check(t, evs, s.Err())
			sk, ok := s.(interface{ SkippedFrames() int })
			if !ok {
				t.Fatalf("%T has no SkippedFrames", s)
			}
			if n := sk.SkippedFrames(); n != tc.skipped {
				t.Errorf("%d frames skipped, want %d", n, tc.skipped)
			}
			_ = s.Close()
			if s.Next() {
				t.Error("Next after the end")
			}
		})
	}
}

func TestStreamJSONFallback(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, messageResponse)
	}))
	defer srv.Close()
	s, err := newTestProvider(t, srv.URL).ChatStream(context.Background(), hello)
	if err != nil {
		t.Fatal(err)
	}
	evs := collect(s)
	if len(evs) != 6 || evs[0].Type != providers.EventReasoning || evs[4].FinishReason != providers.FinishToolCalls || evs[5].Usage.Input != 2095 {
		t.Errorf("events %+v", evs)
	}
}

// hangingServer writes the head of a stream and then holds the connection until the client
// leaves (or release is closed); cancelled is closed when it saw its request cancelled.
func hangingServer(t *testing.T, head string) (srv *httptest.Server, cancelled, release chan struct{}) {
	t.Helper()
	cancelled, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // the server notices a client gone only once the body is read
		w.Header().Set("Content-Type", "text/event-stream")
		writeChunked(w, head, 1<<20)
		select {
		case <-r.Context().Done():
			once.Do(func() { close(cancelled) })
		case <-release:
		}
	}))
	t.Cleanup(func() {
		close(release)
		srv.Close()
	})
	return srv, cancelled, release
}

const streamHead = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n" +
	"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n"

func TestStreamCancel(t *testing.T) {
	srv, cancelled, _ := hangingServer(t, streamHead)
	p := newTestProvider(t, srv.URL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := p.ChatStream(ctx, hello)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for s.Next() {
		if s.Current().Text == "Hel" {
			cancel()
		}
	}
	if !errors.Is(s.Err(), context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", s.Err())
	}
	if _, ok := providers.AsUpstreamError(s.Err()); ok {
		t.Fatal("caller cancellation reported as an upstream failure")
	}
	select {
	case <-cancelled:
	case <-time.After(2 * time.Second):
		t.Fatal("the upstream never saw its request cancelled")
	}
}

func TestStreamIdleTimeout(t *testing.T) {
	srv, cancelled, _ := hangingServer(t, streamHead)
	p := newTestProvider(t, srv.URL, func(c *Config) { c.StreamIdleTimeout = 100 * time.Millisecond })
	s, err := p.ChatStream(context.Background(), hello)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	evs := collect(s)
	_ = s.Close()
	ue, ok := providers.AsUpstreamError(s.Err())
	if !ok || !ue.Timeout || !ue.Retryable || !errors.Is(s.Err(), ErrIdleTimeout) {
		t.Fatalf("err = %#v", s.Err())
	}
	if len(evs) != 2 || time.Since(began) > 2*time.Second {
		t.Errorf("events %+v after %v", evs, time.Since(began))
	}
	select {
	case <-cancelled:
	case <-time.After(2 * time.Second):
		t.Fatal("the upstream connection was not released")
	}
}

func TestStreamMidStreamDrop(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeChunked(w, streamHead+"event: content_block_delta\ndata: {\"type\":\"content_bl", 1<<20)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	defer srv.Close()
	s, err := newTestProvider(t, srv.URL).ChatStream(context.Background(), hello)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	evs := collect(s)
	ue, ok := providers.AsUpstreamError(s.Err())
	if !ok || !ue.Retryable || ue.Category != providers.CategoryServerError {
		t.Fatalf("err = %#v", s.Err())
	}
	if len(evs) != 2 {
		t.Errorf("events %+v", evs)
	}
}

func TestStreamCloseEarly(t *testing.T) {
	srv, cancelled, _ := hangingServer(t, streamHead)
	s, err := newTestProvider(t, srv.URL).ChatStream(context.Background(), hello)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Next() {
		t.Fatal(s.Err())
	}
	_ = s.Close()
	_ = s.Close()
	if s.Next() {
		t.Error("Next after Close")
	}
	select {
	case <-cancelled:
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not release the upstream")
	}
}

func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		full := sseServer(t, upstreamStream)
		hang, _, _ := hangingServer(t, streamHead)
		p := newTestProvider(t, full.URL, func(c *Config) { c.StreamIdleTimeout = 50 * time.Millisecond })
		ph := newTestProvider(t, hang.URL, func(c *Config) { c.StreamIdleTimeout = 50 * time.Millisecond })
		for range 3 {
			s, err := p.ChatStream(context.Background(), hello)
			if err != nil {
				t.Fatal(err)
			}
			collect(s)
			_ = s.Close()
			s, err = ph.ChatStream(context.Background(), hello)
			if err != nil {
				t.Fatal(err)
			}
			collect(s) // ends on the idle timeout
			_ = s.Close()
			ctx, cancel := context.WithCancel(context.Background())
			s, err = ph.ChatStream(ctx, hello)
			if err != nil {
				t.Fatal(err)
			}
			s.Next()
			cancel()
			collect(s)
			_ = s.Close()
		}
		p.up.HTTP.CloseIdleConnections()
		ph.up.HTTP.CloseIdleConnections()
	}()
	deadline := time.Now().Add(3 * time.Second)
	for {
		// The servers are still up (closed at cleanup) with their own goroutines: allow those.
		n := runtime.NumGoroutine()
		if n <= before+8 {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines: %d before, %d after\n%s", before, n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// accumulate feeds an encoded stream to the official SDK's decoder and accumulator, as
// client.Messages.NewStreaming does.
func accumulate(t *testing.T, sseBody []byte) (sdk.Message, error) {
	t.Helper()
	res := &http.Response{
		StatusCode: 200,
		Header:     http.Header{"Content-Type": {"text/event-stream"}},
		Body:       io.NopCloser(bytes.NewReader(sseBody)),
		Request:    httptest.NewRequest(http.MethodPost, "https://api.anthropic.com/v1/messages", nil),
	}
	stream := ssestream.NewStream[sdk.MessageStreamEventUnion](ssestream.NewDecoder(res), nil)
	defer stream.Close()
	var msg sdk.Message
	for stream.Next() {
		if err := msg.Accumulate(stream.Current()); err != nil {
			t.Fatalf("accumulate: %v", err)
		}
	}
	return msg, stream.Err()
}

func writeFrames(t *testing.T, buf *bytes.Buffer, frames []Frame) {
	t.Helper()
	for _, f := range frames {
		var probe struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(f.Data, &probe); err != nil || probe.Type != f.Event {
			t.Fatalf("frame %s: data type %q, err %v: %s", f.Event, probe.Type, err, f.Data)
		}
		if err := sse.WriteEvent(buf, f.Event, f.Data); err != nil {
			t.Fatal(err)
		}
	}
}

func TestStreamEncoderWithSDK(t *testing.T) {
	usage := providers.Usage{Input: 472, CacheRead: 2000, CacheWrite: 100, Output: 80, Reasoning: 9}
	cases := []struct {
		name   string
		events []providers.Event
		reason providers.FinishReason
		seq    string
		check  func(t *testing.T, m sdk.Message)
	}{{
		name: "thinking, text, two tool calls in pieces",
		events: []providers.Event{
			{Type: providers.EventReasoning, Text: "Two "},
			{Type: providers.EventReasoning, Text: "cities."},
			{Type: providers.EventReasoning, Signature: "sig=="},
			{Type: providers.EventText, Text: "Checking "},
			{Type: providers.EventText, Text: "\"both\"\n"},
			{Type: providers.EventUsage, Usage: usage},
			{Type: providers.EventToolCall, Index: 0, ToolCall: providers.ToolCall{ID: "toolu_A", Name: "get_weather"}},
			{Type: providers.EventToolCall, Index: 0, ToolCall: providers.ToolCall{Arguments: `{"city": "Pa`}},
			{Type: providers.EventToolCall, Index: 0, ToolCall: providers.ToolCall{Arguments: `ris"}`}},
			{Type: providers.EventToolCall, Index: 1, ToolCall: providers.ToolCall{ID: "toolu_B", Name: "get_weather", Arguments: `{"city":`}},
			{Type: providers.EventToolCall, Index: 1, ToolCall: providers.ToolCall{Arguments: `"London"}`}},
		},
		reason: providers.FinishToolCalls,
		check: func(t *testing.T, m sdk.Message) {
			if len(m.Content) != 4 {
				t.Fatalf("content %+v", m.Content)
			}
			if th := m.Content[0].AsThinking(); th.Thinking != "Two cities." || th.Signature != "sig==" {
				t.Errorf("thinking %+v", th)
			}
			if m.Content[1].AsText().Text != "Checking \"both\"\n" {
				t.Errorf("text %q", m.Content[1].AsText().Text)
			}
			a, b := m.Content[2].AsToolUse(), m.Content[3].AsToolUse()
			if a.ID != "toolu_A" || a.Name != "get_weather" || string(a.Input) != `{"city": "Paris"}` {
				t.Errorf("tool A %+v input %s", a, a.Input)
			}
			if b.ID != "toolu_B" || string(b.Input) != `{"city":"London"}` {
				t.Errorf("tool B %+v input %s", b, b.Input)
			}
			if m.StopReason != sdk.StopReasonToolUse {
				t.Errorf("stop %q", m.StopReason)
			}
		},
	}, {
		name:   "stop sequence",
		events: []providers.Event{{Type: providers.EventText, Text: "1 2 3"}},
		reason: providers.FinishStop, seq: "4",
		check: func(t *testing.T, m sdk.Message) {
			if m.StopReason != sdk.StopReasonStopSequence || m.StopSequence != "4" || m.Content[0].AsText().Text != "1 2 3" {
				t.Errorf("message %+v", m)
			}
		},
	}, {
		name: "interleaved tool pieces and a tool call without a stop reason",
		events: []providers.Event{
			{Type: providers.EventToolCall, Index: 0, ToolCall: providers.ToolCall{ID: "call_1", Name: "a", Arguments: `{"x":`}},
			{Type: providers.EventToolCall, Index: 1, ToolCall: providers.ToolCall{ID: "call_2", Name: "b", Arguments: `{}`}},
			{Type: providers.EventToolCall, Index: 0, ToolCall: providers.ToolCall{Arguments: `1}`}},
		},
		reason: providers.FinishStop,
		check: func(t *testing.T, m sdk.Message) {
			if len(m.Content) != 2 || string(m.Content[0].AsToolUse().Input) != `{"x":1}` || string(m.Content[1].AsToolUse().Input) != `{}` {
				t.Errorf("content %+v", m.Content)
			}
			if m.StopReason != sdk.StopReasonToolUse {
				t.Errorf("stop %q", m.StopReason)
			}
		},
	}, {
		name:   "empty answer cut by length",
		reason: providers.FinishLength,
		check: func(t *testing.T, m sdk.Message) {
			if len(m.Content) != 0 || m.StopReason != sdk.StopReasonMaxTokens {
				t.Errorf("message %+v", m)
			}
		},
	}, {
		name:   "refusal",
		events: []providers.Event{{Type: providers.EventText, Text: "I can't"}, {Type: providers.EventText}},
		reason: providers.FinishContentFilter,
		check: func(t *testing.T, m sdk.Message) {
			if m.StopReason != sdk.StopReasonRefusal || len(m.Content) != 1 {
				t.Errorf("message %+v", m)
			}
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			enc := NewStreamEncoder("msg_gw_1", "claude-x")
			var buf bytes.Buffer
			writeFrames(t, &buf, enc.Start(providers.Usage{Input: usage.Input, CacheRead: usage.CacheRead, CacheWrite: usage.CacheWrite}))
			for _, ev := range tc.events {
				writeFrames(t, &buf, enc.Encode(ev))
			}
			writeFrames(t, &buf, enc.Finish(tc.reason, tc.seq, usage))
			if extra := enc.Finish(tc.reason, tc.seq, usage); extra != nil {
				t.Errorf("second Finish: %v", extra)
			}
			if extra := enc.Encode(providers.Event{Type: providers.EventText, Text: "late"}); extra != nil {
				t.Errorf("Encode after Finish: %v", extra)
			}
			m, err := accumulate(t, buf.Bytes())
			if err != nil {
				t.Fatalf("sdk: %v\n%s", err, buf.Bytes())
			}
			if m.ID != "msg_gw_1" || m.Model != "claude-x" || m.Role != "assistant" {
				t.Errorf("header %+v", m)
			}
			u := m.Usage
			if u.InputTokens != 472 || u.CacheReadInputTokens != 2000 || u.CacheCreationInputTokens != 100 ||
				u.OutputTokens != 89 || u.OutputTokensDetails.ThinkingTokens != 9 {
				t.Errorf("usage %+v", u)
			}
			tc.check(t, m)
		})
	}
}

func TestStreamEncoderError(t *testing.T) {
	enc := NewStreamEncoder("msg_1", "m")
	var buf bytes.Buffer
	writeFrames(t, &buf, enc.Encode(providers.Event{Type: providers.EventText, Text: "Hi"}))
	writeFrames(t, &buf, []Frame{ErrorFrame("overloaded_error", "Overloaded \"now\"")})
	m, err := accumulate(t, buf.Bytes())
	var apiErr *sdk.Error
	if !errors.As(err, &apiErr) || !strings.Contains(err.Error(), "overloaded_error") {
		t.Fatalf("err = %v", err)
	}
	if m.Content[0].Text != "Hi" {
		t.Errorf("content before the error %+v", m.Content)
	}
}

// TestUpstreamThroughEncoder runs a real-looking upstream stream through the adapter and
// the encoder into the SDK: what a client of the gateway's messages surface receives.
func TestUpstreamThroughEncoder(t *testing.T) {
	s, err := newTestProvider(t, sseServer(t, upstreamStream).URL).ChatStream(context.Background(), hello)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	enc := NewStreamEncoder("msg_gw", "claude-sonnet-4-5")
	var buf bytes.Buffer
	var usage providers.Usage
	var reason providers.FinishReason
	var seq string
	for s.Next() {
		ev := s.Current()
		switch ev.Type {
		case providers.EventUsage:
			usage = ev.Usage
			writeFrames(t, &buf, enc.Start(usage))
		case providers.EventFinish:
			reason, seq = ev.FinishReason, ev.StopSequence
		default:
			writeFrames(t, &buf, enc.Encode(ev))
		}
	}
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
	writeFrames(t, &buf, enc.Finish(reason, seq, usage))
	m, err := accumulate(t, buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Content) != 4 || m.Content[0].AsThinking().Signature != "EqQBCgIYAhIM1gbcDa9GJwZA" ||
		m.Content[1].AsText().Text != "Let me check both cities." ||
		string(m.Content[2].AsToolUse().Input) != `{"city": "Paris"}` || string(m.Content[3].AsToolUse().Input) != `{"city": "London"}` {
		t.Errorf("content %+v", m.Content)
	}
	if m.StopReason != sdk.StopReasonToolUse || m.Usage.InputTokens != 472 || m.Usage.OutputTokens != 89 || m.Usage.CacheReadInputTokens != 2000 {
		t.Errorf("message %+v", m)
	}
}

// TestStreamEncoderReusesItsBuffers: once a block is open, a delta allocates nothing (the
// frames and their data are reused from one Encode to the next), and the frames of one call
// do not overlap: appending to one's data leaves the next one's as it was.
func TestStreamEncoderReusesItsBuffers(t *testing.T) {
	enc := NewStreamEncoder("msg_1", "m")
	enc.Encode(providers.Event{Type: providers.EventText, Text: "first"})
	ev := providers.Event{Type: providers.EventText, Text: "a token"}
	if n := testing.AllocsPerRun(100, func() { enc.Encode(ev) }); n != 0 {
		t.Errorf("a text delta allocated %v times", n)
	}
	got := enc.Encode(ev)
	if len(got) != 1 || string(got[0].Data) != `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a token"}}` {
		t.Fatalf("frames %q", got)
	}

	enc.Encode(providers.Event{Type: providers.EventText, Text: strings.Repeat("x", 1000)}) // room for both below
	frames := enc.Encode(providers.Event{Type: providers.EventReasoning, Text: "hmm", Signature: "sig"})
	var deltas []Frame
	for _, f := range frames {
		if f.Event == "content_block_delta" {
			deltas = append(deltas, f)
		}
	}
	if len(deltas) != 2 {
		t.Fatalf("frames %q, want a thinking and a signature delta", frames)
	}
	second := string(deltas[1].Data)
	_ = append(deltas[0].Data, "XXXXXXXXXXXXXXXX"...)
	if string(deltas[1].Data) != second {
		t.Errorf("appending to the first delta's data changed the second's: %s", deltas[1].Data)
	}
	if !json.Valid(deltas[0].Data) || !strings.Contains(string(deltas[0].Data), `"thinking":"hmm"`) {
		t.Errorf("first delta %s", deltas[0].Data)
	}
}

// TestStreamReleasesItsReaderAtStop: a stream that ends at message_stop, before its body
// does, gives its SSE reader's buffer back (sse.Reader.Release): the reader reads nothing
// more, though the body still holds an event.
func TestStreamReleasesItsReaderAtStop(t *testing.T) {
	s := rawStream([]byte(upstreamStream + "event: ping\ndata: {\"type\":\"ping\"}\n\n"))
	for s.Next() {
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if s.rd.Next() {
		t.Fatal("the reader read on after message_stop: its buffer was not released")
	}
}

// TestStreamEncoderReusedAsNew: an encoder reset for the next stream (what Release does
// before pooling it) encodes exactly what a new one does, whatever the last stream left in
// it: a started message, open and lingering blocks, tool indexes, a buffer grown past what
// is kept. The frames of every call are whole events, also when several share the buffer.
func TestStreamEncoderReusedAsNew(t *testing.T) {
	usage := providers.Usage{Input: 12, CacheRead: 4, Output: 7}
	encode := func(e *StreamEncoder, evs []providers.Event, finish bool) string {
		var buf bytes.Buffer
		writeFrames(t, &buf, e.Start(usage))
		for _, ev := range evs {
			writeFrames(t, &buf, e.Encode(ev))
		}
		if finish {
			writeFrames(t, &buf, e.Finish(providers.FinishStop, "", usage))
		}
		return buf.String()
	}
	tool := func(index int, id, args string) providers.Event {
		return providers.Event{Type: providers.EventToolCall, Index: index, ToolCall: providers.ToolCall{ID: id, Name: "lookup", Arguments: args}}
	}
	last := []providers.Event{
		{Type: providers.EventReasoning, Text: "first, the weather", Signature: "sig"},
		tool(0, "toolu_a", `{"city": "Par`), // left incomplete: it lingers
		tool(1, "toolu_b", `{"city": "London"}`),
		{Type: providers.EventText, Text: strings.Repeat("long ", 5000)}, // grows the buffer past bufs.KeptRoom
	}
	next := []providers.Event{
		{Type: providers.EventText, Text: "Hi"},
		tool(0, "toolu_c", `{"city": "Rome"}`),
		{Type: providers.EventText, Text: " there"},
	}

	fresh := streamEncoders.New().(*StreamEncoder)
	fresh.id, fresh.model = "msg_2", "claude-x"
	want := encode(fresh, next, true)

	for _, finished := range []bool{false, true} {
		e := streamEncoders.New().(*StreamEncoder)
		e.id, e.model = "msg_1", "claude-y"
		encode(e, last, finished)
		e.reset()
		if cap(e.buf) > bufs.KeptRoom {
			t.Errorf("a buffer of %d bytes kept, more than %d", cap(e.buf), bufs.KeptRoom)
		}
		e.id, e.model = "msg_2", "claude-x"
		if got := encode(e, next, true); got != want {
			t.Errorf("after a stream (finished %v), the reused encoder wrote\n%s\nwant\n%s", finished, got, want)
		}
	}
}
