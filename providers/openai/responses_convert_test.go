package openai

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

func textPart(s string) providers.Part { return providers.Part{Type: providers.PartText, Text: s} }

func TestDecodeResponsesRequest(t *testing.T) {
	yes, no := true, false
	n := int64(300)
	temp := 0.5
	tests := []struct {
		name string
		body string
		want providers.Request
	}{
		{
			name: "string input",
			body: `{"model":"gpt-5","input":"Hello","stream":true,"max_output_tokens":300,"temperature":0.5,"user":"u1"}`,
			want: providers.Request{Model: "gpt-5", Stream: true, MaxTokens: &n, Temperature: &temp, User: "u1",
				Messages: []providers.Message{{Role: providers.RoleUser, Content: []providers.Part{textPart("Hello")}}}},
		},
		{
			name: "instructions, system and developer messages hoisted in order",
			body: `{"instructions":"Be brief.","input":[
				{"role":"system","content":"Answer in French."},
				{"type":"message","role":"user","content":[{"type":"input_text","text":"Hi"}]},
				{"role":"developer","content":[{"type":"input_text","text":"No emoji."}]}],
				"safety_identifier":"s1","store":false}`,
			want: providers.Request{System: "Be brief.\n\nAnswer in French.\n\nNo emoji.", User: "s1",
				Messages: []providers.Message{{Role: providers.RoleUser, Content: []providers.Part{textPart("Hi")}}}},
		},
		{
			name: "tool loop: text, several calls in one turn, outputs, next turn",
			body: `{"input":[
				{"role":"user","content":"Weather in Paris and Rome?"},
				{"type":"message","role":"assistant","id":"msg_1","status":"completed","content":[{"type":"output_text","text":"Checking.","annotations":[]}]},
				{"type":"function_call","id":"fc_1","call_id":"call_1","name":"weather","arguments":"{\"city\":\"Paris\"}","status":"completed"},
				{"type":"function_call","call_id":"call_2","name":"weather","arguments":{"city":"Rome"}},
				{"type":"function_call_output","call_id":"call_1","output":"18C"},
				{"type":"function_call_output","call_id":"call_2","output":[{"type":"input_text","text":"21C"}]},
				{"role":"assistant","content":"Paris 18C, Rome 21C."},
				{"role":"user","content":"Thanks"},
				{"type":"function_call","call_id":"call_3","name":"log","arguments":""}]}`,
			want: providers.Request{Messages: []providers.Message{
				{Role: providers.RoleUser, Content: []providers.Part{textPart("Weather in Paris and Rome?")}},
				{Role: providers.RoleAssistant, Content: []providers.Part{textPart("Checking.")}, ToolCalls: []providers.ToolCall{
					{ID: "call_1", Name: "weather", Arguments: `{"city":"Paris"}`},
					{ID: "call_2", Name: "weather", Arguments: `{"city":"Rome"}`},
				}},
				{Role: providers.RoleTool, ToolCallID: "call_1", Content: []providers.Part{textPart("18C")}},
				{Role: providers.RoleTool, ToolCallID: "call_2", Content: []providers.Part{textPart("21C")}},
				{Role: providers.RoleAssistant, Content: []providers.Part{textPart("Paris 18C, Rome 21C.")}},
				{Role: providers.RoleUser, Content: []providers.Part{textPart("Thanks")}},
				{Role: providers.RoleAssistant, ToolCalls: []providers.ToolCall{{ID: "call_3", Name: "log"}}},
			}},
		},
		{
			name: "reasoning items join the assistant turn; one without content is dropped",
			body: `{"input":[
				{"role":"user","content":"Hi"},
				{"type":"reasoning","id":"rs_0","summary":[]},
				{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"First."},{"type":"summary_text","text":"Second."}],"encrypted_content":"gAAAA1"},
				{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
				{"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"raw thoughts"}]},
				{"role":"assistant","content":[{"type":"refusal","refusal":"No."}]}]}`,
			want: providers.Request{Messages: []providers.Message{
				{Role: providers.RoleUser, Content: []providers.Part{textPart("Hi")}},
				{Role: providers.RoleAssistant, Content: []providers.Part{
					{Type: providers.PartReasoning, Text: "First.\n\nSecond.", Signature: "gAAAA1"},
					{Type: providers.PartReasoning, Text: "raw thoughts"},
					textPart("No."),
				}, ToolCalls: []providers.ToolCall{{ID: "c1", Name: "f", Arguments: "{}"}}},
			}},
		},
		{
			name: "images: URL, data URL, chat-style object, in a tool output",
			body: `{"input":[
				{"role":"user","content":[{"type":"input_text","text":""},{"type":"input_image","image_url":"https://x.test/a.png","detail":"auto"},
					{"type":"input_image","image_url":"data:image/PNG;base64,aGVsbG8="},{"type":"input_image","image_url":{"url":"http://x.test/b.jpg"}}]},
				{"type":"function_call","call_id":"c1","name":"shot","arguments":"{}"},
				{"type":"function_call_output","call_id":"c1","output":[{"type":"input_image","image_url":"https://x.test/c.png"}]}]}`,
			want: providers.Request{Messages: []providers.Message{
				{Role: providers.RoleUser, Content: []providers.Part{
					{Type: providers.PartImage, ImageURL: "https://x.test/a.png"},
					{Type: providers.PartImage, MediaType: "image/png", Data: []byte("hello")},
					{Type: providers.PartImage, ImageURL: "http://x.test/b.jpg"},
				}},
				{Role: providers.RoleAssistant, ToolCalls: []providers.ToolCall{{ID: "c1", Name: "shot", Arguments: "{}"}}},
				{Role: providers.RoleTool, ToolCallID: "c1", Content: []providers.Part{{Type: providers.PartImage, ImageURL: "https://x.test/c.png"}}},
			}},
		},
		{
			name: "tools, tool choice, parallel calls, JSON schema, reasoning effort",
			body: `{"input":"x","tools":[{"type":"function","name":"f","description":"d","parameters":{"type":"object"},"strict":true},{"type":"function","name":"g","parameters":null}],
				"tool_choice":{"type":"function","name":"f"},"parallel_tool_calls":false,
				"text":{"format":{"type":"json_schema","name":"out","schema":{"type":"object"},"strict":true},"verbosity":"low"},
				"reasoning":{"effort":"high","summary":"auto"},"include":["reasoning.encrypted_content"],"metadata":{"a":"b"}}`,
			want: providers.Request{
				Messages:          []providers.Message{{Role: providers.RoleUser, Content: []providers.Part{textPart("x")}}},
				Tools:             []providers.Tool{{Name: "f", Description: "d", Parameters: json.RawMessage(`{"type":"object"}`)}, {Name: "g"}},
				ToolChoice:        "f",
				ParallelToolCalls: &no,
				ResponseFormat:    "json_schema",
				JSONSchema:        json.RawMessage(`{"type":"object"}`),
				ReasoningEffort:   "high",
			},
		},
		{
			name: "tool choice modes and JSON object",
			body: `{"input":"x","tool_choice":"required","parallel_tool_calls":true,"text":{"format":{"type":"json_object"}}}`,
			want: providers.Request{
				Messages:          []providers.Message{{Role: providers.RoleUser, Content: []providers.Part{textPart("x")}}},
				ToolChoice:        "required",
				ParallelToolCalls: &yes,
				ResponseFormat:    "json_object",
			},
		},
		{
			name: "chat-style tool choice object",
			body: `{"input":"x","tool_choice":{"type":"function","function":{"name":"f"}},"text":{"format":{"type":"text"}}}`,
			want: providers.Request{
				Messages:   []providers.Message{{Role: providers.RoleUser, Content: []providers.Part{textPart("x")}}},
				ToolChoice: "f",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeResponsesRequest([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", *got, tc.want)
			}
		})
	}
}

func TestDecodeResponsesRequestErrors(t *testing.T) {
	tests := []struct{ name, body, want string }{
		{"previous_response_id", `{"input":"x","previous_response_id":"resp_1"}`, "previous_response_id is not supported by this gateway; send the full input"},
		{"conversation", `{"input":"x","conversation":"conv_1"}`, "conversation is not supported"},
		{"store", `{"input":"x","store":true}`, "store is not supported"},
		{"background", `{"input":"x","background":true}`, "background is not supported"},
		{"prompt", `{"prompt":{"id":"pmpt_1"}}`, "prompt is not supported"},
		{"item reference", `{"input":[{"type":"item_reference","id":"msg_1"}]}`, "input[0]: item_reference is not supported"},
		{"not JSON", `{"input":`, "decoding responses request"},
		{"input missing", `{"model":"m"}`, "input: required"},
		{"input empty string", `{"input":""}`, "input: must not be empty"},
		{"input empty array", `{"input":[]}`, "input: at least one item is required"},
		{"input number", `{"input":1}`, "input: must be a string or an array of items"},
		{"item not object", `{"input":["x"]}`, "input: json"},
		{"item without type", `{"input":[{"content":"x"}]}`, "input[0].type: required"},
		{"unknown item", `{"input":[{"type":"web_search_call","id":"ws_1"}]}`, `input[0].type: item type "web_search_call" is not supported`},
		{"message without role", `{"input":[{"type":"message","content":"x"}]}`, "input[0].role: required"},
		{"unknown role", `{"input":[{"role":"tool","content":"x"}]}`, `input[0].role: unknown role "tool"`},
		{"content missing", `{"input":[{"role":"user"}]}`, "input[0].content: required"},
		{"content number", `{"input":[{"role":"user","content":3}]}`, "input[0].content: must be a string or an array"},
		{"text part without text", `{"input":[{"role":"user","content":[{"type":"input_text"}]}]}`, "input[0].content[0].text: required"},
		{"part without type", `{"input":[{"role":"user","content":[{"text":"x"}]}]}`, "input[0].content[0].type: required"},
		{"image file id", `{"input":[{"role":"user","content":[{"type":"input_image","file_id":"file_1"}]}]}`, "input[0].content[0].file_id: file inputs are not supported"},
		{"input file", `{"input":[{"role":"user","content":[{"type":"input_file","file_data":"x"}]}]}`, "input[0].content[0]: file inputs are not supported"},
		{"image without URL", `{"input":[{"role":"user","content":[{"type":"input_image"}]}]}`, "input[0].content[0].image_url: required"},
		{"bad image URL", `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"ftp://x"}]}]}`, "input[0].content[0].image_url: must be an http(s) URL or a data URL"},
		{"empty data URL", `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,"}]}]}`, "input[0].content[0].image_url: data URL has no data"},
		{"bad data URL", `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/png,abc"}]}]}`, "data URL must be"},
		{"image in assistant", `{"input":[{"role":"assistant","content":[{"type":"input_image","image_url":"https://x"}]}]}`, `input[0].content[0].type: part type "input_image" is not supported in assistant messages`},
		{"output text in user", `{"input":[{"role":"user","content":[{"type":"output_text","text":"x"}]}]}`, `part type "output_text" is not supported in user messages`},
		{"call without call_id", `{"input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, "input[0].call_id: required"},
		{"call without name", `{"input":[{"type":"function_call","call_id":"c","arguments":"{}"}]}`, "input[0].name: required"},
		{"call with numeric arguments", `{"input":[{"type":"function_call","call_id":"c","name":"f","arguments":1}]}`, "arguments must be a JSON string"},
		{"output without call_id", `{"input":[{"type":"function_call_output","output":"x"}]}`, "input[0].call_id: required"},
		{"output missing", `{"input":[{"type":"function_call_output","call_id":"c"}]}`, "input[0].output: required"},
		{"output file", `{"input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_file","file_id":"f"}]}]}`, "input[0].output[0]: file inputs are not supported"},
		{"reasoning summary type", `{"input":[{"type":"reasoning","summary":[{"type":"other","text":"x"}]}]}`, `input[0].summary[0].type: unsupported type "other"`},
		{"instructions not a string", `{"instructions":["x"],"input":"x"}`, "instructions: must be a string"},
		{"hosted tool", `{"input":"x","tools":[{"type":"web_search"}]}`, `tools[0].type: tool type "web_search" is not supported by this gateway; only function tools are`},
		{"tool without type", `{"input":"x","tools":[{"name":"f"}]}`, "tools[0].type: required"},
		{"tool without name", `{"input":"x","tools":[{"type":"function"}]}`, "tools[0].name: required"},
		{"tool choice value", `{"input":"x","tool_choice":"any"}`, `tool_choice: unknown value "any"`},
		{"tool choice allowed tools", `{"input":"x","tool_choice":{"type":"allowed_tools","mode":"auto","tools":[]}}`, `tool_choice.type: unsupported type "allowed_tools"`},
		{"tool choice without name", `{"input":"x","tool_choice":{"type":"function"}}`, "tool_choice.name: required"},
		{"text format", `{"input":"x","text":{"format":{"type":"grammar"}}}`, `text.format.type: unsupported type "grammar"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeResponsesRequest([]byte(tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
	_, err := DecodeResponsesRequest([]byte(`{"input":`))
	var syntax *json.SyntaxError
	if !errors.As(err, &syntax) && !strings.Contains(err.Error(), "unexpected end of JSON input") {
		t.Errorf("a body that is not JSON: %v", err)
	}
}

// responsesBody decodes an encoded request into a generic map for assertions.
func responsesBody(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	return m
}

func TestEncodeResponsesRequest(t *testing.T) {
	max8 := int64(8)
	no := false
	req := &providers.Request{
		Model:             "gpt-5",
		System:            "Be brief.",
		MaxTokens:         &max8,
		ParallelToolCalls: &no,
		Stop:              []string{"END"},
		TopK:              &max8,
		ThinkingBudget:    4096,
		ToolChoice:        "weather",
		ResponseFormat:    "json_object",
		User:              "u1",
		Tools:             []providers.Tool{{Name: "weather", Parameters: json.RawMessage(`{"type":"object"}`)}},
		Messages: []providers.Message{
			{Role: providers.RoleUser, Content: []providers.Part{textPart("Look"), {Type: providers.PartImage, MediaType: "image/png", Data: []byte("hello")}}},
			{Role: providers.RoleAssistant, Content: []providers.Part{
				{Type: providers.PartReasoning, Text: "unsigned, from elsewhere"},
				{Type: providers.PartReasoning, Text: "Think.", Signature: "gAAAAsig"},
				textPart("A"), textPart("B"),
			}, ToolCalls: []providers.ToolCall{{ID: "call_1", Name: "weather"}}},
			{Role: providers.RoleTool, ToolCallID: "call_1", Content: []providers.Part{textPart("18C"), {Type: providers.PartImage, ImageURL: "https://x.test/a.png"}}},
			{Role: providers.RoleAssistant, Content: []providers.Part{textPart("Done.")}},
		},
	}
	b, err := EncodeResponsesRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	got := responsesBody(t, b)
	want := responsesBody(t, []byte(`{
		"model":"gpt-5","instructions":"Be brief.","store":false,"max_output_tokens":16,"parallel_tool_calls":false,
		"reasoning":{"effort":"medium"},"include":["reasoning.encrypted_content"],"user":"u1",
		"tool_choice":{"type":"function","name":"weather"},
		"text":{"format":{"type":"json_object"}},
		"tools":[{"type":"function","name":"weather","parameters":{"type":"object"},"strict":false}],
		"input":[
			{"type":"message","role":"user","content":[{"type":"input_text","text":"Look"},{"type":"input_image","image_url":"data:image/png;base64,aGVsbG8=","detail":"auto"}]},
			{"type":"reasoning","summary":[{"type":"summary_text","text":"Think."}],"encrypted_content":"gAAAAsig"},
			{"type":"message","role":"assistant","content":[{"type":"output_text","text":"A","annotations":[]},{"type":"output_text","text":"B","annotations":[]}]},
			{"type":"function_call","call_id":"call_1","name":"weather","arguments":"{}"},
			{"type":"function_call_output","call_id":"call_1","output":[{"type":"input_text","text":"18C"},{"type":"input_image","image_url":"https://x.test/a.png","detail":"auto"}]},
			{"type":"message","role":"assistant","content":"Done."}
		]}`))
	if !reflect.DeepEqual(got, want) {
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(want)
		t.Errorf("got  %s\nwant %s", gb, wb)
	}
}

func TestEncodeResponsesRequestMinimal(t *testing.T) {
	b, err := EncodeResponsesRequest(&providers.Request{Model: "m", Stream: true, ToolChoice: "auto", ResponseFormat: "json_schema", JSONSchema: json.RawMessage(`{"type":"object"}`),
		Tools:    []providers.Tool{{Name: "f"}},
		Messages: []providers.Message{{Role: providers.RoleUser, Content: []providers.Part{textPart("Hi")}}}})
	if err != nil {
		t.Fatal(err)
	}
	got := responsesBody(t, b)
	want := responsesBody(t, []byte(`{"model":"m","stream":true,"store":false,"tool_choice":"auto",
		"tools":[{"type":"function","name":"f","parameters":null,"strict":false}],
		"text":{"format":{"type":"json_schema","name":"response","schema":{"type":"object"}}},
		"input":[{"type":"message","role":"user","content":"Hi"}]}`))
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %s", b)
	}
	for _, bad := range []*providers.Request{
		{Messages: []providers.Message{{Role: "system"}}},
		{Messages: []providers.Message{{Role: providers.RoleAssistant, Content: []providers.Part{textPart("a"), {Type: providers.PartImage, ImageURL: "https://x"}}}}},
		{Messages: []providers.Message{{Role: providers.RoleUser, Content: []providers.Part{textPart("a"), {Type: providers.PartImage}}}}},
		{ResponseFormat: "yaml"},
	} {
		if _, err := EncodeResponsesRequest(bad); err == nil {
			t.Errorf("no error for %+v", bad)
		}
	}
}

// TestResponsesRequestRoundTrip checks that the neutral request survives encoding for an
// upstream and decoding back, for everything the format carries.
func TestResponsesRequestRoundTrip(t *testing.T) {
	n := int64(100)
	temp, topP := 0.3, 0.9
	yes := true
	req := &providers.Request{
		Model: "gpt-5", System: "S", MaxTokens: &n, Temperature: &temp, TopP: &topP, ParallelToolCalls: &yes,
		Stream: true, ToolChoice: "none", ResponseFormat: "json_schema", JSONSchema: json.RawMessage(`{"type":"object"}`),
		ReasoningEffort: "low", User: "u",
		Tools: []providers.Tool{{Name: "a", Description: "A", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)}, {Name: "b"}},
		Messages: []providers.Message{
			{Role: providers.RoleUser, Content: []providers.Part{textPart("q"), {Type: providers.PartImage, ImageURL: "https://x.test/i.png"}, {Type: providers.PartImage, MediaType: "image/jpeg", Data: []byte{1, 2, 3}}}},
			{Role: providers.RoleAssistant, Content: []providers.Part{{Type: providers.PartReasoning, Text: "r", Signature: "sig"}, textPart("t")},
				ToolCalls: []providers.ToolCall{{ID: "c1", Name: "a", Arguments: `{"x":1}`}, {ID: "c2", Name: "b", Arguments: `{}`}}},
			{Role: providers.RoleTool, ToolCallID: "c1", Content: []providers.Part{textPart("one")}},
			{Role: providers.RoleTool, ToolCallID: "c2", Content: []providers.Part{textPart("two"), {Type: providers.PartImage, ImageURL: "https://x.test/j.png"}}},
			{Role: providers.RoleAssistant, Content: []providers.Part{{Type: providers.PartReasoning, Signature: "sig2"}, textPart("u"), textPart("v")}},
			{Role: providers.RoleUser, Content: []providers.Part{textPart("w")}},
		},
	}
	b, err := EncodeResponsesRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeResponsesRequest(b)
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if !reflect.DeepEqual(got, req) {
		t.Errorf("got  %+v\nwant %+v\n%s", got, req, b)
	}
}

const openAIResponse = `{
  "id": "resp_123", "object": "response", "created_at": 1741476542, "status": "completed",
  "error": null, "incomplete_details": null, "model": "gpt-5-2025-08-07",
  "output": [
    {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "**Plan**"}, {"type": "summary_text", "text": "Call the tool."}], "encrypted_content": "gAAAAAB"},
    {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
     "content": [{"type": "output_text", "text": "Let me ", "annotations": [], "logprobs": []}, {"type": "output_text", "text": "look.", "annotations": []}]},
    {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "call_a", "name": "weather", "arguments": "{\"city\":\"Paris\"}"},
    {"id": "ws_1", "type": "web_search_call", "status": "completed"},
    {"id": "fc_2", "type": "function_call", "status": "completed", "call_id": "call_b", "name": "time", "arguments": "{}"}
  ],
  "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 60, "cache_write_tokens": 10},
            "output_tokens": 50, "output_tokens_details": {"reasoning_tokens": 30}, "total_tokens": 150}
}`

func TestDecodeResponsesResponse(t *testing.T) {
	got, err := DecodeResponsesResponse([]byte(openAIResponse))
	if err != nil {
		t.Fatal(err)
	}
	want := &providers.Response{
		ID: "resp_123", Model: "gpt-5-2025-08-07",
		Reasoning: "**Plan**\n\nCall the tool.", ReasoningSignature: providers.Tag(providers.SigOpenAI, "gAAAAAB"),
		Text: "Let me look.",
		ToolCalls: []providers.ToolCall{
			{ID: "call_a", Name: "weather", Arguments: `{"city":"Paris"}`},
			{ID: "call_b", Name: "time", Arguments: `{}`},
		},
		FinishReason: providers.FinishToolCalls,
		Usage:        providers.Usage{Input: 30, CacheRead: 60, CacheWrite: 10, Output: 20, Reasoning: 30},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestDecodeResponsesResponseStatus(t *testing.T) {
	tests := []struct {
		name, body string
		want       providers.FinishReason
		text       string
		err        string
	}{
		{"stop", `{"object":"response","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"hi"}]}]}`, providers.FinishStop, "hi", ""},
		{"no status", `{"output":[{"type":"message","content":"plain"}]}`, providers.FinishStop, "plain", ""},
		{"refusal", `{"object":"response","status":"completed","output":[{"type":"message","content":[{"type":"refusal","refusal":"No."}]}]}`, providers.FinishStop, "No.", ""},
		{"max tokens", `{"object":"response","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[]}`, providers.FinishLength, "", ""},
		{"content filter", `{"object":"response","status":"incomplete","incomplete_details":{"reason":"content_filter"},"output":[]}`, providers.FinishContentFilter, "", ""},
		{"failed", `{"object":"response","status":"failed","error":{"code":"server_error","message":"boom"},"output":[]}`, "", "", "upstream response failed: server_error: boom"},
		{"queued", `{"object":"response","status":"queued","output":[]}`, "", "", `response status "queued" is not final`},
		{"not a response", `{"object":"chat.completion","choices":[]}`, "", "", "not a response object"},
		{"bad content", `{"object":"response","output":[{"type":"message","content":5}]}`, "", "", "output[0].content"},
		{"bad usage", `{"object":"response","output":[],"usage":{"input_tokens":"x"}}`, "", "", "usage"},
		{"not JSON", `<html>`, "", "", "decoding responses response"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeResponsesResponse([]byte(tc.body))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.FinishReason != tc.want || got.Text != tc.text {
				t.Errorf("got %+v", got)
			}
		})
	}
	_, err := DecodeResponsesResponse([]byte(`{"object":"response","status":"failed","error":{"code":"x","message":"y"}}`))
	if !errors.Is(err, ErrResponseFailed) {
		t.Errorf("failed response error %v does not match ErrResponseFailed", err)
	}
}

func TestEncodeResponsesResponse(t *testing.T) {
	b, err := EncodeResponsesResponse(responsesAnswer, "resp_x1", 1700000000, "")
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if obj["id"] != "resp_x1" || obj["object"] != "response" || obj["status"] != "completed" || obj["model"] != "gpt-5" ||
		obj["incomplete_details"] != nil || obj["error"] != nil || obj["store"] != false {
		t.Errorf("response %s", b)
	}
	output := obj["output"].([]any)
	ids := map[string]bool{}
	for _, it := range output {
		ids[it.(map[string]any)["id"].(string)] = true
	}
	if len(output) != 4 || !ids["rs_x1_0"] || !ids["msg_x1_1"] || !ids["fc_x1_2"] || !ids["fc_x1_3"] {
		t.Errorf("output %s", b)
	}
	got, err := DecodeResponsesResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	want := *responsesAnswer
	want.ID = "resp_x1"
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("round trip\n got %+v\nwant %+v", *got, want)
	}
}

func TestEncodeResponsesResponseIncomplete(t *testing.T) {
	for _, tc := range []struct {
		resp   providers.Response
		status string
		reason any
	}{
		{providers.Response{Text: "cut", FinishReason: providers.FinishLength}, "incomplete", "max_output_tokens"},
		{providers.Response{FinishReason: providers.FinishContentFilter}, "incomplete", "content_filter"},
		{providers.Response{Text: "ok", FinishReason: providers.FinishStop}, "completed", nil},
		{providers.Response{ToolCalls: []providers.ToolCall{{Name: "f"}}}, "completed", nil},
	} {
		b, err := EncodeResponsesResponse(&tc.resp, "resp_1", 1, "m")
		if err != nil {
			t.Fatal(err)
		}
		obj := responsesBody(t, b)
		var reason any
		if d, ok := obj["incomplete_details"].(map[string]any); ok {
			reason = d["reason"]
		}
		if obj["status"] != tc.status || reason != tc.reason {
			t.Errorf("%+v: %s", tc.resp, b)
		}
		output := obj["output"].([]any)
		if tc.resp.Text == "" && len(tc.resp.ToolCalls) == 0 && len(output) != 0 {
			t.Errorf("empty answer has output %s", b)
		}
		if len(output) > 0 {
			last := output[len(output)-1].(map[string]any)
			if (tc.status == "incomplete") != (last["status"] == "incomplete") {
				t.Errorf("last item status %v in a %s response", last["status"], tc.status)
			}
			if last["type"] == "function_call" && (last["call_id"] != "call_1_0" || last["arguments"] != "") {
				t.Errorf("a call without id or arguments: %s", b)
			}
		}
	}
}

func TestResponsesUsage(t *testing.T) {
	tests := []struct {
		raw  string
		want providers.Usage
	}{
		{`{"input_tokens":100,"input_tokens_details":{"cached_tokens":60,"cache_write_tokens":10},"output_tokens":50,"output_tokens_details":{"reasoning_tokens":30},"total_tokens":150}`,
			providers.Usage{Input: 30, CacheRead: 60, CacheWrite: 10, Output: 20, Reasoning: 30}},
		{`{"input_tokens":5,"output_tokens":2}`, providers.Usage{Input: 5, Output: 2}},
		{`{"input_tokens":5,"input_tokens_details":null,"output_tokens":2.0,"output_tokens_details":{"reasoning_tokens":null}}`, providers.Usage{Input: 5, Output: 2}},
		{`{"input_tokens":-5,"input_tokens_details":{"cached_tokens":9},"output_tokens":1,"output_tokens_details":{"reasoning_tokens":4}}`, providers.Usage{CacheRead: 9, Reasoning: 4}},
		{`null`, providers.Usage{}},
		{``, providers.Usage{}},
	}
	for _, tc := range tests {
		got, err := ParseResponsesUsage([]byte(tc.raw))
		if err != nil || got != tc.want {
			t.Errorf("ParseResponsesUsage(%s) = %+v, %v; want %+v", tc.raw, got, err, tc.want)
		}
	}
	if _, err := ParseResponsesUsage([]byte(`[1]`)); err == nil {
		t.Error("no error for an array")
	}
	u := providers.Usage{Input: 1, CacheRead: 2, CacheWrite: 3, Output: 4, Reasoning: 5}
	b := AppendResponsesUsage([]byte("x"), u)
	if string(b) != `x{"input_tokens":6,"input_tokens_details":{"cached_tokens":2,"cache_write_tokens":3},"output_tokens":9,"output_tokens_details":{"reasoning_tokens":5},"total_tokens":15}` {
		t.Errorf("AppendResponsesUsage: %s", b)
	}
	back, err := ParseResponsesUsage(b[1:])
	if err != nil || back != u {
		t.Errorf("round trip %+v, %v", back, err)
	}
}
