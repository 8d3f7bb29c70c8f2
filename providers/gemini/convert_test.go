package gemini

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

func ptr[T any](v T) *T { return &v }

func text(s string) providers.Part { return providers.Part{Type: providers.PartText, Text: s} }

func user(s string) providers.Message {
	return providers.Message{Role: providers.RoleUser, Content: []providers.Part{text(s)}}
}

func toolResult(id, output string) providers.Message {
	return providers.Message{Role: providers.RoleTool, ToolCallID: id, Content: []providers.Part{text(output)}}
}

// jsonEqual compares two JSON documents by value.
func jsonEqual(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("got invalid JSON %s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want is invalid JSON %s: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("body mismatch\n got: %s\nwant: %s", got, compact(want))
	}
}

func compact(s string) string {
	var v any
	if json.Unmarshal([]byte(s), &v) != nil {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func TestEncodeRequest(t *testing.T) {
	weatherSchema := json.RawMessage(`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object",
		"properties":{"city":{"type":"string","description":"City name"},"unit":{"type":["string","null"],"enum":["c","f"]}},
		"required":["city","nope"],"additionalProperties":false}`)
	cases := []struct {
		name string
		req  providers.Request
		want string
	}{
		{
			name: "system and one user turn",
			req: providers.Request{
				Model: "gemini-2.5-flash", System: "Be brief.",
				Messages: []providers.Message{user("Hi")},
			},
			want: `{"systemInstruction":{"parts":[{"text":"Be brief."}]},
				"contents":[{"role":"user","parts":[{"text":"Hi"}]}]}`,
		},
		{
			name: "multi-turn with same-role runs merged and empty parts dropped",
			req: providers.Request{Messages: []providers.Message{
				user("one"), user("two"),
				{Role: providers.RoleAssistant, Content: []providers.Part{text(""), text("answer")}},
				{Role: providers.RoleAssistant, Content: []providers.Part{text("   ")}},
				{Role: providers.RoleUser, Content: []providers.Part{text("three")}},
			}},
			want: `{"contents":[
				{"role":"user","parts":[{"text":"one"},{"text":"two"}]},
				{"role":"model","parts":[{"text":"answer"}]},
				{"role":"user","parts":[{"text":"three"}]}]}`,
		},
		{
			name: "images inline, by https URL, data URL in ImageURL",
			req: providers.Request{Messages: []providers.Message{{Role: providers.RoleUser, Content: []providers.Part{
				text("what is this"),
				{Type: providers.PartImage, MediaType: "image/png", Data: []byte("png-bytes")},
				{Type: providers.PartImage, ImageURL: "https://example.com/cat.JPG?x=1"},
				{Type: providers.PartImage, ImageURL: "https://example.com/blob", MediaType: "image/webp"},
				{Type: providers.PartImage, ImageURL: "data:image/gif;base64,R0lGOA=="},
			}}}},
			want: `{"contents":[{"role":"user","parts":[
				{"text":"what is this"},
				{"inlineData":{"mimeType":"image/png","data":"cG5nLWJ5dGVz"}},
				{"fileData":{"mimeType":"image/jpeg","fileUri":"https://example.com/cat.JPG?x=1"}},
				{"fileData":{"mimeType":"image/webp","fileUri":"https://example.com/blob"}},
				{"inlineData":{"mimeType":"image/gif","data":"R0lGOA=="}}]}]}`,
		},
		{
			name: "tools with schema sanitised and tool_choice auto",
			req: providers.Request{
				Messages:   []providers.Message{user("weather?")},
				ToolChoice: "auto",
				Tools: []providers.Tool{
					{Name: "get_weather", Description: "Weather now", Parameters: weatherSchema},
					{Name: "ping", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)},
				},
			},
			want: `{"contents":[{"role":"user","parts":[{"text":"weather?"}]}],
				"tools":[{"functionDeclarations":[
					{"name":"get_weather","description":"Weather now","parameters":{"type":"OBJECT",
						"properties":{"city":{"type":"STRING","description":"City name"},"unit":{"type":"STRING","enum":["c","f"],"nullable":true}},
						"required":["city"]}},
					{"name":"ping"}]}],
				"toolConfig":{"functionCallingConfig":{"mode":"AUTO"}}}`,
		},
		{
			name: "several tool calls in one turn, results merged, names recovered, reordered to call order",
			req: providers.Request{
				Tools: []providers.Tool{{Name: "get_weather"}, {Name: "get_time"}},
				Messages: []providers.Message{
					user("weather and time in Paris?"),
					{Role: providers.RoleAssistant, Content: []providers.Part{text("Checking.")}, ToolCalls: []providers.ToolCall{
						{ID: "call_a", Name: "get_weather", Arguments: `{"city": "Paris"}`},
						{ID: "call_b", Name: "get_time", Arguments: ``},
					}},
					toolResult("call_b", "12:00"),
					toolResult("call_a", `{"temp": 21}`),
					user("thanks"),
				},
			},
			want: `{"contents":[
				{"role":"user","parts":[{"text":"weather and time in Paris?"}]},
				{"role":"model","parts":[{"text":"Checking."},
					{"functionCall":{"id":"call_a","name":"get_weather","args":{"city":"Paris"}}},
					{"functionCall":{"id":"call_b","name":"get_time","args":{}}}]},
				{"role":"user","parts":[
					{"functionResponse":{"id":"call_a","name":"get_weather","response":{"temp":21}}},
					{"functionResponse":{"id":"call_b","name":"get_time","response":{"output":"12:00"}}},
					{"text":"thanks"}]}],
				"tools":[{"functionDeclarations":[{"name":"get_weather"},{"name":"get_time"}]}]}`,
		},
		{
			name: "synthetic ids are not sent, unanswered call gets a not-executed result, bad args kept raw",
			req: providers.Request{Messages: []providers.Message{
				user("go"),
				{Role: providers.RoleAssistant, ToolCalls: []providers.ToolCall{
					{ID: "call_gemini_AAAAAAAAAAAA_0", Name: "a", Arguments: `{"x":1}`},
					{ID: "call_gemini_AAAAAAAAAAAA_1", Name: "b", Arguments: `not json`},
				}},
				toolResult("call_gemini_AAAAAAAAAAAA_0", "done"),
			}},
			want: `{"contents":[
				{"role":"user","parts":[{"text":"go"}]},
				{"role":"model","parts":[
					{"functionCall":{"name":"a","args":{"x":1}},"thoughtSignature":"skip_thought_signature_validator"},
					{"functionCall":{"name":"b","args":{"_raw":"not json"}}}]},
				{"role":"user","parts":[
					{"functionResponse":{"name":"a","response":{"output":"done"}}},
					{"functionResponse":{"name":"b","response":{"error":"tool call was not executed"}}}]}]}`,
		},
		{
			name: "tool result after an intervening turn recovers its name from history",
			req: providers.Request{Messages: []providers.Message{
				user("go"),
				{Role: providers.RoleAssistant, ToolCalls: []providers.ToolCall{{ID: "t1", Name: "lookup", Arguments: `{}`}}},
				user("and?"),
				toolResult("t1", "late"),
			}},
			want: `{"contents":[
				{"role":"user","parts":[{"text":"go"}]},
				{"role":"model","parts":[{"functionCall":{"id":"t1","name":"lookup","args":{}}}]},
				{"role":"user","parts":[
					{"functionResponse":{"id":"t1","name":"lookup","response":{"error":"tool call was not executed"}}},
					{"text":"and?"},
					{"functionResponse":{"id":"t1","name":"lookup","response":{"output":"late"}}}]}]}`,
		},
		{
			name: "thought signature goes back on the first function call; reasoning text is not sent",
			req: providers.Request{Messages: []providers.Message{
				user("go"),
				{Role: providers.RoleAssistant, Content: []providers.Part{
					{Type: providers.PartReasoning, Text: "thinking...", Signature: "c2lnLTE="},
					text("Let me look."),
				}, ToolCalls: []providers.ToolCall{{ID: "x", Name: "a", Arguments: `{}`}, {ID: "y", Name: "a", Arguments: `{}`}}},
				toolResult("x", "1"), toolResult("y", "2"),
			}},
			want: `{"contents":[
				{"role":"user","parts":[{"text":"go"}]},
				{"role":"model","parts":[{"text":"Let me look."},
					{"functionCall":{"id":"x","name":"a","args":{}},"thoughtSignature":"c2lnLTE="},
					{"functionCall":{"id":"y","name":"a","args":{}}}]},
				{"role":"user","parts":[
					{"functionResponse":{"id":"x","name":"a","response":{"output":"1"}}},
					{"functionResponse":{"id":"y","name":"a","response":{"output":"2"}}}]}]}`,
		},
		{
			name: "text-only turn keeps its signature on the last text part; an invalid signature and old turns get none",
			req: providers.Request{Messages: []providers.Message{
				user("a"),
				{Role: providers.RoleAssistant, Content: []providers.Part{
					{Type: providers.PartReasoning, Signature: "not base64 !!"},
					{Type: providers.PartReasoning, Signature: "c2ln"},
					text("one"), text("two"),
				}},
				user("b"),
				{Role: providers.RoleAssistant, ToolCalls: []providers.ToolCall{{ID: "old", Name: "f"}}},
				toolResult("old", "r"),
				user("c"),
			}},
			want: `{"contents":[
				{"role":"user","parts":[{"text":"a"}]},
				{"role":"model","parts":[{"text":"one"},{"text":"two","thoughtSignature":"c2ln"}]},
				{"role":"user","parts":[{"text":"b"}]},
				{"role":"model","parts":[{"functionCall":{"id":"old","name":"f","args":{}}}]},
				{"role":"user","parts":[{"functionResponse":{"id":"old","name":"f","response":{"output":"r"}}},{"text":"c"}]}]}`,
		},
		{
			name: "tool_choice required",
			req:  providers.Request{Messages: []providers.Message{user("x")}, Tools: []providers.Tool{{Name: "f"}}, ToolChoice: "required"},
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]}],"tools":[{"functionDeclarations":[{"name":"f"}]}],
				"toolConfig":{"functionCallingConfig":{"mode":"ANY"}}}`,
		},
		{
			name: "tool_choice none",
			req:  providers.Request{Messages: []providers.Message{user("x")}, Tools: []providers.Tool{{Name: "f"}}, ToolChoice: "none"},
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]}],"tools":[{"functionDeclarations":[{"name":"f"}]}],
				"toolConfig":{"functionCallingConfig":{"mode":"NONE"}}}`,
		},
		{
			name: "tool_choice by name, with a name Gemini rejects rewritten",
			req: providers.Request{Messages: []providers.Message{user("x")},
				Tools: []providers.Tool{{Name: "f"}, {Name: "9lives/x"}}, ToolChoice: "9lives/x"},
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]}],"tools":[{"functionDeclarations":[{"name":"f"},{"name":"_9lives_x"}]}],
				"toolConfig":{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["_9lives_x"]}}}`,
		},
		{
			name: "tool_choice without tools is dropped",
			req:  providers.Request{Messages: []providers.Message{user("x")}, ToolChoice: "required"},
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]}]}`,
		},
		{
			name: "generation settings, stop cut to five",
			req: providers.Request{Messages: []providers.Message{user("x")},
				MaxTokens: ptr(int64(100)), Temperature: ptr(0.5), TopP: ptr(0.9), TopK: ptr(int64(40)),
				Stop: []string{"a", "", "b", "c", "d", "e", "f"}},
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]}],
				"generationConfig":{"maxOutputTokens":100,"temperature":0.5,"topP":0.9,"topK":40,"stopSequences":["a","b","c","d","e"]}}`,
		},
		{
			name: "JSON mode without schema",
			req:  providers.Request{Messages: []providers.Message{user("x")}, ResponseFormat: "json_object"},
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]}],"generationConfig":{"responseMimeType":"application/json"}}`,
		},
		{
			name: "JSON mode with schema keeps property order",
			req: providers.Request{Messages: []providers.Message{user("x")}, ResponseFormat: "json_schema",
				JSONSchema: json.RawMessage(`{"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"string","const":"A"}},
					"required":["zeta","alpha"],"additionalProperties":false,"strict":true}`)},
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]}],"generationConfig":{"responseMimeType":"application/json",
				"responseSchema":{"type":"OBJECT","properties":{"zeta":{"type":"INTEGER"},"alpha":{"type":"STRING","enum":["A"]}},
					"required":["zeta","alpha"],"propertyOrdering":["zeta","alpha"]}}}`,
		},
		{
			name: "thinking budget",
			req:  providers.Request{Messages: []providers.Message{user("x")}, ThinkingBudget: 2048, ReasoningEffort: "high"},
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]}],"generationConfig":{"thinkingConfig":{"includeThoughts":true,"thinkingBudget":2048}}}`,
		},
		{
			name: "reasoning effort capped by max tokens",
			req:  providers.Request{Messages: []providers.Message{user("x")}, ReasoningEffort: "high", MaxTokens: ptr(int64(4000))},
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]}],"generationConfig":{"maxOutputTokens":4000,"thinkingConfig":{"includeThoughts":true,"thinkingBudget":2000}}}`,
		},
		{
			name: "reasoning effort low",
			req:  providers.Request{Messages: []providers.Message{user("x")}, ReasoningEffort: "low"},
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]}],"generationConfig":{"thinkingConfig":{"includeThoughts":true,"thinkingBudget":1024}}}`,
		},
		{
			name: "reasoning effort none turns thinking off",
			req:  providers.Request{Messages: []providers.Message{user("x")}, ReasoningEffort: "none"},
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]}],"generationConfig":{"thinkingConfig":{"thinkingBudget":0}}}`,
		},
		{
			name: "dynamic thinking budget",
			req:  providers.Request{Messages: []providers.Message{user("x")}, ThinkingBudget: -5},
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]}],"generationConfig":{"thinkingConfig":{"includeThoughts":true,"thinkingBudget":-1}}}`,
		},
		{
			name: "tool result images follow the responses",
			req: providers.Request{Messages: []providers.Message{
				user("shot"),
				{Role: providers.RoleAssistant, ToolCalls: []providers.ToolCall{{ID: "s", Name: "screenshot", Arguments: "{}"}}},
				{Role: providers.RoleTool, ToolCallID: "s", Content: []providers.Part{
					text("here"), {Type: providers.PartImage, MediaType: "image/png", Data: []byte{1, 2}},
				}},
			}},
			want: `{"contents":[
				{"role":"user","parts":[{"text":"shot"}]},
				{"role":"model","parts":[{"functionCall":{"id":"s","name":"screenshot","args":{}},"thoughtSignature":"skip_thought_signature_validator"}]},
				{"role":"user","parts":[{"functionResponse":{"id":"s","name":"screenshot","response":{"output":"here"}}},
					{"inlineData":{"mimeType":"image/png","data":"AQI="}}]}]}`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body, err := EncodeRequest(&tc.req)
			if err != nil {
				t.Fatalf("EncodeRequest: %v", err)
			}
			jsonEqual(t, body, tc.want)
		})
	}
}

func TestEncodeRequestErrors(t *testing.T) {
	cases := []struct {
		name        string
		req         providers.Request
		wantErr     string
		unsupported bool
	}{
		{
			name:        "http image URL",
			req:         providers.Request{Messages: []providers.Message{{Role: providers.RoleUser, Content: []providers.Part{{Type: providers.PartImage, ImageURL: "http://example.com/a.png"}}}}},
			wantErr:     "https URLs only",
			unsupported: true,
		},
		{
			name:    "image without data",
			req:     providers.Request{Messages: []providers.Message{{Role: providers.RoleUser, Content: []providers.Part{{Type: providers.PartImage}}}}},
			wantErr: "neither a URL nor data",
		},
		{
			name:    "orphan tool result",
			req:     providers.Request{Messages: []providers.Message{user("x"), toolResult("nowhere", "r")}},
			wantErr: `tool result "nowhere" answers no tool call`,
		},
		{
			name:    "unknown role",
			req:     providers.Request{Messages: []providers.Message{{Role: "system", Content: []providers.Part{text("x")}}}},
			wantErr: "unknown role",
		},
		{
			name:    "nothing to send",
			req:     providers.Request{Messages: []providers.Message{user("  ")}},
			wantErr: "nothing to send",
		},
		{
			name:    "unknown response format",
			req:     providers.Request{Messages: []providers.Message{user("x")}, ResponseFormat: "yaml"},
			wantErr: "unsupported response format",
		},
		{
			name:    "tool without a name",
			req:     providers.Request{Messages: []providers.Message{user("x")}, Tools: []providers.Tool{{}}},
			wantErr: "tools[0].name",
		},
		{
			name:    "schema that is not an object",
			req:     providers.Request{Messages: []providers.Message{user("x")}, Tools: []providers.Tool{{Name: "f", Parameters: json.RawMessage(`[1]`)}}},
			wantErr: "must be a JSON object",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := EncodeRequest(&tc.req)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
			}
			if got := errors.Is(err, ErrUnsupportedRequest); got != tc.unsupported {
				t.Errorf("errors.Is(err, ErrUnsupportedRequest) = %v, want %v", got, tc.unsupported)
			}
		})
	}
}

func TestToolNames(t *testing.T) {
	req := providers.Request{
		Messages: []providers.Message{user("x")},
		// "a b" would become "a_b", which another tool already is.
		Tools: []providers.Tool{{Name: "a b"}, {Name: "a_b"}, {Name: "mcp.server:tool-1"}, {Name: strings.Repeat("x", 70)}},
	}
	body, names, err := encodeRequest(&req)
	if err != nil {
		t.Fatal(err)
	}
	var gr GenerateContentRequest
	if err := json.Unmarshal(body, &gr); err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, d := range gr.Tools[0].FunctionDeclarations {
		got = append(got, d.Name)
		if !validToolName(d.Name) {
			t.Errorf("name %q is not valid for Gemini", d.Name)
		}
	}
	want := []string{"a_b_2", "a_b", "mcp.server:tool-1", strings.Repeat("x", 64)}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("names = %q, want %q", got, want)
	}
	for i, g := range got {
		if back := names.client(g); back != req.Tools[i].Name {
			t.Errorf("client(%q) = %q, want %q", g, back, req.Tools[i].Name)
		}
	}
}

func TestUnsupported(t *testing.T) {
	cases := []struct {
		name string
		req  providers.Request
		want []string
	}{
		{"nothing", providers.Request{ParallelToolCalls: ptr(true), Stop: []string{"a"}, ReasoningEffort: "low"}, nil},
		{"parallel tool calls off", providers.Request{ParallelToolCalls: ptr(false)}, []string{"parallel_tool_calls"}},
		{"user", providers.Request{User: "u-1"}, []string{"user"}},
		{"too many stops", providers.Request{Stop: []string{"1", "2", "3", "4", "5", "6"}}, []string{"stop"}},
		{"unknown effort", providers.Request{ReasoningEffort: "extreme"}, []string{"reasoning_effort"}},
		{"participant name", providers.Request{Messages: []providers.Message{{Role: providers.RoleUser, Name: "bob"}}}, []string{"name"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Unsupported(&tc.req); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Unsupported = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDecodeResponse(t *testing.T) {
	cases := []struct {
		name    string
		body    string
		want    providers.Response
		wantErr error
	}{
		{
			name: "text with usage",
			body: `{"candidates":[{"content":{"parts":[{"text":"Hello"},{"text":" world"}],"role":"model"},"finishReason":"STOP","index":0}],
				"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":5,"totalTokenCount":15,"promptTokensDetails":[{"modality":"TEXT","tokenCount":10}]},
				"modelVersion":"gemini-2.5-flash","responseId":"resp-1"}`,
			want: providers.Response{ID: "resp-1", Model: "gemini-2.5-flash", Text: "Hello world", FinishReason: providers.FinishStop,
				Usage: providers.Usage{Input: 10, Output: 5}},
		},
		{
			name: "thoughts, cache and tool-use prompt usage",
			body: `{"candidates":[{"content":{"parts":[{"text":"Let me think.","thought":true},{"text":"42","thoughtSignature":"c2lnMQ=="}],"role":"model"},"finishReason":"STOP"}],
				"usageMetadata":{"promptTokenCount":100,"cachedContentTokenCount":60,"toolUsePromptTokenCount":7,"candidatesTokenCount":3,"thoughtsTokenCount":50,"totalTokenCount":160}}`,
			want: providers.Response{Reasoning: "Let me think.", ReasoningSignature: providers.Tag(providers.SigGemini, "c2lnMQ=="), Text: "42", FinishReason: providers.FinishStop,
				Usage: providers.Usage{Input: 47, CacheRead: 60, Output: 3, Reasoning: 50}},
		},
		{
			name: "max tokens",
			body: `{"candidates":[{"content":{"parts":[{"text":"trunc"}],"role":"model"},"finishReason":"MAX_TOKENS"}]}`,
			want: providers.Response{Text: "trunc", FinishReason: providers.FinishLength},
		},
		{
			name: "safety finish",
			body: `{"candidates":[{"finishReason":"SAFETY","index":0,"safetyRatings":[{"category":"HARM_CATEGORY_HARASSMENT","probability":"HIGH","blocked":true}]}]}`,
			want: providers.Response{FinishReason: providers.FinishContentFilter},
		},
		{
			name: "prompt blocked: a terminal result, not an error",
			body: `{"promptFeedback":{"blockReason":"PROHIBITED_CONTENT"},"usageMetadata":{"promptTokenCount":8,"totalTokenCount":8},"modelVersion":"gemini-2.5-pro"}`,
			want: providers.Response{Model: "gemini-2.5-pro", FinishReason: providers.FinishContentFilter, Usage: providers.Usage{Input: 8}},
		},
		{
			name: "other reason is a stop",
			body: `{"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"OTHER"}]}`,
			want: providers.Response{Text: "x", FinishReason: providers.FinishStop},
		},
		{
			name:    "malformed function call is an error",
			body:    `{"candidates":[{"finishReason":"MALFORMED_FUNCTION_CALL","finishMessage":"Malformed function call: print(x"}]}`,
			wantErr: ErrUnusableAnswer,
		},
		{
			name:    "no candidates and no block",
			body:    `{"usageMetadata":{"promptTokenCount":3}}`,
			wantErr: errNoCandidates,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeResponse([]byte(tc.body))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", *got, tc.want)
			}
		})
	}
}

func TestDecodeResponseFunctionCalls(t *testing.T) {
	body := `{"candidates":[{"content":{"role":"model","parts":[
		{"text":"Calling."},
		{"functionCall":{"name":"get_weather","args":{"city":"Paris"}},"thoughtSignature":"Zmlyc3Q="},
		{"functionCall":{"name":"get_weather","args":{"city":"Rome"}}},
		{"functionCall":{"id":"gem-7","name":"get_time"}},
		{"text":"","thoughtSignature":"bGF0ZXI="}]},"finishReason":"STOP"}]}`
	got, err := DecodeResponse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if got.FinishReason != providers.FinishToolCalls {
		t.Errorf("finish = %q, want tool_calls", got.FinishReason)
	}
	if got.ReasoningSignature != providers.Tag(providers.SigGemini, "Zmlyc3Q=") {
		t.Errorf("signature = %q, want the one of the first function call", got.ReasoningSignature)
	}
	if len(got.ToolCalls) != 3 {
		t.Fatalf("%d tool calls, want 3: %+v", len(got.ToolCalls), got.ToolCalls)
	}
	wantArgs := []string{`{"city":"Paris"}`, `{"city":"Rome"}`, `{}`}
	for i, tc := range got.ToolCalls {
		if tc.Arguments != wantArgs[i] {
			t.Errorf("call %d arguments = %s, want %s", i, tc.Arguments, wantArgs[i])
		}
	}
	a, b := got.ToolCalls[0].ID, got.ToolCalls[1].ID
	if !strings.HasPrefix(a, syntheticIDPrefix) || !strings.HasSuffix(a, "_0") || !strings.HasSuffix(b, "_1") || a == b {
		t.Errorf("synthetic ids = %q, %q", a, b)
	}
	if len(a) > 64 || strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
		t.Errorf("id %q does not fit every provider's id pattern", a)
	}
	if got.ToolCalls[2].ID != "gem-7" {
		t.Errorf("Gemini's own id not kept: %q", got.ToolCalls[2].ID)
	}
	again, _ := DecodeResponse([]byte(body))
	if again.ToolCalls[0].ID == a {
		t.Errorf("synthetic ids repeat across answers: %q", a)
	}

	// The answer replayed as history goes back to Gemini with its signature and
	// without the made-up ids.
	req := providers.Request{Messages: []providers.Message{
		user("weather?"),
		{Role: providers.RoleAssistant, Content: []providers.Part{text(got.Text), {Type: providers.PartReasoning, Signature: got.ReasoningSignature}}, ToolCalls: got.ToolCalls},
		toolResult(got.ToolCalls[0].ID, "sunny"), toolResult(got.ToolCalls[1].ID, "rainy"), toolResult("gem-7", "noon"),
	}}
	out, err := EncodeRequest(&req)
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, out, `{"contents":[
		{"role":"user","parts":[{"text":"weather?"}]},
		{"role":"model","parts":[{"text":"Calling."},
			{"functionCall":{"name":"get_weather","args":{"city":"Paris"}},"thoughtSignature":"Zmlyc3Q="},
			{"functionCall":{"name":"get_weather","args":{"city":"Rome"}}},
			{"functionCall":{"id":"gem-7","name":"get_time","args":{}}}]},
		{"role":"user","parts":[
			{"functionResponse":{"name":"get_weather","response":{"output":"sunny"}}},
			{"functionResponse":{"name":"get_weather","response":{"output":"rainy"}}},
			{"functionResponse":{"id":"gem-7","name":"get_time","response":{"output":"noon"}}}]}]}`)
}
