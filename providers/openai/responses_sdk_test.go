package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/respjson"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/sse"
)

// The official Go SDK judges what the responses surface writes: the stream encoder's output
// is decoded with its SSE decoder and event union, fed to its accumulator, and a minimal
// surface built from this package's converters is called with its client.

var responsesAnswer = &providers.Response{
	Model:              "gpt-5",
	Reasoning:          "The user wants the weather.",
	ReasoningSignature: providers.Tag(providers.SigOpenAI, "gAAAAABsig=="), // as an OpenAI upstream decodes it
	Text:               "Let me check.",
	ToolCalls: []providers.ToolCall{
		{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`},
		{ID: "call_2", Name: "get_time", Arguments: `{"tz":"CET"}`},
	},
	FinishReason: providers.FinishToolCalls,
	Usage:        providers.Usage{Input: 10, CacheRead: 5, CacheWrite: 2, Output: 7, Reasoning: 3},
}

// answerEvents is responsesAnswer as a stream: reasoning and text in pieces, each call's
// arguments in two pieces with the id and name in the first.
func answerEvents(r *providers.Response) []providers.Event {
	var events []providers.Event
	for _, word := range strings.SplitAfter(r.Reasoning, " ") {
		events = append(events, providers.Event{Type: providers.EventReasoning, Text: word})
	}
	if r.ReasoningSignature != "" {
		events = append(events, providers.Event{Type: providers.EventReasoning, Signature: r.ReasoningSignature})
	}
	for _, word := range strings.SplitAfter(r.Text, " ") {
		events = append(events, providers.Event{Type: providers.EventText, Text: word})
	}
	for i, tc := range r.ToolCalls {
		half := len(tc.Arguments) / 2
		events = append(events,
			providers.Event{Type: providers.EventToolCall, Index: i, ToolCall: providers.ToolCall{ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments[:half]}},
			providers.Event{Type: providers.EventToolCall, Index: i, ToolCall: providers.ToolCall{Arguments: tc.Arguments[half:]}})
	}
	return events
}

// encodeStream runs the encoder over events and returns the SSE body.
func encodeStream(t *testing.T, enc *ResponsesStreamEncoder, events []providers.Event, reason providers.FinishReason, u providers.Usage) []byte {
	t.Helper()
	var buf bytes.Buffer
	write := func(frames []ResponsesFrame) {
		for _, f := range frames {
			if err := sse.WriteEvent(&buf, f.Event, f.Data); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(enc.Start())
	for _, ev := range events {
		write(enc.Encode(ev))
	}
	write(enc.Finish(reason, u))
	return buf.Bytes()
}

// sdkEvents decodes an SSE body with the SDK's decoder and event union.
func sdkEvents(t *testing.T, body []byte) []responses.ResponseStreamEventUnion {
	t.Helper()
	res := &http.Response{
		StatusCode: http.StatusOK,
		Header:     http.Header{"Content-Type": []string{"text/event-stream"}},
		Body:       io.NopCloser(bytes.NewReader(body)),
	}
	stream := ssestream.NewStream[responses.ResponseStreamEventUnion](ssestream.NewDecoder(res), nil)
	defer stream.Close()
	var events []responses.ResponseStreamEventUnion
	for stream.Next() {
		events = append(events, stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("SDK stream error: %v\n%s", err, body)
	}
	return events
}

func TestResponsesStreamSDK(t *testing.T) {
	enc := NewResponsesStreamEncoder("resp_abc123", "gpt-5", 1700000000)
	body := encodeStream(t, enc, answerEvents(responsesAnswer), responsesAnswer.FinishReason, responsesAnswer.Usage)
	events := sdkEvents(t, body)
	if len(events) == 0 || events[0].Type != "response.created" || events[1].Type != "response.in_progress" {
		t.Fatalf("stream does not start with response.created, response.in_progress: %+v", events)
	}
	var text, args, summary strings.Builder
	var types []string
	for i, ev := range events {
		if ev.SequenceNumber != int64(i) {
			t.Fatalf("event %d (%s) has sequence_number %d", i, ev.Type, ev.SequenceNumber)
		}
		types = append(types, ev.Type)
		// Every variant must decode through its own accessor, with the fields it requires.
		switch v := ev.AsAny().(type) {
		case responses.ResponseCreatedEvent:
			if v.Response.Status != "in_progress" || v.Response.ID != "resp_abc123" || len(v.Response.Output) != 0 {
				t.Errorf("created: %+v", v.Response)
			}
		case responses.ResponseInProgressEvent:
			if v.Response.Status != "in_progress" {
				t.Errorf("in_progress: %+v", v.Response)
			}
		case responses.ResponseOutputItemAddedEvent:
			if !v.JSON.Item.Valid() || v.Item.ID == "" {
				t.Errorf("output_item.added without item: %s", ev.RawJSON())
			}
		case responses.ResponseContentPartAddedEvent:
			if v.Part.Type != "output_text" || !v.Part.JSON.Annotations.Valid() {
				t.Errorf("content_part.added: %s", ev.RawJSON())
			}
		case responses.ResponseTextDeltaEvent:
			if !v.JSON.Logprobs.Valid() || v.ItemID == "" {
				t.Errorf("output_text.delta: %s", ev.RawJSON())
			}
			text.WriteString(v.Delta)
		case responses.ResponseTextDoneEvent:
			if v.Text != responsesAnswer.Text {
				t.Errorf("output_text.done text %q", v.Text)
			}
		case responses.ResponseReasoningSummaryTextDeltaEvent:
			summary.WriteString(v.Delta)
		case responses.ResponseReasoningSummaryTextDoneEvent:
			if v.Text != responsesAnswer.Reasoning {
				t.Errorf("reasoning_summary_text.done text %q", v.Text)
			}
		case responses.ResponseFunctionCallArgumentsDeltaEvent:
			args.WriteString(v.Delta)
		case responses.ResponseOutputItemDoneEvent:
			if v.Item.Type == "reasoning" && v.Item.EncryptedContent != providers.NativeSignature(providers.SigOpenAI, responsesAnswer.ReasoningSignature) {
				t.Errorf("reasoning item done without its encrypted_content: %s", ev.RawJSON())
			}
		}
	}
	if text.String() != responsesAnswer.Text || summary.String() != responsesAnswer.Reasoning ||
		args.String() != responsesAnswer.ToolCalls[0].Arguments+responsesAnswer.ToolCalls[1].Arguments {
		t.Errorf("deltas: text %q, summary %q, args %q", &text, &summary, &args)
	}
	want := []string{
		"response.created", "response.in_progress",
		"response.output_item.added", "response.reasoning_summary_part.added",
		"response.reasoning_summary_text.delta", "response.reasoning_summary_text.delta", "response.reasoning_summary_text.delta",
		"response.reasoning_summary_text.delta", "response.reasoning_summary_text.delta",
		"response.reasoning_summary_text.done", "response.reasoning_summary_part.done", "response.output_item.done",
		"response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
		"response.function_call_arguments.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
		"response.function_call_arguments.done", "response.output_item.done",
		"response.completed",
	}
	if strings.Join(types, " ") != strings.Join(want, " ") {
		t.Errorf("event sequence\n got %v\nwant %v", types, want)
	}
	last := events[len(events)-1].AsResponseCompleted().Response
	checkSDKResponse(t, last, responsesAnswer)
}

// checkSDKResponse checks a final response as the SDK decoded it against the neutral answer.
func checkSDKResponse(t *testing.T, r responses.Response, want *providers.Response) {
	t.Helper()
	if r.Status != "completed" || r.Object != "response" || r.OutputText() != want.Text {
		t.Errorf("final response: status %q, object %q, text %q", r.Status, r.Object, r.OutputText())
	}
	var calls []providers.ToolCall
	var reasoning, signature string
	for _, item := range r.Output {
		switch item.Type {
		case "function_call":
			fc := item.AsFunctionCall()
			if !strings.HasPrefix(fc.ID, "fc_") || fc.Status != "completed" {
				t.Errorf("function call item %+v", fc)
			}
			calls = append(calls, providers.ToolCall{ID: fc.CallID, Name: fc.Name, Arguments: fc.Arguments})
		case "reasoning":
			rs := item.AsReasoning()
			for _, s := range rs.Summary {
				reasoning += s.Text
			}
			signature = rs.EncryptedContent
		case "message":
			msg := item.AsMessage()
			if msg.Status != "completed" || msg.Role != "assistant" || len(msg.Content) != 1 || !msg.Content[0].JSON.Annotations.Valid() {
				t.Errorf("message item %s", item.RawJSON())
			}
		default:
			t.Errorf("unexpected item %s", item.RawJSON())
		}
	}
	if len(calls) != len(want.ToolCalls) {
		t.Fatalf("calls %+v, want %+v", calls, want.ToolCalls)
	}
	for i := range calls {
		if calls[i] != want.ToolCalls[i] {
			t.Errorf("call %d: %+v, want %+v", i, calls[i], want.ToolCalls[i])
		}
	}
	// The surface shows an OpenAI signature to its client raw, any other token as is.
	if reasoning != want.Reasoning || signature != providers.NativeSignature(providers.SigOpenAI, want.ReasoningSignature) {
		t.Errorf("reasoning %q signature %q", reasoning, signature)
	}
	u := r.Usage
	if u.InputTokens != want.Usage.PromptTokens() || u.InputTokensDetails.CachedTokens != want.Usage.CacheRead ||
		u.InputTokensDetails.CacheWriteTokens != want.Usage.CacheWrite || u.OutputTokens != want.Usage.CompletionTokens() ||
		u.OutputTokensDetails.ReasoningTokens != want.Usage.Reasoning || u.TotalTokens != want.Usage.Total() {
		t.Errorf("usage %+v, want %+v", u, want.Usage)
	}
}

// TestResponsesStreamSDKAccumulator feeds the stream to the SDK's ResponseAccumulator, which
// validates the fields it consumes and rebuilds the response from output_item.done records.
func TestResponsesStreamSDKAccumulator(t *testing.T) {
	enc := NewResponsesStreamEncoder("resp_acc", "gpt-5", 1700000000)
	body := encodeStream(t, enc, answerEvents(responsesAnswer), responsesAnswer.FinishReason, responsesAnswer.Usage)
	var acc responses.ResponseAccumulator
	events := sdkEvents(t, body)
	for i, ev := range events {
		var wsEvent responses.ResponsesServerEventUnion
		if err := json.Unmarshal([]byte(ev.RawJSON()), &wsEvent); err != nil {
			t.Fatal(err)
		}
		if i == len(events)-1 {
			// Before the terminal response replaces it, the projection is built from the
			// item and delta events alone.
			snap := acc.Snapshot()
			if snap.TerminalEvent != "" || snap.OutputText() != responsesAnswer.Text || len(snap.Output) != 4 ||
				snap.Output[2].Arguments != responsesAnswer.ToolCalls[0].Arguments || snap.Output[2].CallID != "call_1" ||
				snap.Output[3].Arguments != responsesAnswer.ToolCalls[1].Arguments || snap.Output[3].Name != "get_time" {
				t.Errorf("snapshot before the terminal event %+v", snap)
			}
		}
		if err := acc.AddEvent(wsEvent); err != nil {
			t.Fatalf("accumulator rejected %s: %v", ev.RawJSON(), err)
		}
	}
	snap := acc.Snapshot()
	if snap.TerminalEvent != "response.completed" || snap.ResponseID != "resp_acc" || snap.OutputText() != responsesAnswer.Text {
		t.Errorf("snapshot %+v", snap)
	}
	r, err := acc.ReconstructedResponse()
	if err != nil {
		t.Fatal(err)
	}
	checkSDKResponse(t, *r, responsesAnswer)
}

func TestResponsesStreamSDKIncomplete(t *testing.T) {
	for _, tc := range []struct {
		reason providers.FinishReason
		want   string
	}{
		{providers.FinishLength, "max_output_tokens"},
		{providers.FinishContentFilter, "content_filter"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			enc := NewResponsesStreamEncoder("resp_1", "gpt-5", 1)
			events := sdkEvents(t, encodeStream(t, enc, []providers.Event{{Type: providers.EventText, Text: "Once upon"}}, tc.reason, providers.Usage{Input: 3, Output: 16}))
			last := events[len(events)-1]
			if last.Type != "response.incomplete" {
				t.Fatalf("last event %s", last.Type)
			}
			r := last.AsResponseIncomplete().Response
			if r.Status != "incomplete" || r.IncompleteDetails.Reason != tc.want || r.OutputText() != "Once upon" ||
				r.Output[0].Status != "incomplete" || r.Usage.OutputTokens != 16 {
				t.Errorf("incomplete response %s", r.RawJSON())
			}
		})
	}
}

func TestResponsesStreamSDKErrorFrame(t *testing.T) {
	enc := NewResponsesStreamEncoder("resp_1", "gpt-5", 1)
	var buf bytes.Buffer
	for _, f := range enc.Start() {
		_ = sse.WriteEvent(&buf, f.Event, f.Data)
	}
	for _, f := range enc.Encode(providers.Event{Type: providers.EventText, Text: "Hi"}) {
		_ = sse.WriteEvent(&buf, f.Event, f.Data)
	}
	f := enc.ErrorFrame("server_error", "upstream failed")
	_ = sse.WriteEvent(&buf, f.Event, f.Data)
	if enc.Finish(providers.FinishStop, providers.Usage{}) != nil || enc.Encode(providers.Event{Type: providers.EventText, Text: "x"}) != nil {
		t.Error("frames after the error frame")
	}
	events := sdkEvents(t, buf.Bytes())
	last := events[len(events)-1]
	e := last.AsError()
	if last.Type != "error" || e.Code != "server_error" || e.Message != "upstream failed" || e.JSON.Param.Raw() != respjson.Null ||
		e.SequenceNumber != int64(len(events)-1) {
		t.Errorf("error event %s", last.RawJSON())
	}
}

// responsesSurface decodes the request with DecodeResponsesRequest, hands it to got, and
// answers with answer, as one response object or as a stream.
func responsesSurface(t *testing.T, got chan<- *providers.Request, answer *providers.Response) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, err := DecodeResponsesRequest(body)
		if err != nil {
			t.Errorf("decoding the SDK's request: %v\n%s", err, body)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		got <- req
		if !req.Stream {
			b, err := EncodeResponsesResponse(answer, "resp_sdk", 1700000000, "")
			if err != nil {
				t.Error(err)
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(b)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(encodeStream(t, NewResponsesStreamEncoder("resp_sdk", answer.Model, 1700000000), answerEvents(answer), answer.FinishReason, answer.Usage))
	}
}

// sdkResponsesParams is a second turn of a tool loop as the SDK writes it: instructions, a
// user message with an image, the model's reasoning (with encrypted content), text and two
// calls, and both outputs.
func sdkResponsesParams() responses.ResponseNewParams {
	return responses.ResponseNewParams{
		Model:        "gpt-5",
		Instructions: openai.String("Be brief."),
		Store:        openai.Bool(false),
		Include:      []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent},
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage(responses.ResponseInputMessageContentListParam{
				responses.ResponseInputContentParamOfInputText("Weather and time in Paris?"),
				{OfInputImage: &responses.ResponseInputImageParam{Detail: responses.ResponseInputImageDetailAuto, ImageURL: openai.String("data:image/png;base64,aGVsbG8=")}},
			}, responses.EasyInputMessageRoleUser),
			{OfReasoning: &responses.ResponseReasoningItemParam{
				ID:               "rs_1",
				Summary:          []responses.ResponseReasoningItemSummaryParam{{Text: "Need two tools."}},
				EncryptedContent: openai.String("gAAAAAenc"),
			}},
			responses.ResponseInputItemParamOfMessage("Checking.", responses.EasyInputMessageRoleAssistant),
			responses.ResponseInputItemParamOfFunctionCall(`{"city":"Paris"}`, "call_1", "get_weather"),
			responses.ResponseInputItemParamOfFunctionCall(`{"tz":"CET"}`, "call_2", "get_time"),
			callOutputParam("call_1", "18C"),
			callOutputParam("call_2", "12:00"),
		}},
		Tools: []responses.ToolUnionParam{
			responses.ToolParamOfFunction("get_weather", map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}, false),
		},
		ToolChoice:      responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsRequired)},
		MaxOutputTokens: openai.Int(500),
		Temperature:     openai.Float(0.2),
		Reasoning:       shared.ReasoningParam{Effort: shared.ReasoningEffortLow},
		Text: responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigUnionParam{
			OfJSONSchema: &responses.ResponseFormatTextJSONSchemaConfigParam{Name: "answer", Schema: map[string]any{"type": "object"}},
		}},
	}
}

func callOutputParam(callID, output string) responses.ResponseInputItemUnionParam {
	it := responses.ResponseInputItemParamOfFunctionCallOutput(output)
	it.OfFunctionCallOutput.CallID = openai.String(callID)
	return it
}

func checkSDKResponsesRequest(t *testing.T, req *providers.Request, stream bool) {
	t.Helper()
	if req.Model != "gpt-5" || req.System != "Be brief." || req.Stream != stream || *req.MaxTokens != 500 ||
		*req.Temperature != 0.2 || req.ReasoningEffort != "low" || req.ToolChoice != "required" ||
		req.ResponseFormat != "json_schema" || string(req.JSONSchema) != `{"type":"object"}` ||
		len(req.Tools) != 1 || req.Tools[0].Name != "get_weather" {
		t.Errorf("decoded request %+v", req)
	}
	if len(req.Messages) != 4 {
		t.Fatalf("messages %+v", req.Messages)
	}
	user, asst := req.Messages[0], req.Messages[1]
	if user.Role != providers.RoleUser || len(user.Content) != 2 || string(user.Content[1].Data) != "hello" || user.Content[1].MediaType != "image/png" {
		t.Errorf("user message %+v", user)
	}
	if asst.Role != providers.RoleAssistant || len(asst.Content) != 2 || len(asst.ToolCalls) != 2 ||
		!reflect.DeepEqual(asst.Content[0], providers.Part{Type: providers.PartReasoning, Text: "Need two tools.", Signature: "gAAAAAenc"}) ||
		asst.Content[1].Text != "Checking." || asst.ToolCalls[1] != (providers.ToolCall{ID: "call_2", Name: "get_time", Arguments: `{"tz":"CET"}`}) {
		t.Errorf("assistant turn %+v", asst)
	}
	for i, m := range req.Messages[2:] {
		if m.Role != providers.RoleTool || m.ToolCallID != req.Messages[1].ToolCalls[i].ID || len(m.Content) != 1 {
			t.Errorf("tool message %d %+v", i, m)
		}
	}
}

func sdkResponsesClient(t *testing.T, h http.Handler) openai.Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("gateway-key"), option.WithMaxRetries(0))
}

func TestResponsesSDKNew(t *testing.T) {
	got := make(chan *providers.Request, 1)
	client := sdkResponsesClient(t, responsesSurface(t, got, responsesAnswer))
	r, err := client.Responses.New(context.Background(), sdkResponsesParams())
	if err != nil {
		t.Fatal(err)
	}
	checkSDKResponsesRequest(t, <-got, false)
	checkSDKResponse(t, *r, responsesAnswer)
	if r.ID != "resp_sdk" || r.Model != "gpt-5" || r.CreatedAt != 1700000000 {
		t.Errorf("response %s", r.RawJSON())
	}
}

func TestResponsesSDKNewStreaming(t *testing.T) {
	got := make(chan *providers.Request, 1)
	client := sdkResponsesClient(t, responsesSurface(t, got, responsesAnswer))
	stream := client.Responses.NewStreaming(context.Background(), sdkResponsesParams())
	defer stream.Close()
	var final *responses.Response
	n := 0
	for stream.Next() {
		ev := stream.Current()
		if ev.SequenceNumber != int64(n) {
			t.Errorf("event %d has sequence_number %d", n, ev.SequenceNumber)
		}
		n++
		if ev.Type == "response.completed" {
			r := ev.AsResponseCompleted().Response
			final = &r
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	checkSDKResponsesRequest(t, <-got, true)
	if final == nil {
		t.Fatal("no response.completed")
	}
	checkSDKResponse(t, *final, responsesAnswer)
}

// TestResponsesSDKRoundTrip runs the SDK's request through DecodeResponsesRequest and
// EncodeResponsesRequest: what reaches the upstream must decode to the same conversation.
func TestResponsesSDKRoundTrip(t *testing.T) {
	got := make(chan *providers.Request, 1)
	client := sdkResponsesClient(t, responsesSurface(t, got, responsesAnswer))
	if _, err := client.Responses.New(context.Background(), sdkResponsesParams()); err != nil {
		t.Fatal(err)
	}
	req := <-got
	body, err := EncodeResponsesRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := DecodeResponsesRequest(body)
	if err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	checkSDKResponsesRequest(t, again, false)
}
