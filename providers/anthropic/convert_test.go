package anthropic

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// multiTurnRequest is a Messages request with parallel tool calls, consecutive tool results,
// thinking, a cached system prompt and every sampling parameter.
const multiTurnRequest = `{
  "model": "claude-sonnet-4-5",
  "max_tokens": 8192,
  "system": [
    {"type": "text", "text": "You are a weather bot.", "cache_control": {"type": "ephemeral"}},
    {"type": "text", "text": "Be brief."}
  ],
  "messages": [
    {"role": "user", "content": "Weather in Paris and London?"},
    {"role": "assistant", "content": [
      {"type": "thinking", "thinking": "I need both cities.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA"},
      {"type": "text", "text": "Let me check both."},
      {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris"}},
      {"type": "tool_use", "id": "toolu_01B", "name": "get_weather", "input": {"city": "London", "units": "c"}}
    ]},
    {"role": "user", "content": [
      {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "18C sunny"},
      {"type": "tool_result", "tool_use_id": "toolu_01B", "content": [{"type": "text", "text": "12C rain"}]},
      {"type": "text", "text": "Summarise please."}
    ]}
  ],
  "tools": [{"name": "get_weather", "description": "Current weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}],
  "tool_choice": {"type": "auto", "disable_parallel_tool_use": true},
  "temperature": 1,
  "top_p": 0.99,
  "top_k": 40,
  "stop_sequences": ["END"],
  "stream": true,
  "thinking": {"type": "enabled", "budget_tokens": 2048},
  "metadata": {"user_id": "user-42"}
}`

func text(s string) providers.Part { return providers.Part{Type: providers.PartText, Text: s} }

func TestDecodeRequestMultiTurnTools(t *testing.T) {
	req, err := DecodeRequest([]byte(multiTurnRequest))
	if err != nil {
		t.Fatal(err)
	}
	no := false
	want := &providers.Request{
		Model:  "claude-sonnet-4-5",
		System: "You are a weather bot.\n\nBe brief.",
		Messages: []providers.Message{
			{Role: providers.RoleUser, Content: []providers.Part{text("Weather in Paris and London?")}},
			{Role: providers.RoleAssistant,
				Content: []providers.Part{
					{Type: providers.PartReasoning, Text: "I need both cities.", Signature: "EqQBCgIYAhIM1gbcDa9GJwZA"},
					text("Let me check both."),
				},
				ToolCalls: []providers.ToolCall{
					{ID: "toolu_01A", Name: "get_weather", Arguments: `{"city":"Paris"}`},
					{ID: "toolu_01B", Name: "get_weather", Arguments: `{"city":"London","units":"c"}`},
				}},
			{Role: providers.RoleTool, ToolCallID: "toolu_01A", Name: "get_weather", Content: []providers.Part{text("18C sunny")}},
			{Role: providers.RoleTool, ToolCallID: "toolu_01B", Name: "get_weather", Content: []providers.Part{text("12C rain")}},
			{Role: providers.RoleUser, Content: []providers.Part{text("Summarise please.")}},
		},
		Tools: []providers.Tool{{Name: "get_weather", Description: "Current weather",
			Parameters: json.RawMessage(`{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}`)}},
		ToolChoice:        "auto",
		ParallelToolCalls: &no,
		MaxTokens:         ptr(int64(8192)),
		Temperature:       ptr(1.0),
		TopP:              ptr(0.99),
		TopK:              ptr(int64(40)),
		Stop:              []string{"END"},
		Stream:            true,
		ThinkingBudget:    2048,
		User:              "user-42",
	}
	if !reflect.DeepEqual(req, want) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", req, want)
	}
}

func TestRequestRoundTrip(t *testing.T) {
	req, err := DecodeRequest([]byte(multiTurnRequest))
	if err != nil {
		t.Fatal(err)
	}
	body, err := EncodeRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	// The upstream shape: three alternating turns, results first in the last one.
	var wire struct {
		MaxTokens int64 `json:"max_tokens"`
		Messages  []struct {
			Role    string         `json:"role"`
			Content []ContentBlock `json:"content"`
		} `json:"messages"`
		Thinking   Thinking   `json:"thinking"`
		ToolChoice ToolChoice `json:"tool_choice"`
		Metadata   Metadata   `json:"metadata"`
		System     string     `json:"system"`
	}
	if err := json.Unmarshal(body, &wire); err != nil {
		t.Fatal(err)
	}
	if len(wire.Messages) != 3 {
		t.Fatalf("got %d messages, want 3: %s", len(wire.Messages), body)
	}
	var types []string
	for _, b := range wire.Messages[2].Content {
		types = append(types, b.Type)
	}
	if strings.Join(types, ",") != "tool_result,tool_result,text" {
		t.Errorf("last user turn blocks = %v", types)
	}
	var asst []string
	for _, b := range wire.Messages[1].Content {
		asst = append(asst, b.Type)
	}
	if strings.Join(asst, ",") != "thinking,text,tool_use,tool_use" {
		t.Errorf("assistant blocks = %v", asst)
	}
	if wire.Thinking.Type != "enabled" || *wire.Thinking.BudgetTokens != 2048 || wire.MaxTokens != 8192 {
		t.Errorf("thinking = %+v, max_tokens %d", wire.Thinking, wire.MaxTokens)
	}
	if wire.ToolChoice.Type != "auto" || wire.ToolChoice.DisableParallelToolUse == nil || !*wire.ToolChoice.DisableParallelToolUse {
		t.Errorf("tool_choice = %+v", wire.ToolChoice)
	}
	if wire.Metadata.UserID != "user-42" || wire.System != "You are a weather bot.\n\nBe brief." {
		t.Errorf("metadata %+v system %q", wire.Metadata, wire.System)
	}
	again, err := DecodeRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	// Top_k goes with thinking on, which the API requires; the rest survives the trip.
	req.TopK = nil
	for i := range req.Tools {
		req.Tools[i].Parameters = compact(t, req.Tools[i].Parameters)
		again.Tools[i].Parameters = compact(t, again.Tools[i].Parameters)
	}
	if !reflect.DeepEqual(again, req) {
		t.Fatalf("round trip\n%+v\nwant\n%+v", again, req)
	}
}

func compact(t *testing.T, raw json.RawMessage) json.RawMessage {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	return b
}

// wireMessages encodes req and returns its messages as generic JSON.
func wireMessages(t *testing.T, req *providers.Request) []map[string]any {
	t.Helper()
	body, err := EncodeRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	var wire struct {
		Messages []map[string]any `json:"messages"`
	}
	if err := json.Unmarshal(body, &wire); err != nil {
		t.Fatal(err)
	}
	return wire.Messages
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestEncodeRequestMessages(t *testing.T) {
	user := func(s string) providers.Message {
		return providers.Message{Role: providers.RoleUser, Content: []providers.Part{text(s)}}
	}
	tool := func(id, s string) providers.Message {
		return providers.Message{Role: providers.RoleTool, ToolCallID: id, Content: []providers.Part{text(s)}}
	}
	calls := providers.Message{Role: providers.RoleAssistant, Content: []providers.Part{text("")}, ToolCalls: []providers.ToolCall{
		{ID: "call_1", Name: "a", Arguments: `{"x":1}`},
		{ID: "call_2", Name: "b", Arguments: `not json`},
		{ID: "call_3", Name: "c", Arguments: ``},
	}}
	cases := []struct {
		name string
		msgs []providers.Message
		want string
	}{{
		name: "consecutive tool results merge into one user turn, before the text",
		msgs: []providers.Message{user("go"), calls, tool("call_1", "r1"), tool("call_2", "r2"), tool("call_3", "r3"), user("thanks")},
		want: `[{"content":[{"text":"go","type":"text"}],"role":"user"},` +
			`{"content":[{"id":"call_1","input":{"x":1},"name":"a","type":"tool_use"},{"id":"call_2","input":{},"name":"b","type":"tool_use"},{"id":"call_3","input":{},"name":"c","type":"tool_use"}],"role":"assistant"},` +
			`{"content":[{"content":"r1","tool_use_id":"call_1","type":"tool_result"},{"content":"r2","tool_use_id":"call_2","type":"tool_result"},{"content":"r3","tool_use_id":"call_3","type":"tool_result"},{"text":"thanks","type":"text"}],"role":"user"}]`,
	}, {
		name: "same-role turns merge; empty and whitespace text dropped",
		msgs: []providers.Message{user("a"), user("  "), user("b"), {Role: providers.RoleAssistant, Content: []providers.Part{text(" \n")}}, user("c")},
		want: `[{"content":[{"text":"a","type":"text"},{"text":"b","type":"text"},{"text":"c","type":"text"}],"role":"user"}]`,
	}, {
		name: "a call left unanswered gets a synthetic error result",
		msgs: []providers.Message{user("go"), calls, tool("call_2", "r2"), user("next")},
		want: `[{"content":[{"text":"go","type":"text"}],"role":"user"},` +
			`{"content":[{"id":"call_1","input":{"x":1},"name":"a","type":"tool_use"},{"id":"call_2","input":{},"name":"b","type":"tool_use"},{"id":"call_3","input":{},"name":"c","type":"tool_use"}],"role":"assistant"},` +
			`{"content":[{"content":"r2","tool_use_id":"call_2","type":"tool_result"},{"content":"tool call was not executed","is_error":true,"tool_use_id":"call_1","type":"tool_result"},{"content":"tool call was not executed","is_error":true,"tool_use_id":"call_3","type":"tool_result"},{"text":"next","type":"text"}],"role":"user"}]`,
	}, {
		name: "foreign ids are rewritten the same way in calls and results; error wrapping becomes is_error",
		msgs: []providers.Message{user("go"),
			{Role: providers.RoleAssistant, ToolCalls: []providers.ToolCall{{ID: "fc.1:x", Name: "a", Arguments: "{}"}}},
			tool("fc.1:x", `{"error":"boom"}`)},
		want: `[{"content":[{"text":"go","type":"text"}],"role":"user"},` +
			`{"content":[{"id":"t_ZmMuMTp4","input":{},"name":"a","type":"tool_use"}],"role":"assistant"},` +
			`{"content":[{"content":"boom","is_error":true,"tool_use_id":"t_ZmMuMTp4","type":"tool_result"}],"role":"user"}]`,
	}, {
		name: "final assistant prefill loses trailing whitespace; unsigned reasoning dropped",
		msgs: []providers.Message{user("go"), {Role: providers.RoleAssistant, Content: []providers.Part{
			{Type: providers.PartReasoning, Text: "from another provider"}, text("The answer is "),
		}}},
		want: `[{"content":[{"text":"go","type":"text"}],"role":"user"},{"content":[{"text":"The answer is","type":"text"}],"role":"assistant"}]`,
	}, {
		name: "images: URL, inline data, data URL, and in a tool result",
		msgs: []providers.Message{{Role: providers.RoleUser, Content: []providers.Part{
			{Type: providers.PartImage, ImageURL: "https://example.com/cat.png"},
			{Type: providers.PartImage, MediaType: "image/png", Data: []byte("PNG")},
			{Type: providers.PartImage, ImageURL: "data:image/jpg;base64,SlBH"},
			text("what is this?"),
		}}, {Role: providers.RoleAssistant, ToolCalls: []providers.ToolCall{{ID: "c", Name: "shot"}}},
			{Role: providers.RoleTool, ToolCallID: "c", Content: []providers.Part{text("screen:"), {Type: providers.PartImage, MediaType: "image/webp", Data: []byte("W")}}}},
		want: `[{"content":[{"source":{"type":"url","url":"https://example.com/cat.png"},"type":"image"},` +
			`{"source":{"data":"UE5H","media_type":"image/png","type":"base64"},"type":"image"},` +
			`{"source":{"data":"SlBH","media_type":"image/jpeg","type":"base64"},"type":"image"},` +
			`{"text":"what is this?","type":"text"}],"role":"user"},` +
			`{"content":[{"id":"c","input":{},"name":"shot","type":"tool_use"}],"role":"assistant"},` +
			`{"content":[{"content":[{"text":"screen:","type":"text"},{"source":{"data":"Vw==","media_type":"image/webp","type":"base64"},"type":"image"}],"tool_use_id":"c","type":"tool_result"}],"role":"user"}]`,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := mustJSON(t, wireMessages(t, &providers.Request{Model: "m", Messages: tc.msgs}))
			if got != tc.want {
				t.Errorf("messages\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestEncodeRequestErrors(t *testing.T) {
	cases := []struct {
		name string
		msgs []providers.Message
		want string
	}{
		{"unsupported image type", []providers.Message{{Role: providers.RoleUser, Content: []providers.Part{{Type: providers.PartImage, MediaType: "image/bmp", Data: []byte("x")}}}}, "not supported"},
		{"image without data", []providers.Message{{Role: providers.RoleUser, Content: []providers.Part{{Type: providers.PartImage}}}}, "neither a URL nor data"},
		{"nothing to send", []providers.Message{{Role: providers.RoleUser, Content: []providers.Part{text(" ")}}}, "no message"},
		{"unknown role", []providers.Message{{Role: "system", Content: []providers.Part{text("x")}}}, "unknown role"},
		{"tool call without id", []providers.Message{{Role: providers.RoleAssistant, ToolCalls: []providers.ToolCall{{Name: "a"}}}}, "id required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := EncodeRequest(&providers.Request{Messages: tc.msgs})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestEncodeRequestParameters(t *testing.T) {
	hi := []providers.Message{{Role: providers.RoleUser, Content: []providers.Part{text("hi")}}}
	tools := []providers.Tool{{Name: "f"}}
	cases := []struct {
		name        string
		req         providers.Request
		want        map[string]any // top-level fields expected (JSON-decoded); nil value: absent
		unsupported []string
	}{{
		name: "defaults: max_tokens, no thinking",
		req:  providers.Request{Model: "m"},
		want: map[string]any{"max_tokens": 4096.0, "thinking": nil, "temperature": nil, "tool_choice": nil, "system": nil},
	}, {
		name: "effort low: budget 1024 on top of the default max_tokens",
		req:  providers.Request{ReasoningEffort: "low"},
		want: map[string]any{"max_tokens": 5120.0, "thinking": map[string]any{"type": "enabled", "budget_tokens": 1024.0}},
	}, {
		name: "effort medium and high",
		req:  providers.Request{ReasoningEffort: "high", MaxTokens: ptr(int64(64000))},
		want: map[string]any{"max_tokens": 64000.0, "thinking": map[string]any{"type": "enabled", "budget_tokens": 16384.0}},
	}, {
		name: "effort budget capped at half of max_tokens",
		req:  providers.Request{ReasoningEffort: "medium", MaxTokens: ptr(int64(3000))},
		want: map[string]any{"max_tokens": 3000.0, "thinking": map[string]any{"type": "enabled", "budget_tokens": 1500.0}},
	}, {
		name:        "max_tokens too small for thinking",
		req:         providers.Request{ReasoningEffort: "low", MaxTokens: ptr(int64(1000))},
		want:        map[string]any{"max_tokens": 1000.0, "thinking": nil},
		unsupported: []string{"reasoning_effort"},
	}, {
		name: "minimal effort is no thinking",
		req:  providers.Request{ReasoningEffort: "minimal"},
		want: map[string]any{"max_tokens": 4096.0, "thinking": nil},
	}, {
		name: "explicit budget wins over effort",
		req:  providers.Request{ReasoningEffort: "high", ThinkingBudget: 3000, MaxTokens: ptr(int64(10000))},
		want: map[string]any{"max_tokens": 10000.0, "thinking": map[string]any{"type": "enabled", "budget_tokens": 3000.0}},
	}, {
		name:        "thinking dropped with forced tool use",
		req:         providers.Request{ThinkingBudget: 2000, Tools: tools, ToolChoice: "required"},
		want:        map[string]any{"thinking": nil, "tool_choice": map[string]any{"type": "any"}, "max_tokens": 4096.0},
		unsupported: []string{"thinking_budget"},
	}, {
		name: "thinking dropped when the last tool-calling turn has no signed thinking",
		req: providers.Request{ReasoningEffort: "high", Tools: tools, Messages: []providers.Message{
			{Role: providers.RoleUser, Content: []providers.Part{text("hi")}},
			{Role: providers.RoleAssistant, ToolCalls: []providers.ToolCall{{ID: "c1", Name: "f", Arguments: "{}"}}},
			{Role: providers.RoleTool, ToolCallID: "c1", Content: []providers.Part{text("ok")}},
		}},
		want:        map[string]any{"thinking": nil, "max_tokens": 4096.0},
		unsupported: []string{"reasoning_effort"},
	}, {
		name: "thinking kept when the last tool-calling turn replays its signed thinking",
		req: providers.Request{ReasoningEffort: "low", Tools: tools, Messages: []providers.Message{
			{Role: providers.RoleUser, Content: []providers.Part{text("hi")}},
			{Role: providers.RoleAssistant, Content: []providers.Part{{Type: providers.PartReasoning, Text: "t", Signature: "s"}},
				ToolCalls: []providers.ToolCall{{ID: "c1", Name: "f", Arguments: "{}"}}},
			{Role: providers.RoleTool, ToolCallID: "c1", Content: []providers.Part{text("ok")}},
		}},
		want: map[string]any{"thinking": map[string]any{"type": "enabled", "budget_tokens": 1024.0}},
	}, {
		name:        "temperature clamped to 1",
		req:         providers.Request{Temperature: ptr(1.7), TopP: ptr(0.5), TopK: ptr(int64(5))},
		want:        map[string]any{"temperature": 1.0, "top_p": 0.5, "top_k": 5.0},
		unsupported: []string{"temperature"},
	}, {
		name: "temperature in range kept",
		req:  providers.Request{Temperature: ptr(0.7)},
		want: map[string]any{"temperature": 0.7},
	}, {
		name:        "sampling dropped with thinking",
		req:         providers.Request{ReasoningEffort: "low", Temperature: ptr(0.2), TopP: ptr(0.5), TopK: ptr(int64(5))},
		want:        map[string]any{"temperature": nil, "top_p": nil, "top_k": nil},
		unsupported: []string{"temperature", "top_k", "top_p"},
	}, {
		name: "tool choices",
		req:  providers.Request{Tools: tools, ToolChoice: "f", Stop: []string{"X"}, User: "u1"},
		want: map[string]any{"tool_choice": map[string]any{"type": "tool", "name": "f"}, "stop_sequences": []any{"X"},
			"metadata": map[string]any{"user_id": "u1"}, "tools": []any{map[string]any{"name": "f", "input_schema": map[string]any{"type": "object", "properties": map[string]any{}}}}},
	}, {
		name: "no parallel tool calls without a choice",
		req:  providers.Request{Tools: tools, ParallelToolCalls: ptr(false)},
		want: map[string]any{"tool_choice": map[string]any{"type": "auto", "disable_parallel_tool_use": true}},
	}, {
		name: "tool choice none",
		req:  providers.Request{Tools: tools, ToolChoice: "none", ParallelToolCalls: ptr(false)},
		want: map[string]any{"tool_choice": map[string]any{"type": "none"}},
	}, {
		name: "tool choice without tools is not sent",
		req:  providers.Request{ToolChoice: "required"},
		want: map[string]any{"tool_choice": nil},
	}, {
		name:        "json mode becomes a system instruction",
		req:         providers.Request{System: "Be nice.", ResponseFormat: "json_object"},
		want:        map[string]any{"system": "Be nice.\n\nRespond only with a single valid JSON object. Do not wrap it in a Markdown code block and do not write anything before or after it."},
		unsupported: []string{"response_format"},
	}, {
		name:        "json schema is put in the instruction",
		req:         providers.Request{ResponseFormat: "json_schema", JSONSchema: json.RawMessage(`{"type": "object"}`)},
		want:        map[string]any{"system": "Respond only with a single valid JSON value that conforms to this JSON Schema: {\"type\":\"object\"}\nDo not wrap it in a Markdown code block and do not write anything before or after it."},
		unsupported: []string{"response_format"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.req.Messages == nil {
				tc.req.Messages = hi
			}
			body, err := EncodeRequest(&tc.req)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.want {
				if !reflect.DeepEqual(got[k], v) {
					t.Errorf("%s = %#v, want %#v (body %s)", k, got[k], v, body)
				}
			}
			if u := Unsupported(&tc.req); !reflect.DeepEqual(u, tc.unsupported) {
				t.Errorf("Unsupported = %v, want %v", u, tc.unsupported)
			}
		})
	}
}

func TestDecodeRequestShapes(t *testing.T) {
	cases := []struct {
		name  string
		body  string
		check func(t *testing.T, r *providers.Request)
	}{{
		name: "string system and content, images",
		body: `{"model":"m","max_tokens":10,"system":"sys","messages":[{"role":"user","content":[
			{"type":"image","source":{"type":"base64","media_type":"image/PNG","data":"UE5H"}},
			{"type":"image","source":{"type":"url","url":"https://x.test/a.jpg"}},
			{"type":"text","text":""},{"type":"text","text":"describe"}]}]}`,
		check: func(t *testing.T, r *providers.Request) {
			want := []providers.Part{
				{Type: providers.PartImage, MediaType: "image/png", Data: []byte("PNG")},
				{Type: providers.PartImage, ImageURL: "https://x.test/a.jpg"},
				text("describe"),
			}
			if r.System != "sys" || !reflect.DeepEqual(r.Messages[0].Content, want) {
				t.Errorf("got %+v", r)
			}
		},
	}, {
		name: "error tool result, redacted thinking, text between results",
		body: `{"messages":[
			{"role":"assistant","content":[{"type":"redacted_thinking","data":"abc"},{"type":"tool_use","id":"t1","name":"f","input":{}},{"type":"tool_use","id":"t2","name":"g"}]},
			{"role":"user","content":[{"type":"text","text":"before"},{"type":"tool_result","tool_use_id":"t1","is_error":true,"content":"boom"},
				{"type":"tool_result","tool_use_id":"t2","content":[{"type":"text","text":"ok"},{"type":"image","source":{"type":"base64","media_type":"image/gif","data":"R0lG"}}]}]}]}`,
		check: func(t *testing.T, r *providers.Request) {
			want := []providers.Message{
				{Role: providers.RoleAssistant, ToolCalls: []providers.ToolCall{{ID: "t1", Name: "f", Arguments: "{}"}, {ID: "t2", Name: "g", Arguments: "{}"}}},
				{Role: providers.RoleUser, Content: []providers.Part{text("before")}},
				{Role: providers.RoleTool, ToolCallID: "t1", Name: "f", Content: []providers.Part{text(`{"error":"boom"}`)}},
				{Role: providers.RoleTool, ToolCallID: "t2", Name: "g", Content: []providers.Part{text("ok"), {Type: providers.PartImage, MediaType: "image/gif", Data: []byte("GIF")}}},
			}
			if !reflect.DeepEqual(r.Messages, want) {
				t.Errorf("got\n%+v\nwant\n%+v", r.Messages, want)
			}
		},
	}, {
		name: "tool choices and adaptive thinking",
		body: `{"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"any"},"thinking":{"type":"adaptive"},"output_config":{"effort":"max","format":{"type":"json_schema","schema":{"type":"object"}}}}`,
		check: func(t *testing.T, r *providers.Request) {
			if r.ToolChoice != "required" || r.ReasoningEffort != "high" || r.ResponseFormat != "json_schema" || string(r.JSONSchema) != `{"type":"object"}` || r.MaxTokens != nil {
				t.Errorf("got %+v", r)
			}
		},
	}, {
		name: "tool choice by name, effort without thinking ignored",
		body: `{"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"tool","name":"f"},"output_config":{"effort":"low"}}`,
		check: func(t *testing.T, r *providers.Request) {
			if r.ToolChoice != "f" || r.ReasoningEffort != "" || r.ParallelToolCalls != nil {
				t.Errorf("got %+v", r)
			}
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := DecodeRequest([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, r)
		})
	}
}

func TestDecodeRequestErrors(t *testing.T) {
	cases := []struct{ body, want string }{
		{`not json`, "decoding messages request"},
		{`{"messages":[]}`, "messages: at least one message is required"},
		{`{"messages":[{"role":"system","content":"x"}]}`, `messages[0].role: unknown role "system"`},
		{`{"messages":[{"content":"x"}]}`, `messages[0].role: required`},
		{`{"messages":[{"role":"user"}]}`, `messages[0].content: required`},
		{`{"messages":[{"role":"user","content":5}]}`, `messages[0].content: must be a string or an array`},
		{`{"messages":[{"role":"user","content":"a"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"video"}]}]}`, `messages[1].content[1]: unknown block type "video"`},
		{`{"messages":[{"role":"user","content":[{"type":"document","source":{}}]}]}`, `messages[0].content[0]: block type "document" is not supported`},
		{`{"messages":[{"role":"user","content":[{"text":"a"}]}]}`, `messages[0].content[0].type: required`},
		{`{"messages":[{"role":"user","content":[{"type":"text"}]}]}`, `messages[0].content[0].text: required`},
		{`{"messages":[{"role":"assistant","content":[{"type":"image","source":{"type":"url","url":"https://x"}}]}]}`, `messages[0].content[0]: image blocks are not allowed in assistant messages`},
		{`{"messages":[{"role":"user","content":[{"type":"tool_use","id":"a","name":"b","input":{}}]}]}`, `tool_use blocks are not allowed in user messages`},
		{`{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"b","input":[1]}]}]}`, `messages[0].content[0].input: must be a JSON object`},
		{`{"messages":[{"role":"assistant","content":[{"type":"tool_use","name":"b"}]}]}`, `messages[0].content[0].id: required`},
		{`{"messages":[{"role":"user","content":[{"type":"tool_result","content":"x"}]}]}`, `messages[0].content[0].tool_use_id: required`},
		{`{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":[{"type":"document"}]}]}]}`, `messages[0].content[0].content[0]: block type "document" is not supported`},
		{`{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"!!"}}]}]}`, `messages[0].content[0].source.data: must be non-empty base64`},
		{`{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"f"}}]}]}`, `image source type "file" is not supported`},
		{`{"messages":[{"role":"user","content":[{"type":"image"}]}]}`, `messages[0].content[0].source: required`},
		{`{"system":5,"messages":[{"role":"user","content":"x"}]}`, `system: must be a string or an array`},
		{`{"system":[{"type":"image"}],"messages":[{"role":"user","content":"x"}]}`, `system[0].type`},
		{`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"web_search_20250305","name":"web_search"}]}`, `tools[0].type: unsupported tool type`},
		{`{"messages":[{"role":"user","content":"x"}],"tools":[{"input_schema":{}}]}`, `tools[0].name: required`},
		{`{"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"tool"}}`, `tool_choice.name: required`},
		{`{"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"sometimes"}}`, `tool_choice.type: unknown type`},
		{`{"messages":[{"role":"user","content":"x"}],"thinking":{"type":"enabled"}}`, `thinking.budget_tokens: required`},
		{`{"messages":[{"role":"user","content":"x"}],"thinking":{"type":"enabled","budget_tokens":0}}`, `thinking.budget_tokens: must be positive`},
		{`{"messages":[{"role":"user","content":"x"}],"thinking":{"type":"deep"}}`, `thinking.type: unknown type`},
		{`{"messages":[{"role":"user","content":"x"}],"output_config":{"effort":"huge"}}`, `output_config.effort: unknown value`},
		{`{"messages":[{"role":"user","content":"x"}],"output_config":{"format":{"type":"xml"}}}`, `output_config.format.type: unsupported type`},
	}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			_, err := DecodeRequest([]byte(tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

const messageResponse = `{
  "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
  "type": "message",
  "role": "assistant",
  "model": "claude-sonnet-4-5-20250929",
  "content": [
    {"type": "thinking", "thinking": "Two cities.", "signature": "EqQBCgIYAhIM"},
    {"type": "text", "text": "Checking ", "citations": null},
    {"type": "text", "text": "now."},
    {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris"}},
    {"type": "tool_use", "id": "toolu_01B", "name": "get_weather", "input": {"city": "London"}}
  ],
  "stop_reason": "tool_use",
  "stop_sequence": null,
  "usage": {"input_tokens": 2095, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 3000, "output_tokens": 503,
            "output_tokens_details": {"thinking_tokens": 200}, "service_tier": "standard"}
}`

func TestDecodeResponse(t *testing.T) {
	resp, err := DecodeResponse([]byte(messageResponse))
	if err != nil {
		t.Fatal(err)
	}
	want := &providers.Response{
		ID: "msg_01XFDUDYJgAACzvnptvVoYEL", Model: "claude-sonnet-4-5-20250929",
		Reasoning: "Two cities.", ReasoningSignature: providers.Tag(providers.SigAnthropic, "EqQBCgIYAhIM"),
		Text: "Checking now.",
		ToolCalls: []providers.ToolCall{
			{ID: "toolu_01A", Name: "get_weather", Arguments: `{"city":"Paris"}`},
			{ID: "toolu_01B", Name: "get_weather", Arguments: `{"city":"London"}`},
		},
		FinishReason: providers.FinishToolCalls,
		Usage:        providers.Usage{Input: 2095, CacheWrite: 100, CacheRead: 3000, Output: 303, Reasoning: 200},
	}
	if !reflect.DeepEqual(resp, want) {
		t.Fatalf("got\n%+v\nwant\n%+v", resp, want)
	}
	if _, err := DecodeResponse([]byte(`{"type":"error","error":{"type":"api_error","message":"x"}}`)); err == nil {
		t.Error("an error object decoded as a message")
	}
}

func TestEncodeResponseIsValidForTheSDK(t *testing.T) {
	cases := []struct {
		name     string
		resp     providers.Response
		stop     string
		stopSeq  string
		blocks   []string
		toolJSON string
	}{{
		name: "thinking, text and tools",
		resp: providers.Response{Reasoning: "hmm", ReasoningSignature: "sig", Text: "Hi",
			ToolCalls:    []providers.ToolCall{{ID: "toolu_1", Name: "f", Arguments: `{"a": [1, 2]}`}, {ID: "toolu_2", Name: "g", Arguments: `broken`}},
			FinishReason: providers.FinishToolCalls,
			Usage:        providers.Usage{Input: 10, CacheRead: 20, CacheWrite: 30, Output: 40, Reasoning: 5}},
		stop: "tool_use", blocks: []string{"thinking", "text", "tool_use", "tool_use"}, toolJSON: `{"a":[1,2]}`,
	}, {
		name: "stop sequence",
		resp: providers.Response{Text: "abc", FinishReason: providers.FinishStop, StopSequence: "END"},
		stop: "stop_sequence", stopSeq: "END", blocks: []string{"text"},
	}, {
		name: "length, empty answer",
		resp: providers.Response{FinishReason: providers.FinishLength},
		stop: "max_tokens", blocks: nil,
	}, {
		name: "content filter",
		resp: providers.Response{FinishReason: providers.FinishContentFilter},
		stop: "refusal",
	}, {
		name: "tool calls with a plain stop",
		resp: providers.Response{ToolCalls: []providers.ToolCall{{ID: "toolu_1", Name: "f"}}, FinishReason: providers.FinishStop},
		stop: "tool_use", blocks: []string{"tool_use"}, toolJSON: `{}`,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body, err := EncodeResponse(&tc.resp, "msg_gw1", "claude-x")
			if err != nil {
				t.Fatal(err)
			}
			var m sdk.Message
			if err := json.Unmarshal(body, &m); err != nil {
				t.Fatal(err)
			}
			if m.ID != "msg_gw1" || m.Model != "claude-x" || m.Role != "assistant" || string(m.Type) != "message" {
				t.Errorf("header fields wrong: %s", body)
			}
			if string(m.StopReason) != tc.stop || m.StopSequence != tc.stopSeq {
				t.Errorf("stop = %q %q, want %q %q", m.StopReason, m.StopSequence, tc.stop, tc.stopSeq)
			}
			var blocks []string
			for _, b := range m.Content {
				blocks = append(blocks, b.Type)
			}
			if !reflect.DeepEqual(blocks, tc.blocks) {
				t.Errorf("blocks = %v, want %v", blocks, tc.blocks)
			}
			if tc.toolJSON != "" {
				var tu sdk.ToolUseBlock
				for _, b := range m.Content {
					if b.Type == "tool_use" {
						tu = b.AsToolUse()
						break
					}
				}
				if string(tu.Input) != tc.toolJSON {
					t.Errorf("tool input = %s, want %s", tu.Input, tc.toolJSON)
				}
			}
			u := tc.resp.Usage
			if m.Usage.InputTokens != u.Input || m.Usage.CacheReadInputTokens != u.CacheRead ||
				m.Usage.CacheCreationInputTokens != u.CacheWrite || m.Usage.OutputTokens != u.Output+u.Reasoning ||
				m.Usage.OutputTokensDetails.ThinkingTokens != u.Reasoning {
				t.Errorf("usage = %+v, want %+v", m.Usage, u)
			}
			back, err := DecodeResponse(body)
			if err != nil {
				t.Fatal(err)
			}
			if back.Usage != u || back.Text != tc.resp.Text || back.Reasoning != tc.resp.Reasoning {
				t.Errorf("decoded back %+v", back)
			}
		})
	}
}

func TestUsage(t *testing.T) {
	cases := []struct {
		raw  string
		want providers.Usage
	}{
		{`{"input_tokens":10,"cache_creation_input_tokens":null,"cache_read_input_tokens":5,"output_tokens":100,"output_tokens_details":{"thinking_tokens":40}}`,
			providers.Usage{Input: 10, CacheRead: 5, Output: 60, Reasoning: 40}},
		{`{"input_tokens":10,"output_tokens":7}`, providers.Usage{Input: 10, Output: 7}},
		{`{"input_tokens":3,"output_tokens":7,"output_tokens_details":{"thinking_tokens":99}}`, providers.Usage{Input: 3, Reasoning: 7}},
		{`{"input_tokens":-3,"output_tokens":2.0}`, providers.Usage{Output: 2}},
		{`null`, providers.Usage{}},
		{``, providers.Usage{}},
	}
	for _, tc := range cases {
		got, err := ParseUsage([]byte(tc.raw))
		if err != nil || got != tc.want {
			t.Errorf("ParseUsage(%s) = %+v, %v; want %+v", tc.raw, got, err, tc.want)
		}
	}
	if _, err := ParseUsage([]byte(`{"input_tokens":"x"}`)); err == nil {
		t.Error("bad usage parsed")
	}
	u := providers.Usage{Input: 1, CacheRead: 2, CacheWrite: 3, Output: 4, Reasoning: 5}
	enc := AppendUsage(nil, u)
	if string(enc) != `{"input_tokens":1,"cache_creation_input_tokens":3,"cache_read_input_tokens":2,"output_tokens":9,"output_tokens_details":{"thinking_tokens":5}}` {
		t.Errorf("AppendUsage(nil) = %s", enc)
	}
	if back, _ := ParseUsage(enc); back != u {
		t.Errorf("round trip %+v", back)
	}
	if got := AppendUsage([]byte(`"usage":`), u); string(got) != `"usage":`+string(enc) {
		t.Errorf("AppendUsage = %s", got)
	}
}

func TestFinishReasons(t *testing.T) {
	from := map[string]providers.FinishReason{
		"end_turn": providers.FinishStop, "stop_sequence": providers.FinishStop, "pause_turn": providers.FinishStop,
		"max_tokens": providers.FinishLength, "model_context_window_exceeded": providers.FinishLength,
		"tool_use": providers.FinishToolCalls, "refusal": providers.FinishContentFilter, "": providers.FinishStop, "new": providers.FinishStop,
	}
	for in, want := range from {
		if got := FinishReason(in); got != want {
			t.Errorf("FinishReason(%q) = %q, want %q", in, got, want)
		}
	}
	to := []struct {
		r    providers.FinishReason
		seq  string
		want string
	}{
		{providers.FinishStop, "", "end_turn"}, {providers.FinishStop, "END", "stop_sequence"}, {"", "", "end_turn"},
		{providers.FinishLength, "", "max_tokens"}, {providers.FinishToolCalls, "", "tool_use"}, {providers.FinishContentFilter, "", "refusal"},
	}
	for _, tc := range to {
		if got := StopReason(tc.r, tc.seq); got != tc.want {
			t.Errorf("StopReason(%q, %q) = %q, want %q", tc.r, tc.seq, got, tc.want)
		}
	}
}
