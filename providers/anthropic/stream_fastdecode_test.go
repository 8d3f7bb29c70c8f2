package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// fastStreamEvents are event data as the API sends them; the fast path must take them all.
var fastStreamEvents = []string{
	`{"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":472,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"cache_creation":{"ephemeral_5m_input_tokens":100,"ephemeral_1h_input_tokens":0},"output_tokens":2,"service_tier":"standard"}}}`,
	`{"type":"message_start","message":{"id":"msg_02","type":"message","role":"assistant","model":"claude-haiku-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":5,"cache_creation_input_tokens":null,"cache_read_input_tokens":null,"output_tokens":1}}}`,
	`{"type":"message_start","message":{"id":"m","model":"x","usage":null}}`,
	`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
	`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"","citations":[]}}`,
	`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01A","name":"get_weather","input":{}}}`,
	`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01B","name":"get_weather","input":{"city":"Paris","days":[1,2]}}}`,
	`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
	`{"type":"content_block_start","index":0,"content_block":{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"}}`,
	`{"type":"content_block_start","index":2,"content_block":{"type":"server_tool_use","id":"srvtoolu_01","name":"web_search","input":{}}}`,
	`{"type":"content_block_start","index":3,"content_block":{"type":"web_search_tool_result","tool_use_id":"srvtoolu_01","content":[{"type":"web_search_result","url":"https://example.com","title":"Paris","encrypted_content":"Eo8B","page_age":null}]}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Voilà : \"日本語\" 🎉\n\ttab \u00e9 \ud83c\udf89 \/ \\"}}`,
	`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}}`,
	`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Pa"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"The user wants \"two\" cities.\n\nLet me think\u2026"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCkYIBxgCKkBR7ccBvp3sSwvNKqXbVv6nIQ9RUbKFh5P2bwyAsbIR4dPqTOaz9tRfXUfbjOEnsmKSGNPkPe1GxeoPt2zS0Q8AEgwLCfSU6dr8vM4wQd0aDP6Vt+5dhrPmhN6CCCIw5MIE7WWfz1VjQ1yCN/FyRMT0F5RlZHEWWZb0KKCNCkh07p7bmPSBzd0oyKxj5Gz9KhBrJV9YMpnDSJEdZ/Wq+WKsGAI="}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"citations_delta","citation":{"type":"char_location","cited_text":"sunny","document_index":0,"document_title":null,"start_char_index":0,"end_char_index":5}}}`,
	`{"type":"content_block_stop","index":0}`,
	`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}`,
	`{"type":"message_delta","delta":{"stop_reason":"stop_sequence","stop_sequence":"\n\nHuman:"},"usage":{"input_tokens":472,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"output_tokens":89,"output_tokens_details":{"thinking_tokens":40},"server_tool_use":{"web_search_requests":1}},"context_management":null}`,
	`{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}`,
	`{"type":"message_stop"}`,
	`{"type": "ping"}`,
	`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_01"}`,
	`{"type":"future_event","payload":{"a":[1,2,{"b":null}]}}`,
	`{
  "type" : "content_block_delta" ,
  "index" : 7 ,
  "delta" : { "type" : "text_delta" , "text" : "spaced" }
}`,
	`{"type":"content_block_delta","index":null,"delta":null,"content_block":null,"message":null,"usage":null}`,
	`{"type":"message_delta","delta":{"type":null,"text":null,"stop_reason":null,"stop_sequence":null},"usage":{"output_tokens":null}}`,
	`{}`,
	`null`,
}

// Events the fast path may leave to json.Unmarshal, kept as fuzz seeds for their shapes.
var edgeStreamEvents = []string{
	`{"Type":"message_stop"}`,
	`{"type":"content_block_delta","INDEX":0,"delta":{"type":"text_delta","Text":"x"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","ſignature":"x"}}`,
	`{"typ\u0065":"message_stop"}`,
	`{"type":"a","type":"b"}`,
	`{"type":"content_block_delta","index":0,"index":1}`,
	`{"type":"content_block_delta","index":0,"delta":{"text":"a","text":null}}`,
	`{"type":"content_block_start","index":1.0,"content_block":{"type":"text","text":""}}`,
	`{"type":"content_block_start","index":1e2}`,
	`{"type":"content_block_start","index":-1}`,
	`{"type":"content_block_start","index":-0}`,
	`{"type":"content_block_start","index":99999999999999999999}`,
	`{"type":"content_block_start","index":"1"}`,
	`{"type":"content_block_start","index":0,"content_block":"text"}`,
	`{"type":"content_block_start","index":0,"content_block":[]}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":1}}`,
	`{"type":"message_delta","delta":{"stop_reason":1}}`,
	`{"type":"message_delta","usage":{"output_tokens":"3"}}`,
	`{"type":"message_delta","usage":{"output_tokens":12.0}}`,
	`{"type":"message_start","message":{"id":"m","usage":{"input_tokens":1},"usage":{"input_tokens":2}}}`,
	`{"type":"message_start","message":"m"}`,
	"{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"bad \xff utf8\"}}",
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lone \ud800 surrogate \udc00\u0041"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"cut`,
	// Around textDelta's exact shape: an index with a leading zero, of ten digits or none;
	// something after the text, or a space; the text not a string, or not closed.
	`{"type":"content_block_delta","index":01,"delta":{"type":"text_delta","text":"x"}}`,
	`{"type":"content_block_delta","index":1234567890,"delta":{"type":"text_delta","text":"x"}}`,
	`{"type":"content_block_delta","index":123456789,"delta":{"type":"text_delta","text":"x"}}`,
	`{"type":"content_block_delta","index":,"delta":{"type":"text_delta","text":"x"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x","text":"y"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"},"index":1}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"} }`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":null}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a\q"}}`,
	"{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"tab\tinside\"}}",
	`{"type":"message_stop",}`,
	`{"type":"message_stop"} {}`,
	`data: {"type":"message_stop"}`,
	`"message_stop"`,
	`[]`,
	`7`,
	``,
}

func newStreamEvent() fastDecoder { return new(streamEvent) }

func FuzzStreamEventFastDecode(f *testing.F) {
	for _, s := range slices.Concat(fastStreamEvents, edgeStreamEvents) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkFastDecode(t, data, newStreamEvent)
		checkFastDecodeInRoom(t, data)
	})
}

// checkFastDecodeInRoom decodes data into an event whose room holds an earlier event's
// values: what comes out must be what json.Unmarshal makes of it in a zero event.
func checkFastDecodeInRoom(t *testing.T, data []byte) {
	t.Helper()
	stop, seq := "end_turn", "X"
	room := &eventRoom{index: 7, delta: streamDelta{Type: "text_delta", Text: "old", PartialJSON: "{", Thinking: "t", Signature: "s", StopReason: &stop, StopSequence: &seq}}
	fast := streamEvent{room: room}
	if !fast.fastDecode(bytes.Clone(data)) {
		return
	}
	fast.room = nil
	var want streamEvent
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("fast path took %q, which json.Unmarshal rejects: %v", data, err)
	}
	if !reflect.DeepEqual(fast, want) {
		t.Fatalf("%q, decoded in a used room:\nfast path %s\nUnmarshal %s", data, dump(fast), dump(want))
	}
	if fast.Delta != nil && fast.Delta != &room.delta || fast.Index != nil && fast.Index != &room.index {
		t.Fatalf("%q: decoded outside the room", data)
	}
}

// TestStreamEventFastDecodeTakesRealisticEvents keeps the fast path from turning into dead
// code: the events the API sends must not fall back to json.Unmarshal.
func TestStreamEventFastDecodeTakesRealisticEvents(t *testing.T) {
	for i, s := range fastStreamEvents {
		checkFastDecode(t, []byte(s), newStreamEvent)
		checkFastDecodeInRoom(t, []byte(s))
		if !new(streamEvent).fastDecode([]byte(s)) {
			t.Errorf("event %d fell back to json.Unmarshal: %s", i, s)
		}
	}
}

// TestStreamEventFastDecodeEdges runs the edge seeds through the fuzz target's check, so that
// a plain go test covers them, and checks that the shapes it must not take fall back.
func TestStreamEventFastDecodeEdges(t *testing.T) {
	for _, s := range edgeStreamEvents {
		checkFastDecode(t, []byte(s), newStreamEvent)
		checkFastDecodeInRoom(t, []byte(s))
	}
	for _, s := range []string{
		`{"Type":"message_stop"}`,
		`{"type":"a","type":"b"}`,
		`{"type":"content_block_start","index":1.0}`,
		`{"type":"content_block_start","index":"1"}`,
		`{"type":"message_stop",}`,
		`[]`,
		``,
	} {
		if new(streamEvent).fastDecode([]byte(s)) {
			t.Errorf("fast path took %q", s)
		}
	}
}

// TestStreamEventFastDecodeMutations checks the fast path against json.Unmarshal on every
// event made from a realistic one by one change (see mutations).
func TestStreamEventFastDecodeMutations(t *testing.T) {
	total, fast := 0, 0
	for _, s := range fastStreamEvents {
		for _, m := range mutations([]byte(s)) {
			checkFastDecode(t, m, newStreamEvent)
			total++
			if new(streamEvent).fastDecode(m) {
				fast++
			}
		}
	}
	t.Logf("%d of %d mutated events on the fast path", fast, total)
}

func TestDecodeUsage(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		wantErr   bool
	}{
		{name: "absent", raw: ``},
		{name: "null", raw: `null`},
		{name: "output only", raw: `{"output_tokens":15}`},
		{name: "cache counters", raw: `{"input_tokens":472,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"cache_creation":{"ephemeral_5m_input_tokens":100},"output_tokens":2,"service_tier":"standard"}`},
		{name: "null counters", raw: `{"input_tokens":5,"cache_creation_input_tokens":null,"output_tokens_details":null}`},
		{name: "thinking tokens", raw: `{"output_tokens":89,"output_tokens_details":{"thinking_tokens":40}}`},
		{name: "float counter", raw: `{"output_tokens":12.0}`},
		{name: "key in capitals", raw: `{"Output_Tokens":3}`},
		{name: "repeated key", raw: `{"output_tokens":3,"output_tokens":4}`},
		{name: "string counter", raw: `{"output_tokens":"3"}`, wantErr: true},
		{name: "not an object", raw: `[1]`, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeUsage(json.RawMessage(tc.raw))
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if isNull([]byte(tc.raw)) {
				if got != nil {
					t.Fatalf("usage %+v, want nil", got)
				}
				return
			}
			var want Usage
			if err := json.Unmarshal([]byte(tc.raw), &want); err != nil {
				t.Fatal(err)
			}
			if got == nil || !reflect.DeepEqual(*got, want) {
				t.Fatalf("usage %s, json.Unmarshal %s", dump(got), dump(want))
			}
		})
	}
}

// TestStreamDecodeFallback runs a stream whose frames the fast path refuses (their keys in
// capitals, which encoding/json matches all the same), with a malformed frame and an unknown
// event, and checks that it reads as the same stream written plainly.
func TestStreamDecodeFallback(t *testing.T) {
	extra := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"cut\n\n" +
		"event: future_event\ndata: {\"type\":\"future_event\",\"x\":[1]}\n\n"
	plain := strings.Replace(upstreamStream, "event: message_delta", extra+"event: message_delta", 1)
	shouted := strings.NewReplacer(`"type":`, `"TYPE":`, `"index":`, `"Index":`, `"delta":`, `"Delta":`,
		`"usage":`, `"Usage":`, `"text":`, `"Text":`).Replace(plain)
	if shouted == plain {
		t.Fatal("the replacer changed nothing")
	}
	run := func(body string) ([]providers.Event, int) {
		t.Helper()
		srv := sseServer(t, body)
		s, err := newTestProvider(t, srv.URL).ChatStream(context.Background(), hello)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		evs := collect(s)
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		return evs, s.(interface{ SkippedFrames() int }).SkippedFrames()
	}
	want, wantSkipped := run(plain)
	got, gotSkipped := run(shouted)
	if !reflect.DeepEqual(got, want) || gotSkipped != wantSkipped {
		t.Fatalf("events\n%+v (%d skipped)\nwant\n%+v (%d skipped)", got, gotSkipped, want, wantSkipped)
	}
	if wantSkipped != 1 || len(want) < 10 {
		t.Fatalf("%d events, %d skipped: the stream did not run as meant", len(want), wantSkipped)
	}
}

// TestTextDeltaShape keeps textDelta from turning into dead code: the text deltas the API
// sends take it, and what it does not recognise goes on to the cursor.
func TestTextDeltaShape(t *testing.T) {
	for _, s := range []string{
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`,
		`{"type":"content_block_delta","index":12,"delta":{"type":"text_delta","text":"Voilà : \"日本語\" 🎉\n\ttab \u00e9 \/ \\"}}`,
	} {
		var e streamEvent
		if !e.textDelta([]byte(s)) {
			t.Errorf("%s: not taken", s)
		}
	}
	for _, s := range []string{
		`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}`,
		`{"type":"content_block_delta", "index":0,"delta":{"type":"text_delta","text":"x"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"},"usage":null}`,
	} {
		var e streamEvent
		if e.textDelta([]byte(s)) {
			t.Errorf("%s: taken", s)
		}
	}
}
