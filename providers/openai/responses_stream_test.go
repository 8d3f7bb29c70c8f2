package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamtest"
	"github.com/modelgateway/caddy-modelgateway/providers/sse"
)

// frameData is a frame's JSON as a map, checked to carry the frame's type.
func frameData(t *testing.T, f ResponsesFrame) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(f.Data, &m); err != nil {
		t.Fatalf("frame %s: %v\n%s", f.Event, err, f.Data)
	}
	if m["type"] != f.Event {
		t.Fatalf("frame %s has type %v", f.Event, m["type"])
	}
	return m
}

// encodeFrames runs the encoder over events and returns every frame, checking the
// sequence numbers.
func encodeFrames(t *testing.T, events []providers.Event, reason providers.FinishReason) []ResponsesFrame {
	t.Helper()
	enc := NewResponsesStreamEncoder("resp_t", "m", 1)
	frames := enc.Start()
	if enc.Start() != nil {
		t.Error("Start twice")
	}
	for _, ev := range events {
		frames = append(frames, enc.Encode(ev)...)
	}
	frames = append(frames, enc.Finish(reason, providers.Usage{Input: 1, Output: 1})...)
	if enc.Finish(reason, providers.Usage{}) != nil || enc.Encode(providers.Event{Type: providers.EventText, Text: "late"}) != nil {
		t.Error("frames after Finish")
	}
	for i, f := range frames {
		if seq := frameData(t, f)["sequence_number"]; seq != float64(i) {
			t.Fatalf("frame %d (%s) has sequence_number %v", i, f.Event, seq)
		}
	}
	return frames
}

func frameTypes(frames []ResponsesFrame) string {
	types := make([]string, len(frames))
	for i, f := range frames {
		types[i] = strings.TrimPrefix(f.Event, "response.")
	}
	return strings.Join(types, " ")
}

func finalResponse(t *testing.T, frames []ResponsesFrame) map[string]any {
	t.Helper()
	return frameData(t, frames[len(frames)-1])["response"].(map[string]any)
}

func TestResponsesStreamEncoderSequences(t *testing.T) {
	tests := []struct {
		name   string
		events []providers.Event
		reason providers.FinishReason
		want   string
	}{
		{
			name: "empty answer",
			want: "created in_progress completed",
		},
		{
			name:   "empty pieces make nothing; finish and usage events are for Finish",
			events: []providers.Event{{Type: providers.EventText}, {Type: providers.EventReasoning}, {Type: providers.EventFinish}, {Type: providers.EventUsage}},
			want:   "created in_progress completed",
		},
		{
			name:   "text",
			events: []providers.Event{{Type: providers.EventText, Text: "a"}, {Type: providers.EventText, Text: "b"}},
			want:   "created in_progress output_item.added content_part.added output_text.delta output_text.delta output_text.done content_part.done output_item.done completed",
		},
		{
			name:   "truncated text",
			events: []providers.Event{{Type: providers.EventText, Text: "a"}},
			reason: providers.FinishLength,
			want:   "created in_progress output_item.added content_part.added output_text.delta output_text.done content_part.done output_item.done incomplete",
		},
		{
			name: "signature alone, then text",
			events: []providers.Event{
				{Type: providers.EventReasoning, Signature: "s"},
				{Type: providers.EventText, Text: "a"},
			},
			want: "created in_progress output_item.added output_item.done output_item.added content_part.added output_text.delta output_text.done content_part.done output_item.done completed",
		},
		{
			name: "a signed reasoning item ends; more reasoning opens another",
			events: []providers.Event{
				{Type: providers.EventReasoning, Text: "r1"},
				{Type: providers.EventReasoning, Signature: "s1"},
				{Type: providers.EventReasoning, Text: "r2"},
			},
			want: "created in_progress output_item.added reasoning_summary_part.added reasoning_summary_text.delta " +
				"reasoning_summary_text.done reasoning_summary_part.done output_item.done " +
				"output_item.added reasoning_summary_part.added reasoning_summary_text.delta " +
				"reasoning_summary_text.done reasoning_summary_part.done output_item.done completed",
		},
		{
			name: "text, call, text: the call closes when its arguments are complete",
			events: []providers.Event{
				{Type: providers.EventText, Text: "a"},
				{Type: providers.EventToolCall, Index: 0, ToolCall: providers.ToolCall{ID: "c", Name: "f", Arguments: "{}"}},
				{Type: providers.EventText, Text: "b"},
			},
			want: "created in_progress output_item.added content_part.added output_text.delta output_text.done content_part.done output_item.done " +
				"output_item.added function_call_arguments.delta function_call_arguments.done output_item.done " +
				"output_item.added content_part.added output_text.delta output_text.done content_part.done output_item.done completed",
		},
		{
			name: "interleaved calls: the incomplete one lingers until Finish",
			events: []providers.Event{
				{Type: providers.EventToolCall, Index: 0, ToolCall: providers.ToolCall{ID: "c0", Name: "f", Arguments: `{"a":`}},
				{Type: providers.EventToolCall, Index: 1, ToolCall: providers.ToolCall{ID: "c1", Name: "g", Arguments: `{}`}},
				{Type: providers.EventToolCall, Index: 0, ToolCall: providers.ToolCall{Arguments: `1}`}},
			},
			want: "created in_progress output_item.added function_call_arguments.delta output_item.added function_call_arguments.delta " +
				"function_call_arguments.delta function_call_arguments.done output_item.done function_call_arguments.done output_item.done completed",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			frames := encodeFrames(t, tc.events, tc.reason)
			if got := frameTypes(frames); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestResponsesStreamEncoderFinalResponse(t *testing.T) {
	frames := encodeFrames(t, []providers.Event{
		{Type: providers.EventToolCall, Index: 3, ToolCall: providers.ToolCall{Name: "f", Arguments: `{"a":`}},
		{Type: providers.EventToolCall, Index: 5, ToolCall: providers.ToolCall{ID: "c5", Arguments: `{}`}},
		{Type: providers.EventToolCall, Index: 5, ToolCall: providers.ToolCall{Name: "late"}},
		{Type: providers.EventToolCall, Index: 3, ToolCall: providers.ToolCall{Arguments: `1}`}},
		{Type: providers.EventText, Text: "<b>&\n"},
	}, providers.FinishToolCalls)
	r := finalResponse(t, frames)
	if r["status"] != "completed" || r["id"] != "resp_t" || r["object"] != "response" {
		t.Fatalf("final response %v", r)
	}
	out := r["output"].([]any)
	if len(out) != 3 {
		t.Fatalf("output %v", out)
	}
	c0, c1, msg := out[0].(map[string]any), out[1].(map[string]any), out[2].(map[string]any)
	if c0["call_id"] != "call_t_3" || c0["name"] != "f" || c0["arguments"] != `{"a":1}` || c0["id"] != "fc_t_0" || c0["status"] != "completed" {
		t.Errorf("first call %v", c0)
	}
	if c1["call_id"] != "c5" || c1["name"] != "late" || c1["arguments"] != `{}` {
		t.Errorf("second call %v", c1)
	}
	content := msg["content"].([]any)[0].(map[string]any)
	if msg["id"] != "msg_t_2" || content["text"] != "<b>&\n" || content["annotations"] == nil {
		t.Errorf("message %v", msg)
	}
	// The added frames carry the item in progress, without its content.
	added := frameData(t, frames[2])
	if item := added["item"].(map[string]any); item["status"] != "in_progress" || item["arguments"] != "" || added["output_index"] != float64(0) {
		t.Errorf("output_item.added %s", frames[2].Data)
	}
}

// TestResponsesStreamEncoderDecoderRoundTrip checks that the stream decoder reads back what
// the encoder writes.
func TestResponsesStreamEncoderDecoderRoundTrip(t *testing.T) {
	body := encodeStream(t, NewResponsesStreamEncoder("resp_rt", "m", 1), answerEvents(responsesAnswer), responsesAnswer.FinishReason, responsesAnswer.Usage)
	events, err := responsesCollect(t, responsesBodyStream(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	got := responsesAccumulate(events)
	if !reflect.DeepEqual(got, responsesAnswer) {
		t.Errorf("got  %+v\nwant %+v", got, responsesAnswer)
	}
}

// responsesAccumulate rebuilds a neutral response from stream events.
func responsesAccumulate(events []providers.Event) *providers.Response {
	r := &providers.Response{Model: "gpt-5"}
	for _, ev := range events {
		switch ev.Type {
		case providers.EventText:
			r.Text += ev.Text
		case providers.EventReasoning:
			r.Reasoning += ev.Text
			r.ReasoningSignature += ev.Signature
		case providers.EventToolCall:
			for len(r.ToolCalls) <= ev.Index {
				r.ToolCalls = append(r.ToolCalls, providers.ToolCall{})
			}
			tc := &r.ToolCalls[ev.Index]
			if ev.ToolCall.ID != "" {
				tc.ID = ev.ToolCall.ID
			}
			if ev.ToolCall.Name != "" {
				tc.Name = ev.ToolCall.Name
			}
			tc.Arguments += ev.ToolCall.Arguments
		case providers.EventFinish:
			r.FinishReason = ev.FinishReason
		case providers.EventUsage:
			r.Usage = ev.Usage
		}
	}
	return r
}

func responsesCollect(t *testing.T, s providers.Stream) ([]providers.Event, error) {
	t.Helper()
	defer s.Close()
	var events []providers.Event
	for s.Next() {
		events = append(events, s.Current())
	}
	return events, s.Err()
}

// responsesBodyStream decodes a stream body held in memory.
func responsesBodyStream(body string) providers.Stream {
	return NewResponsesStreamDecoder(context.Background(), "test", io.NopCloser(strings.NewReader(body)), 0)
}

// sseFrames writes "event: <type>\ndata: <json>\n\n" for each JSON, its type read from it.
func sseFrames(frames ...string) string {
	var b strings.Builder
	for _, f := range frames {
		var compact bytes.Buffer
		if json.Compact(&compact, []byte(f)) == nil {
			f = compact.String()
		}
		var probe struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal([]byte(f), &probe)
		if probe.Type != "" {
			b.WriteString("event: " + probe.Type + "\n")
		}
		b.WriteString("data: " + f + "\n\n")
	}
	return b.String()
}

const (
	rsCreated   = `{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","output":[],"usage":null}}`
	rsMsgAdded  = `{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}}`
	rsHello     = `{"type":"response.output_text.delta","sequence_number":2,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hello","logprobs":[]}`
	rsWorld     = `{"type":"response.output_text.delta","sequence_number":3,"item_id":"msg_1","output_index":0,"content_index":0,"delta":" world","logprobs":[]}`
	rsTextDone  = `{"type":"response.output_text.done","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"text":"Hello world","logprobs":[]}`
	rsCompleted = `{"type":"response.completed","sequence_number":5,"response":{"id":"resp_1","object":"response","status":"completed","output":[{"id":"msg_1","type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Hello world","annotations":[]}]}],"usage":{"input_tokens":9,"input_tokens_details":{"cached_tokens":4},"output_tokens":2,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":11}}}`
)

var rsHelloEvents = []providers.Event{
	{Type: providers.EventText, Text: "Hello"},
	{Type: providers.EventText, Text: " world"},
	{Type: providers.EventFinish, FinishReason: providers.FinishStop},
	{Type: providers.EventUsage, Usage: providers.Usage{Input: 5, CacheRead: 4, Output: 2}},
}

func TestResponsesStreamDecoder(t *testing.T) {
	tests := []struct {
		name string
		body string
		want []providers.Event
	}{
		{
			name: "text",
			body: sseFrames(rsCreated, rsMsgAdded, rsHello, rsWorld, rsTextDone, rsCompleted),
			want: rsHelloEvents,
		},
		{
			name: "no event lines, CRLF, comments, a [DONE] after the end",
			body: strings.ReplaceAll(": keep-alive\n\n"+"data: "+rsCreated+"\n\ndata: "+rsHello+"\n\ndata: "+rsWorld+"\n\ndata: "+rsCompleted+"\n\ndata: [DONE]\n\n", "\n", "\r\n"),
			want: rsHelloEvents,
		},
		{
			name: "done events only",
			body: sseFrames(rsCreated, rsMsgAdded, rsTextDone, rsCompleted),
			want: []providers.Event{{Type: providers.EventText, Text: "Hello world"}, rsHelloEvents[2], rsHelloEvents[3]},
		},
		{
			name: "final response only",
			body: sseFrames(rsCreated, rsCompleted),
			want: []providers.Event{{Type: providers.EventText, Text: "Hello world"}, rsHelloEvents[2], rsHelloEvents[3]},
		},
		{
			name: "reasoning summaries, signature, refusal",
			body: sseFrames(
				`{"type":"response.output_item.added","output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}}`,
				`{"type":"response.reasoning_summary_part.added","item_id":"rs_1","output_index":0,"summary_index":0,"part":{"type":"summary_text","text":""}}`,
				`{"type":"response.reasoning_summary_text.delta","item_id":"rs_1","output_index":0,"summary_index":0,"delta":"One."}`,
				`{"type":"response.reasoning_summary_part.added","item_id":"rs_1","output_index":0,"summary_index":1,"part":{"type":"summary_text","text":""}}`,
				`{"type":"response.reasoning_summary_text.delta","item_id":"rs_1","output_index":0,"summary_index":1,"delta":"Two."}`,
				`{"type":"response.output_item.done","output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":"One."},{"type":"summary_text","text":"Two."}],"encrypted_content":"gAAAAenc"}}`,
				`{"type":"response.refusal.delta","item_id":"msg_2","output_index":1,"content_index":0,"delta":"No."}`,
				`{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"content_filter"},"output":null}}`,
			),
			want: []providers.Event{
				{Type: providers.EventReasoning, Text: "One."},
				{Type: providers.EventReasoning, Text: "\n\n"},
				{Type: providers.EventReasoning, Text: "Two."},
				{Type: providers.EventReasoning, Signature: providers.Tag(providers.SigOpenAI, "gAAAAenc")},
				{Type: providers.EventText, Text: "No."},
				{Type: providers.EventFinish, FinishReason: providers.FinishContentFilter},
			},
		},
		{
			name: "reasoning text content, summary only in the final response",
			body: sseFrames(
				`{"type":"response.reasoning_text.delta","item_id":"rs_1","output_index":0,"content_index":0,"delta":"think"}`,
				`{"type":"response.output_item.done","output_index":1,"item":{"id":"rs_2","type":"reasoning","summary":[{"type":"summary_text","text":"S"}]}}`,
				`{"type":"response.completed","response":{"status":"completed","output":[],"usage":null}}`,
			),
			want: []providers.Event{
				{Type: providers.EventReasoning, Text: "think"},
				{Type: providers.EventReasoning, Text: "S"},
				{Type: providers.EventFinish, FinishReason: providers.FinishStop},
			},
		},
		{
			name: "parallel calls, arguments reconciled from done events",
			body: sseFrames(
				`{"type":"response.output_item.added","output_index":0,"item":{"id":"fc_1","type":"function_call","status":"in_progress","call_id":"call_1","name":"weather","arguments":""}}`,
				`{"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":0,"delta":"{\"city\":"}`,
				`{"type":"response.output_item.added","output_index":1,"item":{"id":"fc_2","type":"function_call","status":"in_progress","call_id":"call_2","name":"time","arguments":""}}`,
				`{"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":0,"delta":"\"Paris\"}"}`,
				`{"type":"response.function_call_arguments.done","item_id":"fc_1","output_index":0,"arguments":"{\"city\":\"Paris\"}"}`,
				`{"type":"response.function_call_arguments.done","item_id":"fc_2","output_index":1,"arguments":"{}"}`,
				`{"type":"response.output_item.done","output_index":1,"item":{"id":"fc_2","type":"function_call","status":"completed","call_id":"call_2","name":"time","arguments":"{}"}}`,
				`{"type":"response.completed","response":{"status":"completed","output":[
					{"id":"fc_1","type":"function_call","call_id":"call_1","name":"weather","arguments":"{\"city\":\"Paris\"}"},
					{"id":"fc_2","type":"function_call","call_id":"call_2","name":"time","arguments":"{}"},
					{"id":"fc_3","type":"function_call","call_id":"call_3","name":"late","arguments":"{\"x\":1}"}],
					"usage":{"input_tokens":3,"output_tokens":4}}}`,
			),
			want: []providers.Event{
				{Type: providers.EventToolCall, Index: 0, ToolCall: providers.ToolCall{ID: "call_1", Name: "weather"}},
				{Type: providers.EventToolCall, Index: 0, ToolCall: providers.ToolCall{Arguments: `{"city":`}},
				{Type: providers.EventToolCall, Index: 1, ToolCall: providers.ToolCall{ID: "call_2", Name: "time"}},
				{Type: providers.EventToolCall, Index: 0, ToolCall: providers.ToolCall{Arguments: `"Paris"}`}},
				{Type: providers.EventToolCall, Index: 1, ToolCall: providers.ToolCall{Arguments: `{}`}},
				{Type: providers.EventToolCall, Index: 2, ToolCall: providers.ToolCall{ID: "call_3", Name: "late", Arguments: `{"x":1}`}},
				{Type: providers.EventFinish, FinishReason: providers.FinishToolCalls},
				{Type: providers.EventUsage, Usage: providers.Usage{Input: 3, Output: 4}},
			},
		},
		{
			name: "unknown and hosted-tool events are skipped",
			body: sseFrames(
				`{"type":"response.queued","response":{}}`,
				`{"type":"response.web_search_call.searching","item_id":"ws_1","output_index":0}`,
				`{"type":"response.output_item.done","output_index":0,"item":{"id":"ws_1","type":"web_search_call","status":"completed"}}`,
				`{"type":"response.audio.delta","delta":{"odd":"shape"}}`,
				`{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"}}}`,
			),
			want: []providers.Event{{Type: providers.EventFinish, FinishReason: providers.FinishLength}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			events, err := responsesCollect(t, responsesBodyStream(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(events, tc.want) {
				t.Errorf("got  %+v\nwant %+v", events, tc.want)
			}
		})
	}
}

func TestResponsesStreamDecoderErrors(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		events    int
		cause     error
		category  providers.Category
		retryable bool
		code      string
		message   string
	}{
		{
			name:   "end of body before the terminal event",
			body:   sseFrames(rsCreated, rsMsgAdded, rsHello),
			events: 1, cause: ErrStreamTruncated, category: providers.CategoryServerError, retryable: true,
			message: "stream ended before it was complete",
		},
		{
			name:   "[DONE] before the terminal event",
			body:   sseFrames(rsCreated, rsHello) + "data: [DONE]\n\n",
			events: 1, cause: ErrStreamTruncated, category: providers.CategoryServerError, retryable: true,
		},
		{
			name:   "error event",
			body:   sseFrames(rsCreated, rsHello, `{"type":"error","sequence_number":2,"code":"rate_limit_exceeded","message":"Slow down","param":null}`),
			events: 1, cause: ErrStreamError, category: providers.CategoryRateLimited, retryable: true, code: "rate_limit_exceeded", message: "Slow down",
		},
		{
			name:  "error event with a nested error object",
			body:  "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"code\":\"context_length_exceeded\",\"message\":\"Too long\"}}\n\n",
			cause: ErrStreamError, category: providers.CategoryInvalidRequest, code: "context_length_exceeded", message: "Too long",
		},
		{
			name:  "error event that is not JSON",
			body:  "event: error\ndata: upstream exploded\n\n",
			cause: ErrStreamError, category: providers.CategoryServerError, retryable: true, message: "upstream exploded",
		},
		{
			name:  "response.failed",
			body:  sseFrames(rsCreated, `{"type":"response.failed","sequence_number":1,"response":{"id":"resp_1","status":"failed","error":{"code":"server_error","message":"The model failed"},"output":[]}}`),
			cause: ErrStreamError, category: providers.CategoryServerError, retryable: true, code: "server_error", message: "The model failed",
		},
		{
			name:  "response.failed without error details",
			body:  sseFrames(`{"type":"response.failed","response":{"status":"failed","error":null}}`),
			cause: ErrStreamError, category: providers.CategoryServerError, retryable: true, message: "response failed",
		},
		{
			name:  "top-level error key",
			body:  "data: {\"error\":{\"message\":\"Invalid key\",\"code\":\"invalid_api_key\"}}\n\n",
			cause: ErrStreamError, category: providers.CategoryCredentialsInvalid, code: "invalid_api_key", message: "Invalid key",
		},
		{
			name:   "malformed frames are skipped, but the terminal event is still required",
			body:   sseFrames(rsCreated, rsHello) + "data: {\"type\":\n\n" + sseFrames(`{"type":"response.completed","response":{"output":"x"}}`),
			events: 1, cause: ErrStreamTruncated, category: providers.CategoryServerError, retryable: true,
		},
		{
			name:  "event larger than the reader's limit",
			body:  "data: {\"type\":\"response.output_text.delta\",\"delta\":\"" + strings.Repeat("x", sse.DefaultMaxEventBytes) + "\"}\n\n",
			cause: ErrMalformedFrame, category: providers.CategoryServerError, retryable: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			events, err := responsesCollect(t, responsesBodyStream(tc.body))
			if len(events) != tc.events {
				t.Errorf("%d events before the error: %+v", len(events), events)
			}
			ue, ok := providers.AsUpstreamError(err)
			if !ok {
				t.Fatalf("error %v is not an UpstreamError", err)
			}
			if !errors.Is(err, tc.cause) || ue.Category != tc.category || ue.Retryable != tc.retryable || ue.Provider != "test" {
				t.Errorf("error %+v", ue)
			}
			if tc.code != "" && ue.Code != tc.code {
				t.Errorf("code %q, want %q", ue.Code, tc.code)
			}
			if tc.message != "" && ue.Message != tc.message {
				t.Errorf("message %q, want %q", ue.Message, tc.message)
			}
			if ue.Type == "error" {
				t.Error("the event type was taken for an error type")
			}
		})
	}
}

func TestResponsesStreamSkipsMalformedFrames(t *testing.T) {
	body := sseFrames(rsCreated, rsMsgAdded, rsHello) +
		"data: {not json\n\n" +
		sseFrames(
			`{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"delta":5}`,
			`{"type":"response.output_text.delta","output_index":-1,"delta":"lost"}`,
			`{"type":"response.output_item.done","output_index":0,"item":{"id":"msg_1","type":"message","content":7}}`,
			`{"type":"response.output_item.added","output_index":1,"item":{"id":"fc_1","type":"function_call","call_id":"c","name":"f","arguments":""}}`,
			`{"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":1,"delta":["x"]}`,
			`{"type":"response.completed","response":{"status":"completed","output":[{"type":"message","content":{}}]}}`,
			rsWorld, rsTextDone,
			`{"type":"response.completed","response":{"status":"completed","output":[
				{"id":"msg_1","type":"message","content":[{"type":"output_text","text":"Hello world"}]},
				{"id":"fc_1","type":"function_call","call_id":"c","name":"f","arguments":"{}"}],"usage":null}}`,
		)
	s := responsesBodyStream(body)
	events, err := responsesCollect(t, s)
	if err != nil {
		t.Fatal(err)
	}
	want := []providers.Event{
		{Type: providers.EventText, Text: "Hello"},
		{Type: providers.EventToolCall, Index: 0, ToolCall: providers.ToolCall{ID: "c", Name: "f"}},
		{Type: providers.EventText, Text: " world"},
		{Type: providers.EventToolCall, Index: 0, ToolCall: providers.ToolCall{Arguments: "{}"}},
		{Type: providers.EventFinish, FinishReason: providers.FinishToolCalls},
	}
	if !reflect.DeepEqual(events, want) {
		t.Errorf("got  %+v\nwant %+v", events, want)
	}
	sk, ok := s.(interface{ SkippedFrames() int })
	if !ok {
		t.Fatalf("%T has no SkippedFrames", s)
	}
	if n := sk.SkippedFrames(); n != 6 {
		t.Errorf("%d frames skipped, want 6", n)
	}
}

// responsesUpstream is a fake OpenAI server with a Responses endpoint; every request's path
// and body go to the returned channel.
type responsesRecorded struct {
	path string
	body []byte
}

func responsesUpstream(t *testing.T, h http.HandlerFunc, mod func(*Config)) (*Provider, <-chan responsesRecorded) {
	t.Helper()
	requests := make(chan responsesRecorded, 8)
	srv, transport := upstreamtest.NewServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		requests <- responsesRecorded{path: r.URL.Path, body: body}
		h(w, r)
	})
	cfg := Config{Name: "test", BaseURL: srv.URL + "/v1", APIKey: "sk-test-secret", Transport: transport, API: "responses"}
	return upstreamtest.NewProvider(t, New, cfg, mod), requests
}

func writeSSE(w http.ResponseWriter, frames ...string) {
	for _, f := range frames {
		_, _ = io.WriteString(w, sseFrames(f))
		w.(http.Flusher).Flush()
	}
}

func responsesUserRequest(text string) *providers.Request {
	return &providers.Request{Model: "gpt-5", Messages: []providers.Message{{Role: providers.RoleUser, Content: []providers.Part{textPart(text)}}}}
}

func TestResponsesProviderChatStream(t *testing.T) {
	p, requests := responsesUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeSSE(w, rsCreated, rsMsgAdded, rsHello, rsWorld, rsTextDone, rsCompleted)
	}, nil)
	s, err := p.ChatStream(context.Background(), responsesUserRequest("Hi"))
	if err != nil {
		t.Fatal(err)
	}
	events, err := responsesCollect(t, s)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(events, rsHelloEvents) {
		t.Errorf("events %+v", events)
	}
	rec := <-requests
	body := responsesBody(t, rec.body)
	if rec.path != "/v1/responses" || body["stream"] != true || body["store"] != false || body["model"] != "gpt-5" {
		t.Errorf("request %s %s", rec.path, rec.body)
	}
}

func TestResponsesProviderChat(t *testing.T) {
	p, requests := responsesUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, openAIResponse)
	}, nil)
	resp, err := p.Chat(context.Background(), responsesUserRequest("Hi"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "Let me look." || len(resp.ToolCalls) != 2 || resp.FinishReason != providers.FinishToolCalls || resp.Usage.CacheRead != 60 {
		t.Errorf("response %+v", resp)
	}
	rec := <-requests
	if body := responsesBody(t, rec.body); rec.path != "/v1/responses" || body["stream"] != nil || body["store"] != false {
		t.Errorf("request %s %s", rec.path, rec.body)
	}
}

func TestResponsesProviderFailures(t *testing.T) {
	tests := []struct {
		name     string
		stream   bool
		handler  http.HandlerFunc
		category providers.Category
		cause    error
	}{
		{
			name: "failed response",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"id":"resp_1","object":"response","status":"failed","error":{"code":"rate_limit_exceeded","message":"Slow down"},"output":[]}`)
			},
			category: providers.CategoryRateLimited, cause: ErrStreamError,
		},
		{
			name: "garbage",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"choices":[]}`)
			},
			category: providers.CategoryServerError, cause: ErrMalformedResponse,
		},
		{
			name: "no responses endpoint",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusNotFound)
				_, _ = io.WriteString(w, `{"detail":"Not Found"}`)
			},
			category: providers.CategoryModelUnavailable,
		},
		{
			name:   "stream: mid-stream drop",
			stream: true,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				writeSSE(w, rsCreated, rsMsgAdded, rsHello)
				// Returning ends the body cleanly without a terminal event.
			},
			category: providers.CategoryServerError, cause: ErrStreamTruncated,
		},
		{
			name:   "stream: connection cut",
			stream: true,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				writeSSE(w, rsCreated, rsHello)
				conn, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					_ = conn.Close()
				}
			},
			category: providers.CategoryServerError,
		},
		{
			name:   "stream: error event",
			stream: true,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				writeSSE(w, rsCreated, rsHello, `{"type":"error","code":"insufficient_quota","message":"Quota","param":null,"sequence_number":2}`)
			},
			category: providers.CategoryAccessMissing, cause: ErrStreamError,
		},
		{
			name:   "stream: JSON answer instead",
			stream: true,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"object":"response","status":"failed","error":{"code":"server_error","message":"x"}}`)
			},
			category: providers.CategoryServerError, cause: ErrStreamError,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := responsesUpstream(t, tc.handler, nil)
			var err error
			if tc.stream {
				var s providers.Stream
				if s, err = p.ChatStream(context.Background(), responsesUserRequest("Hi")); err == nil {
					_, err = responsesCollect(t, s)
				}
			} else {
				_, err = p.Chat(context.Background(), responsesUserRequest("Hi"))
			}
			ue, ok := providers.AsUpstreamError(err)
			if !ok {
				t.Fatalf("error %v is not an UpstreamError", err)
			}
			if ue.Category != tc.category || (tc.cause != nil && !errors.Is(err, tc.cause)) {
				t.Errorf("error %+v (%v)", ue, err)
			}
		})
	}
}

func TestResponsesProviderStreamJSONFallback(t *testing.T) {
	p, _ := responsesUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, openAIResponse)
	}, nil)
	s, err := p.ChatStream(context.Background(), responsesUserRequest("Hi"))
	if err != nil {
		t.Fatal(err)
	}
	events, err := responsesCollect(t, s)
	if err != nil {
		t.Fatal(err)
	}
	got := responsesAccumulate(events)
	if got.Text != "Let me look." || got.ReasoningSignature != providers.Tag(providers.SigOpenAI, "gAAAAAB") || len(got.ToolCalls) != 2 || got.FinishReason != providers.FinishToolCalls {
		t.Errorf("replayed %+v", got)
	}
}

func TestResponsesStreamIdleTimeout(t *testing.T) {
	release := make(chan struct{})
	p, _ := responsesUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeSSE(w, rsCreated, rsHello)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}, func(c *Config) { c.StreamIdleTimeout = 100 * time.Millisecond })
	defer close(release)
	s, err := p.ChatStream(context.Background(), responsesUserRequest("Hi"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	events, err := responsesCollect(t, s)
	ue, ok := providers.AsUpstreamError(err)
	if !ok || !ue.Timeout || !errors.Is(err, ErrIdleTimeout) || len(events) != 1 {
		t.Fatalf("events %+v, error %v", events, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the idle timeout took %v", d)
	}
}

func TestResponsesStreamCancel(t *testing.T) {
	release := make(chan struct{})
	p, _ := responsesUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeSSE(w, rsCreated, rsHello)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}, nil)
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := p.ChatStream(ctx, responsesUserRequest("Hi"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Next() || s.Current().Text != "Hello" {
		t.Fatal("no first event")
	}
	cancel()
	for s.Next() {
	}
	if _, ok := providers.AsUpstreamError(s.Err()); ok || !errors.Is(s.Err(), context.Canceled) {
		t.Errorf("a cancelled stream fails with %v", s.Err())
	}
}

func TestResponsesForward(t *testing.T) {
	p, requests := responsesUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeSSE(w, rsCreated, rsCompleted)
	}, func(c *Config) { c.API = "responses" })
	// An upstream speaks the one text API it is configured with; the gateway translates the
	// rest. The media endpoints are forwarded either way.
	other := []providers.WireFormat{providers.FormatOpenAIEmbeddings, providers.FormatOpenAIModerations, providers.FormatOpenAISpeech,
		providers.FormatOpenAITranscriptions, providers.FormatOpenAITranslations, providers.FormatOpenAIImages, providers.FormatOpenAIImageEdits}
	if got := p.Formats(); !reflect.DeepEqual(got, append([]providers.WireFormat{providers.FormatOpenAIResponses}, other...)) {
		t.Errorf("formats %v", got)
	}
	if chat, _ := New(Config{BaseURL: "http://127.0.0.1:1/v1"}); !reflect.DeepEqual(chat.Formats(), append([]providers.WireFormat{providers.FormatOpenAIChat}, other...)) {
		t.Errorf("chat formats %v", chat.Formats())
	}
	in := []byte(`{"model":"gpt-5","input":"Hi","stream":true,"store":true}`)
	resp, err := p.Forward(context.Background(), &providers.RawRequest{Format: providers.FormatOpenAIResponses, Body: in, Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || string(out) != sseFrames(rsCreated, rsCompleted) {
		t.Errorf("forwarded body %q, %v", out, err)
	}
	rec := <-requests
	if rec.path != "/v1/responses" || string(rec.body) != string(in) {
		t.Errorf("forwarded request %s %s", rec.path, rec.body)
	}
	if _, err := p.Forward(context.Background(), &providers.RawRequest{Format: providers.FormatAnthropic, Body: in}); err == nil {
		t.Error("an Anthropic body was forwarded")
	}
}

func TestResponsesConfigAPI(t *testing.T) {
	for _, api := range []string{"", "chat", "responses"} {
		p, err := New(Config{API: api})
		if err != nil || p.responses != (api == "responses") || p.responsesURL != "https://api.openai.com/v1/responses" {
			t.Errorf("API %q: %+v, %v", api, p, err)
		}
	}
	if _, err := New(Config{API: "completions"}); err == nil || !strings.Contains(err.Error(), "api must be chat or responses") {
		t.Errorf("bad API: %v", err)
	}
}

// TestResponsesFramesWrite checks that frames written with sse.WriteEvent come back whole
// through the gateway's own SSE reader.
func TestResponsesFramesWrite(t *testing.T) {
	frames := encodeFrames(t, answerEvents(responsesAnswer), providers.FinishStop)
	var b strings.Builder
	for _, f := range frames {
		if err := sse.WriteEvent(&b, f.Event, f.Data); err != nil {
			t.Fatal(err)
		}
	}
	rd := sse.NewReader(strings.NewReader(b.String()), 0)
	n := 0
	for rd.Next() {
		ev := rd.Event()
		if ev.Name != frames[n].Event || string(ev.Data) != string(frames[n].Data) {
			t.Fatalf("frame %d: %s %s", n, ev.Name, ev.Data)
		}
		n++
	}
	if n != len(frames) || rd.Err() != nil {
		t.Errorf("%d of %d frames, %v", n, len(frames), rd.Err())
	}
}
