package openai

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/providers"
)

func ptr[T any](v T) *T { return &v }

func TestDecodeChatRequest(t *testing.T) {
	tests := []struct {
		name string
		body string
		want *providers.Request
	}{
		{
			name: "minimal",
			body: `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
			want: &providers.Request{Model: "gpt-4o", Messages: []providers.Message{
				{Role: providers.RoleUser, Content: []providers.Part{{Type: providers.PartText, Text: "hi"}}},
			}},
		},
		{
			name: "system and developer joined",
			body: `{"model":"m","messages":[
				{"role":"system","content":"be brief"},
				{"role":"user","content":"hi","name":"bob"},
				{"role":"developer","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`,
			want: &providers.Request{Model: "m", System: "be brief\n\na\n\nb", Messages: []providers.Message{
				{Role: providers.RoleUser, Name: "bob", Content: []providers.Part{{Type: providers.PartText, Text: "hi"}}},
			}},
		},
		{
			name: "images by URL and data URL",
			body: `{"model":"m","messages":[{"role":"user","content":[
				{"type":"text","text":"what is this"},
				{"type":"image_url","image_url":{"url":"https://x.test/cat.png","detail":"low"}},
				{"type":"image_url","image_url":{"url":"data:image/png;base64,aGVsbG8="}}]}]}`,
			want: &providers.Request{Model: "m", Messages: []providers.Message{{Role: providers.RoleUser, Content: []providers.Part{
				{Type: providers.PartText, Text: "what is this"},
				{Type: providers.PartImage, ImageURL: "https://x.test/cat.png"},
				{Type: providers.PartImage, MediaType: "image/png", Data: []byte("hello")},
			}}}},
		},
		{
			name: "tool loop",
			body: `{"model":"m","messages":[
				{"role":"user","content":"weather?"},
				{"role":"assistant","content":null,"tool_calls":[
					{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
					{"id":"call_2","type":"function","function":{"name":"get_time","arguments":{"tz":"CET"}}}]},
				{"role":"tool","tool_call_id":"call_1","content":"sunny"},
				{"role":"tool","tool_call_id":"call_2","content":[{"type":"text","text":"noon"}]}],
				"tools":[{"type":"function","function":{"name":"get_weather","description":"d","parameters":{"type":"object"}}},
					{"type":"function","function":{"name":"get_time"}}],
				"tool_choice":{"type":"function","function":{"name":"get_weather"}},
				"parallel_tool_calls":false}`,
			want: &providers.Request{Model: "m",
				Messages: []providers.Message{
					{Role: providers.RoleUser, Content: []providers.Part{{Type: providers.PartText, Text: "weather?"}}},
					{Role: providers.RoleAssistant, ToolCalls: []providers.ToolCall{
						{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`},
						{ID: "call_2", Name: "get_time", Arguments: `{"tz":"CET"}`},
					}},
					{Role: providers.RoleTool, ToolCallID: "call_1", Content: []providers.Part{{Type: providers.PartText, Text: "sunny"}}},
					{Role: providers.RoleTool, ToolCallID: "call_2", Content: []providers.Part{{Type: providers.PartText, Text: "noon"}}},
				},
				Tools: []providers.Tool{
					{Name: "get_weather", Description: "d", Parameters: json.RawMessage(`{"type":"object"}`)},
					{Name: "get_time"},
				},
				ToolChoice:        "get_weather",
				ParallelToolCalls: ptr(false),
			},
		},
		{
			name: "parameters",
			body: `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":10,"max_completion_tokens":20,
				"temperature":0,"top_p":0.5,"stop":"END","stream":true,"stream_options":{"include_usage":false},
				"reasoning_effort":"high","user":"u1","tool_choice":"required","n":1,"seed":3}`,
			want: &providers.Request{Model: "m", Messages: []providers.Message{
				{Role: providers.RoleUser, Content: []providers.Part{{Type: providers.PartText, Text: "x"}}},
			}, MaxTokens: ptr(int64(20)), Temperature: ptr(0.0), TopP: ptr(0.5), Stop: []string{"END"}, Stream: true,
				ReasoningEffort: "high", User: "u1", ToolChoice: "required"},
		},
		{
			name: "max_tokens alone, stop array, json schema",
			body: `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":10,"stop":["a","b"],
				"response_format":{"type":"json_schema","json_schema":{"name":"r","schema":{"type":"object"},"strict":true}}}`,
			want: &providers.Request{Model: "m", Messages: []providers.Message{
				{Role: providers.RoleUser, Content: []providers.Part{{Type: providers.PartText, Text: "x"}}},
			}, MaxTokens: ptr(int64(10)), Stop: []string{"a", "b"}, ResponseFormat: "json_schema",
				JSONSchema: json.RawMessage(`{"type":"object"}`)},
		},
		{
			name: "json object, empty content dropped, refusal part kept",
			body: `{"model":"m","messages":[{"role":"user","content":""},
				{"role":"assistant","content":[{"type":"refusal","refusal":"no"}]}],
				"response_format":{"type":"json_object"},"safety_identifier":"s1"}`,
			want: &providers.Request{Model: "m", Messages: []providers.Message{
				{Role: providers.RoleUser},
				{Role: providers.RoleAssistant, Content: []providers.Part{{Type: providers.PartText, Text: "no"}}},
			}, ResponseFormat: "json_object", User: "s1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeChatRequest([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestDecodeChatRequestErrors(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"not json", `{"model":`, "decoding chat request"},
		{"not an object", `[]`, "decoding chat request"},
		{"no messages", `{"model":"m"}`, "at least one message"},
		{"messages wrong type", `{"model":"m","messages":"hi"}`, "decoding chat request"},
		{"unknown role", `{"messages":[{"role":"wizard","content":"x"}]}`, `messages[0].role: unknown role "wizard"`},
		{"missing role", `{"messages":[{"content":"x"}]}`, "messages[0].role: required"},
		{"function role", `{"messages":[{"role":"function","content":"x"}]}`, "unknown role"},
		{"content number", `{"messages":[{"role":"user","content":3}]}`, "messages[0].content: must be a string"},
		{"part without type", `{"messages":[{"role":"user","content":[{"text":"x"}]}]}`, "messages[0].content[0].type: required"},
		{"text part without text", `{"messages":[{"role":"user","content":[{"type":"text"}]}]}`, "content[0].text: required"},
		{"audio part", `{"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}]}`, `part type "input_audio" is not supported`},
		{"image in system", `{"messages":[{"role":"system","content":[{"type":"image_url","image_url":{"url":"https://x"}}]}]}`, "not supported in system messages"},
		{"image in tool", `{"messages":[{"role":"tool","tool_call_id":"c","content":[{"type":"image_url","image_url":{"url":"https://x"}}]}]}`, "not supported in tool messages"},
		{"ftp image", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"ftp://x"}}]}]}`, "http(s) URL or a data URL"},
		{"bad data URL", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png,abc"}}]}]}`, "data:<media type>;base64"},
		{"bad base64", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,!!!"}}]}]}`, "not valid base64"},
		{"tool without id", `{"messages":[{"role":"tool","content":"x"}]}`, "tool_call_id: required"},
		{"tool call without name", `{"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"arguments":"{}"}}]}]}`, "tool_calls[0].function.name: required"},
		{"custom tool call", `{"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"custom","function":{"name":"x"}}]}]}`, `unsupported type "custom"`},
		{"custom tool", `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"custom","custom":{"name":"x"}}]}`, `tools[0].type: unsupported tool type "custom"`},
		{"tool without name", `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{}}]}`, "tools[0].function.name: required"},
		{"bad tool_choice", `{"messages":[{"role":"user","content":"x"}],"tool_choice":"sometimes"}`, `tool_choice: unknown value "sometimes"`},
		{"allowed_tools choice", `{"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"allowed_tools"}}`, "tool_choice.type: unsupported"},
		{"tool_choice without name", `{"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"function","function":{}}}`, "tool_choice.function.name: required"},
		{"stop number", `{"messages":[{"role":"user","content":"x"}],"stop":3}`, "stop must be a string or an array"},
		{"stop mixed array", `{"messages":[{"role":"user","content":"x"}],"stop":["a",1]}`, "stop must be a string or an array"},
		{"temperature string", `{"messages":[{"role":"user","content":"x"}],"temperature":"hot"}`, "temperature"},
		{"bad response format", `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"yaml"}}`, `response_format.type: unsupported type "yaml"`},
		{"arguments number", `{"messages":[{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f","arguments":3}}]}]}`, "arguments must be a JSON string"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeChatRequest([]byte(tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestEncodeChatRequest(t *testing.T) {
	req := &providers.Request{
		Model:  "gpt-4o",
		System: "be brief",
		Messages: []providers.Message{
			{Role: providers.RoleUser, Content: []providers.Part{{Type: providers.PartText, Text: "hi"}}},
			{Role: providers.RoleUser, Content: []providers.Part{
				{Type: providers.PartText, Text: "look"},
				{Type: providers.PartImage, MediaType: "image/png", Data: []byte("hello")},
				{Type: providers.PartImage, ImageURL: "https://x.test/a.png"},
			}},
			{Role: providers.RoleAssistant, ToolCalls: []providers.ToolCall{{ID: "c1", Name: "f", Arguments: ""}}},
			{Role: providers.RoleTool, ToolCallID: "c1", Content: []providers.Part{
				{Type: providers.PartText, Text: "result"},
				{Type: providers.PartImage, ImageURL: "https://x.test/chart.png"},
			}},
			{Role: providers.RoleAssistant, Content: []providers.Part{{Type: providers.PartText, Text: "done"}}},
		},
		Tools:          []providers.Tool{{Name: "f", Description: "does f", Parameters: json.RawMessage(`{"type":"object"}`)}},
		ToolChoice:     "f",
		MaxTokens:      ptr(int64(100)),
		Temperature:    ptr(0.0),
		Stop:           []string{"END"},
		Stream:         true,
		ResponseFormat: "json_schema",
		JSONSchema:     json.RawMessage(`{"type":"object"}`),
	}
	body, err := EncodeChatRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"gpt-4o","messages":[` +
		`{"role":"system","content":"be brief"},` +
		`{"role":"user","content":"hi"},` +
		`{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,aGVsbG8="}},{"type":"image_url","image_url":{"url":"https://x.test/a.png"}}]},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
		`{"role":"tool","content":"result","tool_call_id":"c1"},` +
		`{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x.test/chart.png"}}]},` +
		`{"role":"assistant","content":"done"}],` +
		`"tools":[{"type":"function","function":{"name":"f","description":"does f","parameters":{"type":"object"}}}],` +
		`"tool_choice":{"type":"function","function":{"name":"f"}},` +
		`"max_tokens":100,"temperature":0,"stop":["END"],"stream":true,"stream_options":{"include_usage":true},` +
		`"response_format":{"type":"json_schema","json_schema":{"name":"response","schema":{"type":"object"}}}}`
	if string(body) != want {
		t.Fatalf("body\n%s\nwant\n%s", body, want)
	}

	// What the encoder writes, the decoder reads back (images of tool results moved).
	back, err := DecodeChatRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	if back.System != req.System || back.ToolChoice != "f" || *back.MaxTokens != 100 || len(back.Messages) != 6 {
		t.Fatalf("round trip: %+v", back)
	}

	maxCompletion, err := encodeChatRequest(&providers.Request{Model: "o3", MaxTokens: ptr(int64(5)), Messages: req.Messages[:1]}, true)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(maxCompletion, []byte(`"max_completion_tokens":5`)) || bytes.Contains(maxCompletion, []byte(`"max_tokens"`)) {
		t.Fatalf("max_completion_tokens not used: %s", maxCompletion)
	}
}

func TestEncodeChatRequestErrors(t *testing.T) {
	tests := []struct {
		name string
		req  providers.Request
	}{
		{"unknown role", providers.Request{Messages: []providers.Message{{Role: "system"}}}},
		{"image in assistant", providers.Request{Messages: []providers.Message{{Role: providers.RoleAssistant,
			Content: []providers.Part{{Type: providers.PartText, Text: "a"}, {Type: providers.PartImage, ImageURL: "https://x"}}}}}},
		{"empty image", providers.Request{Messages: []providers.Message{{Role: providers.RoleUser,
			Content: []providers.Part{{Type: providers.PartImage}, {Type: providers.PartText, Text: "a"}}}}}},
		{"bad format", providers.Request{ResponseFormat: "yaml"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := EncodeChatRequest(&tc.req); err == nil {
				t.Fatal("want an error")
			}
		})
	}
}

func TestDecodeChatResponse(t *testing.T) {
	tests := []struct {
		name string
		body string
		want *providers.Response
	}{
		{
			name: "text",
			body: `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,
				"message":{"role":"assistant","content":"Hello!","refusal":null},"logprobs":null,"finish_reason":"stop"}],
				"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,
				"prompt_tokens_details":{"cached_tokens":4,"audio_tokens":0},
				"completion_tokens_details":{"reasoning_tokens":2}}}`,
			want: &providers.Response{ID: "chatcmpl-1", Model: "gpt-4o", Text: "Hello!", FinishReason: providers.FinishStop,
				Usage: providers.Usage{Input: 6, CacheRead: 4, Output: 3, Reasoning: 2}},
		},
		{
			name: "tool calls with stop",
			body: `{"id":"x","model":"llama","choices":[{"index":0,"message":{"role":"assistant","content":null,
				"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}},
				{"id":"c2","type":"function","function":{"name":"g","arguments":"{}"}}]},"finish_reason":"stop"}]}`,
			want: &providers.Response{ID: "x", Model: "llama", FinishReason: providers.FinishToolCalls, ToolCalls: []providers.ToolCall{
				{ID: "c1", Name: "f", Arguments: `{"a":1}`}, {ID: "c2", Name: "g", Arguments: "{}"}}},
		},
		{
			name: "refusal, length, content parts",
			body: `{"choices":[{"message":{"content":[{"type":"thinking","thinking":"hm"},{"type":"text","text":"ok"}]},"finish_reason":"length"}]}`,
			want: &providers.Response{Text: "ok", FinishReason: providers.FinishLength},
		},
		{
			name: "refusal",
			body: `{"choices":[{"message":{"content":null,"refusal":"I can't"},"finish_reason":"content_filter"}]}`,
			want: &providers.Response{Text: "I can't", FinishReason: providers.FinishContentFilter},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeChatResponse([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
	for _, bad := range []string{`{"choices":[]}`, `nope`, `{"choices":[{"message":{"content":5}}]}`} {
		if _, err := DecodeChatResponse([]byte(bad)); err == nil {
			t.Errorf("%s: want an error", bad)
		}
	}
}

func TestEncodeChatResponse(t *testing.T) {
	usage := providers.Usage{Input: 6, CacheRead: 4, CacheWrite: 1, Output: 3, Reasoning: 2}
	tests := []struct {
		name string
		resp providers.Response
		want string
	}{
		{
			name: "text",
			resp: providers.Response{ID: "ignored", Model: "m", Text: "hi", FinishReason: providers.FinishStop, Usage: usage},
			want: `{"id":"gen_1","object":"chat.completion","created":7,"model":"m","choices":[{"index":0,` +
				`"message":{"role":"assistant","content":"hi","refusal":null},"finish_reason":"stop","logprobs":null}],` +
				`"usage":{"prompt_tokens":11,"completion_tokens":5,"total_tokens":16,` +
				`"prompt_tokens_details":{"cached_tokens":4,"cache_write_tokens":1},"completion_tokens_details":{"reasoning_tokens":2}}}`,
		},
		{
			name: "tool calls only",
			resp: providers.Response{Model: "m", ToolCalls: []providers.ToolCall{{ID: "c", Name: "f", Arguments: `{"x":1}`}}},
			want: `{"id":"gen_1","object":"chat.completion","created":7,"model":"m","choices":[{"index":0,` +
				`"message":{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},` +
				`"finish_reason":"tool_calls","logprobs":null}],` +
				`"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0,` +
				`"prompt_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := EncodeChatResponse(&tc.resp, "gen_1", 7)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
			back, err := DecodeChatResponse(got)
			if err != nil {
				t.Fatal(err)
			}
			if back.Usage != tc.resp.Usage || back.Text != tc.resp.Text || len(back.ToolCalls) != len(tc.resp.ToolCalls) {
				t.Fatalf("round trip %+v", back)
			}
		})
	}
}

func TestParseChatUsage(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want providers.Usage
		err  bool
	}{
		{name: "empty", in: ``},
		{name: "null", in: `null`},
		{name: "plain", in: `{"prompt_tokens":10,"completion_tokens":4,"total_tokens":14}`, want: providers.Usage{Input: 10, Output: 4}},
		{name: "all details", in: `{"prompt_tokens":100,"completion_tokens":50,"total_tokens":150,
			"prompt_tokens_details":{"cached_tokens":30,"cache_write_tokens":20,"audio_tokens":0},
			"completion_tokens_details":{"reasoning_tokens":40,"accepted_prediction_tokens":0}}`,
			want: providers.Usage{Input: 50, CacheRead: 30, CacheWrite: 20, Output: 10, Reasoning: 40}},
		{name: "null fields", in: `{"prompt_tokens":null,"completion_tokens":3,"prompt_tokens_details":null,"completion_tokens_details":{"reasoning_tokens":null}}`,
			want: providers.Usage{Output: 3}},
		{name: "floats", in: `{"prompt_tokens":12.0,"completion_tokens":3e0}`, want: providers.Usage{Input: 12, Output: 3}},
		{name: "negative clamped", in: `{"prompt_tokens":-5,"completion_tokens":-1,"prompt_tokens_details":{"cached_tokens":-3}}`},
		{name: "details larger than totals", in: `{"prompt_tokens":5,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":9},"completion_tokens_details":{"reasoning_tokens":4}}`,
			want: providers.Usage{CacheRead: 9, Reasoning: 4}},
		{name: "deepseek cache hit", in: `{"prompt_tokens":100,"completion_tokens":1,"prompt_cache_hit_tokens":60,"prompt_cache_miss_tokens":40}`,
			want: providers.Usage{Input: 40, CacheRead: 60, Output: 1}},
		{name: "not an object", in: `[1]`, err: true},
		{name: "string count", in: `{"prompt_tokens":"12"}`, err: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseChatUsage([]byte(tc.in))
			if (err != nil) != tc.err {
				t.Fatalf("err = %v", err)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestChunkEncoder(t *testing.T) {
	const head = `{"id":"gen_1","object":"chat.completion.chunk","created":7,"model":"m",`
	enc := NewChunkEncoder("gen_1", "m", 7)
	steps := []struct {
		ev   providers.Event
		want string
	}{
		{providers.Event{Type: providers.EventText, Text: ""}, ""},
		{providers.Event{Type: providers.EventText, Text: "He said \"hi\"\n"},
			head + `"choices":[{"index":0,"delta":{"role":"assistant","content":"He said \"hi\"\n"},"logprobs":null,"finish_reason":null}]}`},
		{providers.Event{Type: providers.EventText, Text: "ok"},
			head + `"choices":[{"index":0,"delta":{"content":"ok"},"logprobs":null,"finish_reason":null}]}`},
		{providers.Event{Type: providers.EventToolCall, Index: 0, ToolCall: providers.ToolCall{ID: "c1", Name: "f", Arguments: ""}},
			head + `"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":""}}]},"logprobs":null,"finish_reason":null}]}`},
		{providers.Event{Type: providers.EventToolCall, Index: 0, ToolCall: providers.ToolCall{ID: "c1", Name: "f", Arguments: `{"a"`}},
			head + `"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\""}}]},"logprobs":null,"finish_reason":null}]}`},
		{providers.Event{Type: providers.EventToolCall, Index: 1, ToolCall: providers.ToolCall{ID: "c2", Name: "g", Arguments: "{}"}},
			head + `"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"c2","type":"function","function":{"name":"g","arguments":"{}"}}]},"logprobs":null,"finish_reason":null}]}`},
		{providers.Event{Type: providers.EventFinish, FinishReason: providers.FinishToolCalls},
			head + `"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]}`},
		{providers.Event{Type: providers.EventUsage, Usage: providers.Usage{Input: 1, CacheRead: 2, CacheWrite: 3, Output: 4, Reasoning: 5}},
			head + `"choices":[],"usage":{"prompt_tokens":6,"completion_tokens":9,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":2,"cache_write_tokens":3},"completion_tokens_details":{"reasoning_tokens":5}}}`},
		{providers.Event{Type: 99}, ""},
	}
	for round := range 2 {
		if round == 1 {
			// What Release does before pooling the encoder: the next stream's must encode as
			// a new one, whatever this one sent (the role, the tool calls' ids and names).
			enc.reset()
			enc.init("gen_1", "m", 7)
		}
		for i, st := range steps {
			got, ok := enc.Encode(st.ev)
			if ok != (st.want != "") {
				t.Fatalf("round %d, step %d: ok = %v", round, i, ok)
			}
			if string(got) != st.want {
				t.Fatalf("round %d, step %d:\ngot  %s\nwant %s", round, i, got, st.want)
			}
			if ok && !json.Valid(got) {
				t.Fatalf("round %d, step %d: invalid JSON", round, i)
			}
			if ok && bytes.Contains(got, []byte(`"error"`)) {
				t.Fatalf("round %d, step %d: chunk has an error key", round, i)
			}
		}
	}

	// An empty answer still tells the role, in the finish chunk; a reused encoder writes
	// the new id, model and time.
	want := `{"id":"a\"b","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant"},"logprobs":null,"finish_reason":"stop"}]}`
	enc.reset()
	for _, e := range []*ChunkEncoder{NewChunkEncoder("a\"b", "m", 1), enc.init("a\"b", "m", 1)} {
		if got, _ := e.Encode(providers.Event{Type: providers.EventFinish}); string(got) != want {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	}
}

func TestChunkEncoderAllocations(t *testing.T) {
	enc := NewChunkEncoder("gen_1", "m", 7)
	enc.Encode(providers.Event{Type: providers.EventText, Text: "warm up the buffer"})
	allocs := testing.AllocsPerRun(100, func() {
		enc.Encode(providers.Event{Type: providers.EventText, Text: "a token"})
	})
	if allocs != 0 {
		t.Fatalf("%.0f allocations per chunk", allocs)
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "q\"uote\\", "\n\r\t\x00\x1f", "é🙂", "\xff\xfe", "\u2028\u2029", "<&>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := rawjson.AppendString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%q: %v", got, err)
		}
		want := strings.ToValidUTF8(s, "\uFFFD")
		if !utf8.ValidString(s) {
			// encoding/json replaces each invalid byte; compare with it.
			b, _ := json.Marshal(s)
			_ = json.Unmarshal(b, &want)
		}
		if back != want {
			t.Fatalf("round trip of %q gave %q", s, back)
		}
	})
}

func FuzzDecodeChatRequest(f *testing.F) {
	seeds := []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"system","content":[{"type":"text","text":"s"}]},{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,aGk="}}]}]}`,
		`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{"a":1}}}]},{"role":"tool","tool_call_id":"c","content":"r"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"auto"}`,
		`{"messages":[{"role":"user","content":"x"}],"stop":["a"],"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{}}},"max_completion_tokens":3}`,
		`{"messages":[]}`, `null`, `{`, `{"messages":[{"role":"user","content":[{"type":"text"}]}]}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeChatRequest(body)
		if err != nil {
			return
		}
		// Whatever decodes must encode, and decode again to the same conversation.
		out, err := EncodeChatRequest(req)
		if err != nil {
			t.Fatalf("re-encoding %s: %v", body, err)
		}
		again, err := DecodeChatRequest(out)
		if err != nil && len(req.Messages) == 0 && req.System == "" {
			// Only empty system messages: nothing is left to send, and the upstream answers
			// the empty conversation with its own 400.
			return
		}
		if err != nil {
			t.Fatalf("decoding the re-encoded %s: %v", out, err)
		}
		if again.System != req.System || len(again.Tools) != len(req.Tools) || again.ToolChoice != req.ToolChoice {
			t.Fatalf("round trip changed the request:\n%+v\n%+v", req, again)
		}
	})
}

func TestReasoning(t *testing.T) {
	t.Run("encode drops reasoning parts and maps the budget", func(t *testing.T) {
		req := &providers.Request{Model: "m", ThinkingBudget: 5000, Messages: []providers.Message{
			{Role: providers.RoleUser, Content: []providers.Part{{Type: providers.PartText, Text: "q"}}},
			{Role: providers.RoleAssistant, Content: []providers.Part{
				{Type: providers.PartReasoning, Text: "thinking...", Signature: "sig"},
				{Type: providers.PartText, Text: "answer"},
			}},
		}}
		body, err := EncodeChatRequest(req)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","content":"answer"}],"reasoning_effort":"medium"}`
		if string(body) != want {
			t.Fatalf("body %s", body)
		}
		if len(req.Messages[1].Content) != 2 {
			t.Fatal("the caller's parts were modified")
		}
		req.ReasoningEffort = "minimal"
		body, _ = EncodeChatRequest(req)
		if !bytes.Contains(body, []byte(`"reasoning_effort":"minimal"`)) {
			t.Fatalf("explicit effort lost: %s", body)
		}
	})
	t.Run("budgets", func(t *testing.T) {
		for budget, want := range map[int64]string{1024: "low", 2048: "low", 2049: "medium", 8192: "medium", 24576: "high"} {
			if got := effortForBudget(budget); got != want {
				t.Errorf("%d: %s, want %s", budget, got, want)
			}
		}
	})
	t.Run("decode reasoning_content", func(t *testing.T) {
		resp, err := DecodeChatResponse([]byte(`{"choices":[{"message":{"content":"4","reasoning_content":"2+2"},"finish_reason":"stop"}]}`))
		if err != nil || resp.Reasoning != "2+2" || resp.Text != "4" {
			t.Fatalf("%+v %v", resp, err)
		}
		resp, err = DecodeChatResponse([]byte(`{"choices":[{"message":{"content":"4","reasoning":{"summary":"x"}},"finish_reason":"stop"}]}`))
		if err != nil || resp.Reasoning != "" {
			t.Fatalf("%+v %v", resp, err)
		}
	})
	t.Run("chunk encoder drops reasoning", func(t *testing.T) {
		enc := NewChunkEncoder("id", "m", 1)
		if _, ok := enc.Encode(providers.Event{Type: providers.EventReasoning, Text: "hmm"}); ok {
			t.Fatal("reasoning made a chunk")
		}
		got, _ := enc.Encode(providers.Event{Type: providers.EventText, Text: "a"})
		if !bytes.Contains(got, []byte(`"role":"assistant"`)) {
			t.Fatalf("the first content chunk lost its role: %s", got)
		}
	})
	t.Run("stream reasoning deltas", func(t *testing.T) {
		body := `data: {"choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"let me think"}}]}` + "\n\n" +
			`data: {"choices":[{"index":0,"delta":{"reasoning":"more","content":"42"}}]}` + "\n\n" +
			`data: {"choices":[{"index":0,"delta":{"reasoning":null,"content":"!"},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"
		events, err := collect(t, bodyStream(body))
		if err != nil {
			t.Fatal(err)
		}
		want := []providers.Event{
			{Type: providers.EventReasoning, Text: "let me think"},
			{Type: providers.EventReasoning, Text: "more"},
			{Type: providers.EventText, Text: "42"},
			{Type: providers.EventText, Text: "!"},
			{Type: providers.EventFinish, FinishReason: providers.FinishStop},
		}
		if !reflect.DeepEqual(events, want) {
			t.Fatalf("events %+v", events)
		}
	})
}

// FuzzChatUsageScan: ParseChatUsage, through its fast decoder or not, reads what
// json.Unmarshal reads, keys in any case included.
func FuzzChatUsageScan(f *testing.F) {
	for _, seed := range []string{
		`{"prompt_tokens":12,"completion_tokens":10,"total_tokens":22}`,
		`{"prompt_tokens":12.0,"completion_tokens":null,"prompt_tokens_details":{"cached_tokens":4,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":3}}`,
		`{"prompt_tokens":100,"prompt_cache_hit_tokens":60,"prompt_cache_miss_tokens":40,"completion_tokens":5}`,
		`{"prompt_tokens_details":{"cached_tokens":1},"prompt_tokens_details":{"cache_write_tokens":2}}`,
		`{"prompt_tokens_details":{"cached_tokens":1},"prompt_tokens_details":null}`,
		`{"prompt_tokens":"12"}`,
		`{"prompt_tokens_details":[1]}`,
		`{"x":{"prompt_tokens":9},"completion_tokens":1e3}`,
		`[]`, `5`, `{}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		var want ChatUsage
		wantErr := json.Unmarshal(data, &want)
		got, gotErr := ParseChatUsage(data)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("%s: json.Unmarshal error %v, ParseChatUsage error %v", data, wantErr, gotErr)
		}
		if wantErr == nil && usageFromChat(&want) != got {
			t.Fatalf("%s: json.Unmarshal reads %+v, ParseChatUsage %+v", data, usageFromChat(&want), got)
		}
	})
}
