package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
)

func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(multiTurnRequest))
	f.Add([]byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"UE5H"}},{"type":"tool_result","tool_use_id":"a","is_error":true,"content":[{"type":"text","text":"x"}]}]}]}`))
	f.Add([]byte(`{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a.b","name":"f","input":{"k":[1,{"z":null}]}}]}],"thinking":{"type":"adaptive"},"output_config":{"effort":"max"}}`))
	f.Add([]byte(`{"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[]}],"tool_choice":{"type":"tool","name":"f"}}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"text","text":" "}]}],"temperature":3,"top_k":-1}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"messages":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeRequest(body)
		if err != nil {
			return
		}
		if req == nil {
			t.Fatal("nil request without an error")
		}
		// Whatever decodes must encode without a panic, and what encodes is valid JSON.
		out, err := EncodeRequest(req)
		if err == nil && !json.Valid(out) {
			t.Fatalf("invalid JSON: %s", out)
		}
		_ = Unsupported(req)
	})
}

// rawStream is a messagesStream over raw bytes, without HTTP.
func rawStream(data []byte) *messagesStream {
	at := upstreamhttp.NewAttempt(context.Background(), 0)
	body := upstreamhttp.NewIdleBody(io.NopCloser(bytes.NewReader(data)), time.Minute, "fuzz")
	return newMessagesStream(context.Background(), "fuzz", at, body)
}

func FuzzStreamDecode(f *testing.F) {
	f.Add([]byte(upstreamStream))
	f.Add([]byte(streamHead))
	f.Add([]byte("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"))
	f.Add([]byte("data: {\"type\":\"content_block_delta\",\"index\":-1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"x\"}}\n\n"))
	f.Add([]byte("data: {\"type\":\"content_block_start\",\"index\":99999999999,\"content_block\":{\"type\":\"tool_use\"}}\r\n\r\n"))
	f.Add([]byte("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":null},\"usage\":{\"output_tokens\":1e300}}\n\n"))
	f.Add([]byte(":comment\n\nevent: ping\ndata:\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := rawStream(data)
		defer s.Close()
		finishes := 0
		for n := 0; s.Next(); n++ {
			if n > 2*len(data)+8 {
				t.Fatalf("more events (%d) than the input can hold", n)
			}
			ev := s.Current()
			if ev.Type == providers.EventFinish {
				finishes++
			}
			if ev.Type == providers.EventToolCall && ev.Index < 0 {
				t.Fatalf("negative tool index: %+v", ev)
			}
			if u := ev.Usage; u.Input < 0 || u.Output < 0 || u.Reasoning < 0 || u.CacheRead < 0 || u.CacheWrite < 0 {
				t.Fatalf("negative usage: %+v", u)
			}
		}
		if finishes > 1 {
			t.Fatalf("%d finish events", finishes)
		}
		if s.Next() {
			t.Fatal("Next after the end")
		}
	})
}

// TestStreamEncoderNeverBreaksFraming checks the encoder on hostile text: every frame stays
// one SSE event whose data is valid JSON of the event's type.
func TestStreamEncoderNeverBreaksFraming(t *testing.T) {
	enc := NewStreamEncoder("msg\n1", "m\"x")
	evil := "a\nevent: error\ndata: {}\r\n\n\x00\xff\u2028"
	check := func(frames []Frame) {
		t.Helper()
		for _, f := range frames {
			if !json.Valid(f.Data) || bytes.ContainsAny(f.Data, "\r\n") {
				t.Fatalf("frame %s: %q", f.Event, f.Data)
			}
		}
	}
	// Encode's frames are valid until its next call: each call's are checked before it.
	check(enc.Encode(providers.Event{Type: providers.EventText, Text: evil}))
	check(enc.Encode(providers.Event{Type: providers.EventReasoning, Text: evil, Signature: evil}))
	check(enc.Encode(providers.Event{Type: providers.EventToolCall, ToolCall: providers.ToolCall{Name: evil, Arguments: evil}}))
	check(enc.Finish(providers.FinishStop, evil, providers.Usage{Input: -1}))
	check([]Frame{ErrorFrame(evil, evil)})
}
