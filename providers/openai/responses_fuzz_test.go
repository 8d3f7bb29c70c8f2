package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3/responses"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/sse"
)

// FuzzDecodeResponsesRequest checks that any body either fails to decode or decodes to a
// request that encodes for an upstream into valid JSON that decodes again, with as many
// tools and no more messages.
func FuzzDecodeResponsesRequest(f *testing.F) {
	seeds := []string{
		`{"model":"gpt-5","input":"Hello"}`,
		`{"instructions":"S","input":[{"role":"developer","content":"D"},{"role":"user","content":[{"type":"input_text","text":"Hi"},{"type":"input_image","image_url":"data:image/png;base64,aGVsbG8="}]}]}`,
		`{"input":[{"role":"user","content":"q"},{"type":"reasoning","summary":[{"type":"summary_text","text":"r"}],"encrypted_content":"e"},
			{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call","call_id":"c2","name":"g","arguments":{"a":1}},
			{"type":"function_call_output","call_id":"c1","output":"x"},{"type":"function_call_output","call_id":"c2","output":[{"type":"input_image","image_url":"https://x.test/i.png"}]}],
			"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":{"type":"function","name":"f"},
			"text":{"format":{"type":"json_schema","name":"n","schema":{}}},"reasoning":{"effort":"low"},"max_output_tokens":1}`,
		`{"input":[{"role":"assistant","content":[{"type":"output_text","text":"a"},{"type":"refusal","refusal":"b"}]}],"tool_choice":"none"}`,
		`{"input":"x","previous_response_id":"resp_1"}`,
		`{"input":[{"type":"item_reference","id":"x"}]}`,
		`{"input":[{"role":"user","content":[{"type":"input_image","image_url":{"url":"http://x"}}]}]}`,
		`{"input":[{}]}`,
		`{"input":[{"role":"assistant","Content":[]}]}`,
		`{"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,"}]}]}`,
		`{"input":null}`,
		`[]`,
		``,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeResponsesRequest(body)
		if err != nil {
			return
		}
		out, err := EncodeResponsesRequest(req)
		if err != nil {
			t.Fatalf("a decoded request does not encode: %v\n%s", err, body)
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON %s", out)
		}
		again, err := DecodeResponsesRequest(out)
		if err != nil {
			// Empty assistant turns write no item: an input made only of them has nothing
			// left to send, which is refused.
			for _, m := range req.Messages {
				if m.Role != providers.RoleAssistant || len(m.ToolCalls) > 0 || len(withoutReasoning(m.Content)) > 0 || hasSigned(m.Content) {
					t.Fatalf("the encoded request does not decode: %v\n%s\n%s", err, body, out)
				}
			}
			return
		}
		if len(again.Tools) != len(req.Tools) || len(again.Messages) > len(req.Messages) {
			t.Fatalf("round trip changed the request:\n%+v\n%+v", req, again)
		}
	})
}

// FuzzResponsesStreamDecode checks that no upstream stream makes the decoder panic, loop, emit
// out-of-order tool call indexes or several finishes, or fail with anything but an
// *UpstreamError.
func FuzzResponsesStreamDecode(f *testing.F) {
	seeds := []string{
		sseFrames(rsCreated, rsMsgAdded, rsHello, rsWorld, rsTextDone, rsCompleted),
		sseFrames(rsCreated, rsCompleted),
		sseFrames(
			`{"type":"response.output_item.added","output_index":0,"item":{"id":"fc_1","type":"function_call","call_id":"c","name":"f","arguments":""}}`,
			`{"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":0,"delta":"{"}`,
			`{"type":"response.function_call_arguments.done","item_id":"fc_1","output_index":0,"arguments":"{}"}`,
			`{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":1}}}`,
		),
		sseFrames(
			`{"type":"response.reasoning_summary_part.added","item_id":"rs","output_index":0,"summary_index":0}`,
			`{"type":"response.reasoning_summary_text.delta","item_id":"rs","output_index":0,"delta":"r"}`,
			`{"type":"response.output_item.done","output_index":0,"item":{"id":"rs","type":"reasoning","summary":[],"encrypted_content":"e"}}`,
		),
		sseFrames(`{"type":"error","code":"server_error","message":"boom"}`),
		sseFrames(`{"type":"response.failed","response":{"error":{"code":"rate_limit_exceeded","message":"x"}}}`),
		sseFrames(
			`{"type":"response.output_item.added","output_index":0,"item":{"id":"fc_0","type":"function_call"}}`,
			`{"type":"response.function_call_arguments.done","output_index":0,"arguments":"{}"}`,
		),
		"event: error\ndata: oops\n\n",
		"data: {\n\n",
		"data: [DONE]\n\n",
		": ping\n\n",
		"",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s := responsesBodyStream(string(body))
		defer s.Close()
		n, finishes, calls := 0, 0, 0
		for s.Next() {
			n++
			if n > 4*len(body)+4 {
				t.Fatalf("%d events from %d bytes", n, len(body))
			}
			ev := s.Current()
			switch ev.Type {
			case providers.EventFinish:
				finishes++
			case providers.EventToolCall:
				if ev.Index < 0 || ev.Index > calls {
					t.Fatalf("tool call index %d after %d calls", ev.Index, calls)
				}
				if ev.Index == calls {
					calls++
				}
			case providers.EventUsage:
				u := ev.Usage
				if u.Input < 0 || u.CacheRead < 0 || u.CacheWrite < 0 || u.Output < 0 || u.Reasoning < 0 {
					t.Fatalf("negative usage %+v", u)
				}
			}
		}
		if finishes > 1 {
			t.Fatalf("%d finish events", finishes)
		}
		if err := s.Err(); err != nil {
			if _, ok := providers.AsUpstreamError(err); !ok {
				t.Fatalf("err %v is not an UpstreamError", err)
			}
		}
	})
}

func hasSigned(parts []providers.Part) bool {
	for _, p := range parts {
		if p.Type == providers.PartReasoning && p.Signature != "" {
			return true
		}
	}
	return false
}

// FuzzResponsesStreamEncoder drives the encoder with arbitrary event sequences, one event
// per byte pair, and checks what the SDK needs of every stream: valid frames, sequence
// numbers 0, 1, 2..., response.created first, and a final response whose text and call
// arguments are everything that was sent.
func FuzzResponsesStreamEncoder(f *testing.F) {
	f.Add([]byte{0, 'a', 1, 'b', 2, 0, 2, 1, 3, 'c', 0, 'd', 4, 0})
	f.Add([]byte{2, 0, 2, 1, 2, 0, 2, 2, 5, 1})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		enc := NewResponsesStreamEncoder("resp_f", "m", 1)
		frames := enc.Start()
		var text strings.Builder
		args := map[int]string{}
		pieces := []string{`{"a":`, `1}`, `"x`, "\u2028", `}`, ""}
		for i := 0; i+1 < len(in); i += 2 {
			op, arg := in[i]%6, in[i+1]
			var ev providers.Event
			switch op {
			case 0, 3:
				ev = providers.Event{Type: providers.EventText, Text: string(rune(arg))}
				text.WriteString(ev.Text)
			case 1:
				ev = providers.Event{Type: providers.EventReasoning, Text: string(rune(arg))}
			case 2:
				index := int(arg % 4)
				piece := pieces[int(arg/4)%len(pieces)]
				ev = providers.Event{Type: providers.EventToolCall, Index: index, ToolCall: providers.ToolCall{Name: "f", Arguments: piece}}
				args[index] += piece
			case 4:
				ev = providers.Event{Type: providers.EventReasoning, Signature: "s"}
			case 5:
				ev = providers.Event{Type: providers.EventUsage}
			}
			frames = append(frames, enc.Encode(ev)...)
		}
		reason := providers.FinishStop
		if len(in) > 0 && in[0]%3 == 0 {
			reason = providers.FinishLength
		}
		frames = append(frames, enc.Finish(reason, providers.Usage{Input: 1})...)
		var body bytes.Buffer
		for i, fr := range frames {
			var probe struct {
				Type     string `json:"type"`
				Sequence *int64 `json:"sequence_number"`
			}
			if err := json.Unmarshal(fr.Data, &probe); err != nil || probe.Type != fr.Event || probe.Sequence == nil || *probe.Sequence != int64(i) {
				t.Fatalf("frame %d: %s %s", i, fr.Event, fr.Data)
			}
			_ = sse.WriteEvent(&body, fr.Event, fr.Data)
		}
		events := sdkEvents(t, body.Bytes())
		if len(events) != len(frames) || events[0].Type != "response.created" {
			t.Fatalf("%d SDK events for %d frames", len(events), len(frames))
		}
		final := events[len(events)-1]
		var r responses.Response
		switch final.Type {
		case "response.completed":
			r = final.AsResponseCompleted().Response
		case "response.incomplete":
			r = final.AsResponseIncomplete().Response
		default:
			t.Fatalf("last event %s", final.Type)
		}
		if r.OutputText() != strings.ToValidUTF8(text.String(), "\uFFFD") {
			t.Fatalf("final text %q, sent %q", r.OutputText(), text.String())
		}
		n := 0
		for _, item := range r.Output {
			if item.Type == "function_call" {
				n++
			}
		}
		if n != len(args) {
			t.Fatalf("%d calls in the final response, %d sent", n, len(args))
		}
		for _, item := range r.Output {
			if item.Type != "function_call" {
				continue
			}
			fc := item.AsFunctionCall()
			var index int
			if _, err := fmt.Sscanf(fc.CallID, "call_f_%d", &index); err != nil || fc.Arguments != strings.ToValidUTF8(args[index], "\uFFFD") {
				t.Fatalf("call %s arguments %q, sent %q", fc.CallID, fc.Arguments, args[index])
			}
		}
	})
}
