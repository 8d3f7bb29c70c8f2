package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/internal/wiretest"
	"github.com/modelgateway/caddy-modelgateway/providers"
)

// encodeRequestSeeds, encodeResponseSeeds and encodeContentSeeds add to the decoders'
// seeds what matters more when writing: HTML
// characters and U+2028 in strings and in raw values, whitespace inside raw values (which
// json.Marshal compacts), floats in both notations, the extreme integers.
var encodeRequestSeeds = []string{
	`{"model":"gpt-4o","messages":[{"role":"system","content":"Use <b>bold</b> & \u2028 lines\u2029 \u0000 \"q\" \\ é 日本 😀"},
		{"role":"user","content":[ {"type":"text","text":"a<b>&c"} , {"type":"image_url","image_url":{"url":"https://x.test/?a=1&b=<2>","detail":"high"}} ],"name":"<n>"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c&1","type":"function","function":{"name":"f<","arguments":"{\"x\":\"<&>\u2028\"}"}},
		{"id":"c2","type":"function","function":{"name":"g","arguments":{ "y" : [ 1 , 2.50 , "<\u2029>" ] }}}]},
		{"role":"tool","tool_call_id":"c&1","content":" { \"t\" : \"<>\" } "}],
		"tools":[{"type":"function","function":{"name":"f<","description":"d&d","parameters":{ "type" : "object", "description":"<html>\u2028" },"strict":false}}],
		"tool_choice":{ "type" : "function" , "function" : { "name" : "f<" } },
		"parallel_tool_calls":false,"max_tokens":9223372036854775807,"max_completion_tokens":-9223372036854775808,
		"temperature":1e-7,"top_p":0.1,"stop":["<stop>","\u2028",""],"stream":true,"stream_options":{"include_usage":false},
		"response_format":{"type":"json_schema","json_schema":{"name":"n&","description":"<d>","schema":{"a":[1e400000000000000000000000000000000000000, -0.0, 1E+2]},"strict":false}},
		"reasoning_effort":"low","user":"<u>","safety_identifier":"s&"}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":1e21,"top_p":123456789.125}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":-0,"top_p":5e-324,"max_tokens":0}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":0.000001,"top_p":1.7976931348623157e308}`,
	`{"model":"m","messages":[{"role":"user","content":"x","tool_calls":[]}],"tools":[],"stop":[],"tool_choice":"required"}`,
	`{"model":"m","messages":[{"role":"user","content":""}],"response_format":{"type":"json_schema","json_schema":{"name":"","schema":null}}}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"},"stream_options":{}}`,
	`{"model":"m","messages":[{"role":"assistant","content":[{"type":"refusal","refusal":""},{"type":"text","text":""}]}]}`,
	`{"messages":null}`,
	`{"messages":[{}]}`,
}

var encodeResponseSeeds = []string{
	`{"id":"chatcmpl-<1>","object":"chat.completion","created":-9223372036854775808,"model":"m&",
		"choices":[{"index":9223372036854775807,"message":{"role":"assistant","content":" \"<a> & \u2028\" ","refusal":"no <way>",
		"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":\"<>\"}"}}],
		"reasoning_content":"think <&>","reasoning":[ { "type" : "reasoning.text" , "text" : "\u2029" } ]},
		"finish_reason":"tool_calls","logprobs":{ "content" : [ { "token" : "<" , "logprob" : -1.5e-10 } ] }}],
		"usage":{"prompt_tokens":1e3,"completion_tokens":-5,"total_tokens":9223372036854775807,
		"prompt_tokens_details":{"cached_tokens":null,"cache_write_tokens":3},
		"completion_tokens_details":{"reasoning_tokens":2.5},"prompt_cache_hit_tokens":0},"system_fingerprint":""}`,
	`{"id":"","choices":[{"message":{"content":[ {"type":"text","text":"a"} ]},"finish_reason":""}],"usage":{}}`,
	`{"choices":null,"usage":{"prompt_tokens_details":{},"completion_tokens_details":{}}}`,
	`{"choices":[{"message":{"tool_calls":[],"reasoning_content":null,"reasoning":""}}]}`,
}

var encodeContentSeeds = []string{
	`[{"type":"text","text":"look at <this> & that\u2028"},{"type":"image_url","image_url":{"url":"data:image/png;base64,aGVsbG8=","detail":"low"}},
		{"type":"image_url","image_url":{"url":"https://x.test/a.png"}}]`,
	`[{"type":"refusal","refusal":"I can't"},{"type":"text","text":""},{"type":"image_url","image_url":null},{"type":"","text":null}]`,
	`[{"type":"text","text":"é 日本 😀 \u0001 \ud800"},{}]`,
	`[{"type":"image_url","image_url":{"url":"","detail":""}}]`,
	`[]`,
	`null`,
}

// TestFastEncodeSeedsDecode keeps the encoders' own seeds useful: a seed that json.Unmarshal
// refuses tests nothing.
func TestFastEncodeSeedsDecode(t *testing.T) {
	decode := func(seeds []string, v func() any) {
		for _, s := range seeds {
			if err := json.Unmarshal([]byte(s), v()); err != nil {
				t.Errorf("%v: %s", err, s)
			}
		}
	}
	decode(encodeRequestSeeds, func() any { return new(ChatRequest) })
	decode(encodeResponseSeeds, func() any { return new(ChatResponse) })
	decode(encodeContentSeeds, func() any { return new([]ContentPart) })
}

// checkFastEncode compares fast with json.Marshal on v: the same bytes, appended after
// what the buffer held, or a refusal where json.Marshal fails. It reports whether
// json.Marshal succeeded.
func checkFastEncode[T any](t *testing.T, v *T, fast func([]byte, *T) ([]byte, bool)) bool {
	t.Helper()
	want, err := json.Marshal(v)
	const prefix = "prefix"
	got, ok := fast([]byte(prefix), v)
	if err != nil {
		if ok {
			t.Fatalf("fast path wrote %s, json.Marshal fails: %v", got, err)
		}
		return false
	}
	if !ok {
		t.Fatalf("fast path refused what json.Marshal writes as %s", want)
	}
	if !bytes.HasPrefix(got, []byte(prefix)) || !bytes.Equal(got[len(prefix):], want) {
		t.Fatalf("fast path wrote\n%s\njson.Marshal\n%s%s", got, prefix, want)
	}
	return true
}

// appendContentPartsPtr adapts appendContentParts to checkFastEncode.
func appendContentPartsPtr(b []byte, parts *[]ContentPart) ([]byte, bool) {
	return appendContentParts(b, *parts)
}

// fuzzFastEncode decodes data into a T with json.Unmarshal, and, when that succeeds,
// checks fast against json.Marshal on it.
func fuzzFastEncode[T any](f *testing.F, seeds [][]string, fast func([]byte, *T) ([]byte, bool)) {
	for _, list := range seeds {
		for _, s := range list {
			f.Add([]byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v T
		if json.Unmarshal(data, &v) != nil {
			return
		}
		// Decoded values always marshal: a RawMessage holds valid JSON, a float is finite.
		if !checkFastEncode(t, &v, fast) {
			t.Fatalf("json.Marshal fails on what json.Unmarshal decoded from %q", data)
		}
	})
}

func FuzzFastEncodeChatRequest(f *testing.F) {
	fuzzFastEncode(f, [][]string{encodeRequestSeeds, chatRequestSeeds, chatRequestEdges}, appendChatRequest)
}

func FuzzFastEncodeChatResponse(f *testing.F) {
	fuzzFastEncode(f, [][]string{encodeResponseSeeds, chatResponseSeeds, chatResponseEdges}, appendChatResponse)
}

func FuzzFastEncodeContentParts(f *testing.F) {
	fuzzFastEncode(f, [][]string{encodeContentSeeds}, appendContentPartsPtr)
}

// FuzzFastEncodeStrings reaches what json.Unmarshal never produces: strings with invalid
// UTF-8, and raw values that are not JSON (or JSON with whitespace and escapes anywhere).
// s goes into every string field of a fully set value, then into each raw field in turn.
func FuzzFastEncodeStrings(f *testing.F) {
	for _, s := range []string{"", "x", "<a&b>", "\u2028\u2029", "\xff\xfe", "a\x00\x1f\x7f", `"\`, "é😀\xed\xa0\x80",
		`{"a" : [ 1 , "<\u2028>" ] }`, ` null `, `[`, `"\ud800"`, `1e400`, `{"a":1}x`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := jsonString(s), mustMarshal(t, s); !bytes.Equal(got, want) {
			t.Fatalf("jsonString(%q) = %s, json.Marshal %s", s, got, want)
		}
		var choice struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		choice.Type, choice.Function.Name = "function", s
		if got, want := appendNamedToolChoice(nil, s), mustMarshal(t, choice); !bytes.Equal(got, want) {
			t.Fatalf("appendNamedToolChoice(%q) = %s, json.Marshal %s", s, got, want)
		}
		checkEveryValue(t, s)
	})
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkEveryValue fills every field of the three encoded types with s (strings) or with a
// valid raw value, then each raw field with s in turn, and compares with json.Marshal.
func checkEveryValue(t *testing.T, s string) {
	t.Helper()
	check := func(v reflect.Value) {
		t.Helper()
		switch v := v.Addr().Interface().(type) {
		case *ChatRequest:
			checkFastEncode(t, v, appendChatRequest)
		case *ChatResponse:
			checkFastEncode(t, v, appendChatResponse)
		case *[]ContentPart:
			checkFastEncode(t, v, appendContentPartsPtr)
		}
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[ChatRequest](), reflect.TypeFor[ChatResponse](), reflect.TypeFor[[]ContentPart]()} {
		v := reflect.New(typ).Elem()
		wiretest.Fill(v, s, nil)
		check(v)
		for i := 0; ; i++ {
			v := reflect.New(typ).Elem()
			n := 0
			wiretest.Fill(v, "v", func() []byte {
				n++
				if n == i+1 {
					return []byte(s)
				}
				return []byte(`{"k": "v"}`)
			})
			if n <= i {
				break
			}
			check(v)
		}
	}
}

// TestFastEncodeEveryField keeps the encoders complete: with every field set, json.Marshal
// writes every key, and the fast path must write the same.
func TestFastEncodeEveryField(t *testing.T) {
	checkEveryValue(t, "<é>")
}

// TestFastEncodeValues compares with json.Marshal on values built in Go, as the adapter
// builds them: zero values, nil and empty slices, empty raw values, pointers to zero values,
// and the values json.Marshal refuses.
func TestFastEncodeValues(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	emptyRaw := json.RawMessage{}
	tests := []struct {
		name  string
		value any  // *ChatRequest, *ChatResponse or *[]ContentPart
		fails bool // json.Marshal fails, so must the fast path
	}{
		{name: "zero request", value: &ChatRequest{}},
		{name: "zero response", value: &ChatResponse{}},
		{name: "nil parts", value: new([]ContentPart)},
		{name: "empty parts", value: &[]ContentPart{}},
		{name: "zero part", value: &[]ContentPart{{}}},
		{name: "empty slices", value: &ChatRequest{
			Messages: []ChatMessage{}, Tools: []ChatTool{}, Stop: StopList{}, ToolChoice: emptyRaw,
		}},
		{name: "empty response slices", value: &ChatResponse{Choices: []ChatChoice{}}},
		{name: "pointers to zero values", value: &ChatRequest{
			Messages:            []ChatMessage{{Role: "user", Content: json.RawMessage(`""`), ToolCalls: []ChatToolCall{{}}}},
			ParallelToolCalls:   ptr(false),
			MaxTokens:           ptr(int64(0)),
			MaxCompletionTokens: ptr(int64(0)),
			Temperature:         ptr(0.0),
			TopP:                ptr(math.Copysign(0, -1)),
			Stop:                StopList{""},
			StreamOptions:       &StreamOptions{},
			ResponseFormat:      &ResponseFormat{JSONSchema: &JSONSchema{Schema: emptyRaw, Strict: ptr(false)}},
			Tools:               []ChatTool{{Function: ChatFunction{Parameters: emptyRaw, Strict: ptr(false)}}},
		}},
		{name: "response pointers to zero values", value: &ChatResponse{
			Choices: []ChatChoice{{
				Message:      ChatResponseMessage{Content: json.RawMessage(`null`), Refusal: ptr(""), ReasoningContent: emptyRaw, Reasoning: emptyRaw},
				FinishReason: ptr(""),
			}},
			Usage:             &ChatUsage{PromptTokensDetails: &PromptTokensDetails{}, CompletionTokensDetails: &CompletionTokensDetails{}, PromptCacheHitTokens: ptr(TokenCount(0))},
			SystemFingerprint: ptr(""),
		}},
		{name: "nil message content is null", value: &ChatRequest{Messages: []ChatMessage{{Role: "assistant"}}}},
		{name: "request as the adapter writes it", value: &ChatRequest{
			Model: "gpt-4o",
			Messages: []ChatMessage{
				{Role: "system", Content: jsonString("Be <brief> & kind\u2028")},
				{Role: "user", Name: "bob", Content: json.RawMessage(`[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:image/png;base64,aGVsbG8="}}]`)},
				{Role: "assistant", ToolCalls: []ChatToolCall{{ID: "call_1", Type: "function", Function: ChatFunctionCall{Name: "f", Arguments: `{"a":"<b>"}`}}}},
				{Role: "tool", ToolCallID: "call_1", Content: jsonString("42")},
			},
			Tools:          []ChatTool{{Type: "function", Function: ChatFunction{Name: "f", Description: "d", Parameters: json.RawMessage("{\n  \"type\": \"object\"\n}")}}},
			ToolChoice:     appendNamedToolChoice(nil, "f"),
			MaxTokens:      ptr(int64(1024)),
			Temperature:    ptr(0.7),
			TopP:           ptr(1e-7),
			Stop:           StopList{"\n\n", "END"},
			Stream:         true,
			StreamOptions:  &StreamOptions{IncludeUsage: true},
			ResponseFormat: &ResponseFormat{Type: "json_schema", JSONSchema: &JSONSchema{Name: "response", Schema: json.RawMessage(`{"type":"object"}`)}},
			User:           "u",
		}},
		{name: "large values", value: &ChatResponse{
			Created: math.MinInt64,
			Choices: []ChatChoice{{Index: math.MaxInt, Logprobs: json.RawMessage(`{"x":[1e-7,0.1,12345678901234567890]}`)}},
			Usage:   &ChatUsage{PromptTokens: math.MaxInt64, CompletionTokens: -1, TotalTokens: math.MinInt64},
		}},
		{name: "floats", value: &ChatRequest{Temperature: ptr(1e21), TopP: ptr(1e20)}},
		{name: "tiny floats", value: &ChatRequest{Temperature: ptr(-1e-7), TopP: ptr(5e-324)}},
		{name: "invalid UTF-8", value: &ChatRequest{Model: "a\xffb\xc3", Messages: []ChatMessage{{Role: "\xed\xa0\x80", Content: json.RawMessage("\"\xff<\"")}}}},
		{name: "parts", value: &[]ContentPart{
			{Type: "text", Text: ptr("a & b")},
			{Type: "image_url", ImageURL: &ImageURL{URL: "https://x.test/?a=1&b=2", Detail: "low"}},
			{Type: "refusal", Refusal: ptr("")},
			{Type: "image_url", ImageURL: &ImageURL{}},
		}},
		{name: "NaN temperature", value: &ChatRequest{Temperature: &nan}, fails: true},
		{name: "infinite top_p", value: &ChatRequest{TopP: &inf}, fails: true},
		{name: "empty content", value: &ChatRequest{Messages: []ChatMessage{{Content: emptyRaw}}}, fails: true},
		{name: "invalid content", value: &ChatRequest{Messages: []ChatMessage{{Content: json.RawMessage(`{"a":}`)}}}, fails: true},
		{name: "invalid tool choice", value: &ChatRequest{ToolChoice: json.RawMessage(`auto`)}, fails: true},
		{name: "invalid parameters", value: &ChatRequest{Tools: []ChatTool{{Function: ChatFunction{Parameters: json.RawMessage(`{`)}}}}, fails: true},
		{name: "invalid schema", value: &ChatRequest{ResponseFormat: &ResponseFormat{JSONSchema: &JSONSchema{Schema: json.RawMessage(`[1,]`)}}}, fails: true},
		{name: "empty response content", value: &ChatResponse{Choices: []ChatChoice{{Message: ChatResponseMessage{Content: emptyRaw}}}}, fails: true},
		{name: "invalid logprobs", value: &ChatResponse{Choices: []ChatChoice{{Logprobs: json.RawMessage(`1 2`)}}}, fails: true},
		{name: "invalid reasoning", value: &ChatResponse{Choices: []ChatChoice{{Message: ChatResponseMessage{Reasoning: json.RawMessage(`"`)}}}}, fails: true},
		{name: "invalid reasoning content", value: &ChatResponse{Choices: []ChatChoice{{Message: ChatResponseMessage{ReasoningContent: json.RawMessage(`nul`)}}}}, fails: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var marshals bool
			switch v := tc.value.(type) {
			case *ChatRequest:
				marshals = checkFastEncode(t, v, appendChatRequest)
			case *ChatResponse:
				marshals = checkFastEncode(t, v, appendChatResponse)
			case *[]ContentPart:
				marshals = checkFastEncode(t, v, appendContentPartsPtr)
			default:
				t.Fatalf("unexpected type %T", v)
			}
			if marshals == tc.fails {
				t.Errorf("json.Marshal succeeds: %v, want %v", marshals, !tc.fails)
			}
		})
	}
}

// TestEncodeChatRequestFallback checks the call site: what the fast path refuses goes to
// json.Marshal, whose error is returned.
func TestEncodeChatRequestFallback(t *testing.T) {
	msgs := []providers.Message{{Role: providers.RoleUser, Content: []providers.Part{{Type: providers.PartText, Text: "hi"}}}}
	_, err := EncodeChatRequest(&providers.Request{Model: "m", Messages: msgs, Temperature: ptr(math.NaN())})
	var unsupported *json.UnsupportedValueError
	if !errors.As(err, &unsupported) {
		t.Errorf("NaN temperature: error %v, want a *json.UnsupportedValueError", err)
	}
	_, err = EncodeChatRequest(&providers.Request{Model: "m", Messages: msgs,
		Tools: []providers.Tool{{Name: "f", Parameters: json.RawMessage(`{"type":`)}}})
	var marshaler *json.MarshalerError
	if !errors.As(err, &marshaler) {
		t.Errorf("invalid parameters: error %v, want a *json.MarshalerError", err)
	}
}
