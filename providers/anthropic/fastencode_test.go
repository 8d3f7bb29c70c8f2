package anthropic

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/internal/bufs"
	"github.com/modelgateway/caddy-modelgateway/internal/wiretest"
	"github.com/modelgateway/caddy-modelgateway/providers"
)

// encodeSeeds are bodies whose shapes the encoders must write as json.Marshal does, beyond
// the decoder's seeds: every field of every type, escapes, odd numbers and nulls.
var encodeSeeds = []string{
	`{"model":"claude-sonnet-4-5","max_tokens":1024,"system":"<b>Tom & Jerry</b>\u2028\u2029 \"q\" \\ \/ \u0000\u001f\u007f","messages":[{"role":"user","content":"a<b>&c \u2028 é 日本 🎉"}]}`,
	`{"model":"m","max_tokens":9223372036854775807,"top_k":-9223372036854775808,"temperature":1e-7,"top_p":0.1,"messages":[]}`,
	`{"model":"m","temperature":1e21,"top_p":123456789012345678901234567890,"messages":null}`,
	`{"model":"m","temperature":-0,"top_p":5e-324,"messages":[{"role":"","content":null}]}`,
	`{"model":"m","temperature":1.7976931348623157e308,"top_p":0.000001,"top_k":0,"max_tokens":0}`,
	`{"model":"m","temperature":1e20,"top_p":9.999999999999999e-7,"stop_sequences":[],"tools":[],"system":""}`,
	`{"model":"m","stop_sequences":["","<stop>","\n\nHuman:"],"stream":false,"metadata":{},"thinking":{"type":""},"tool_choice":{"type":""},"output_config":{}}`,
	`{"model":"m","output_config":{"format":{"type":""}},"tool_choice":{"type":"auto","disable_parallel_tool_use":false}}`,
	`{"model":"m","output_config":{"effort":"low","format":{"type":"json_schema","schema":{ "a" : [ 1 , 2.50 , "<&>" , true , null , { } ] }}}}`,
	`{"model":"m","tools":[{"name":""},{"type":"","name":"f","description":"","input_schema":null},{"type":"bash_20250124","name":"bash"},{"name":"g","input_schema":{"type":"object","properties":{"q":{"type":"string","description":"a < b"}}}}]}`,
	`{"model":"m","thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"","signature":""},{"type":"redacted_thinking","data":"EmwKAh=="},{"type":"text","text":""}]}]}`,
	`{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"/9j/4AAQ+/="}},{"type":"image","source":{"type":"url","url":"https://example.com/a.png?x=1&y=<2>"}},{"type":"document","source":{"type":"file","file_id":"file_011"}},{"type":"image","source":{"type":""}}]}]}`,
	`{"model":"m","messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01","is_error":false,"content":""},{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"x"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"UE5H"}}]},{"type":"tool_result","tool_use_id":"t","content":null,"input":null}]}]}`,
	`{"model":"m","messages":[{"role":"assistant","content":[{"type":"tool_use","id":"toolu_01","name":"f","input":{"html":"<script>&amp;</script>","n":[1e-7,0.1,1E+2,-0,12345678901234567890],"u":"\u2028\u2029","s":"\ud83c\udf89"}}]}]}`,
	"{\"model\":\"\\ufffd bad \xff\xfe utf8 \xe2\x80\xa8 raw sep\",\"messages\":[{\"role\":\"user\",\"content\":\"raw \xff and \xe2\x80\xa9 in a raw string\"}]}",
	`{"model":"m","messages":[{"role":"user","content":"x"}],"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral","ttl":"1h"}}],"metadata":{"user_id":"u&1"}}`,
}

// encodeMessageSeeds are the same for messages.
var encodeMessageSeeds = []string{
	`{"id":"","type":"","role":"","model":"","content":null,"stop_reason":null,"stop_sequence":null,"usage":null}`,
	`{"id":"msg<1>","type":"message","role":"assistant","model":"m&m","content":[],"stop_reason":"stop_sequence","stop_sequence":"</answer>","usage":{ "input_tokens" : 1e2, "output_tokens": 9223372036854775807 }}`,
	`{"content":[{"type":"tool_use","id":"toolu_01","name":"f","input":{}},{"type":"tool_use","id":"t","name":"g","input":{"a":"\u2028<>&","b":[ 0.1 , 1e-7 ]}},{"type":"text","text":"\u0000\t\n\r\b\f\u001b"}],"usage":{}}`,
	`{"content":[{"type":"thinking","thinking":"Let me think… \"really\"","signature":"ErUBCkYIBxgCIkD+/=="},{"type":"redacted_thinking","data":"EmwK"},{"type":"image","source":{"type":"base64","media_type":"image/gif","data":"R0lG"}},{"type":"tool_result","tool_use_id":"a","is_error":true,"content":[{"type":"text","text":"boom"}]}]}`,
	"{\"id\":\"\xff\",\"model\":\"a\xe2\x80\xa8b\",\"content\":[{\"type\":\"text\",\"text\":\"c\xed\xa0\x80d\"}],\"usage\":{\"k\":\"\xff<\"}}",
}

// encodeBlockSeeds are arrays of content blocks.
var encodeBlockSeeds = []string{
	`[]`,
	`null`,
	`[{}]`,
	`[{"type":"text","text":"Hello <world> & \u2028"},{"type":"tool_result","tool_use_id":"t_YS5i","is_error":true,"content":"tool call was not executed"}]`,
	`[{"type":"tool_use","id":"toolu_01A","name":"get_weather","input":{"city":"Paris"}},{"type":"thinking","thinking":"x","signature":"s"}]`,
	`[{"type":"image","source":{"type":"base64","media_type":"image/webp","data":"UklGRg=="}},{"type":"text","text":"What is this?"}]`,
}

// checkFastEncode checks that append writes what json.Marshal writes for v, after a prefix
// it must keep, and falls back only where json.Marshal fails.
func checkFastEncode[T any](t *testing.T, v *T, appendFn func([]byte, *T) ([]byte, bool)) {
	t.Helper()
	want, err := json.Marshal(v)
	prefix := []byte("prefix")
	got, ok := appendFn(slices.Clip(prefix), v)
	if !ok {
		if err == nil {
			t.Fatalf("fast path fell back on a value json.Marshal writes: %s", want)
		}
		if string(got) != "prefix" {
			t.Fatalf("fast path fell back but changed the buffer: %q", got)
		}
		return
	}
	if err != nil {
		t.Fatalf("fast path wrote %s where json.Marshal fails: %v", got, err)
	}
	if !bytes.HasPrefix(got, prefix) {
		t.Fatalf("fast path lost the prefix: %q", got)
	}
	if got = got[len(prefix):]; !bytes.Equal(got, want) {
		t.Fatalf("fast path and json.Marshal differ:\nfast    %q\nMarshal %q", got, want)
	}
}

// fuzzFastEncode is the body of the fuzz targets: whatever json.Unmarshal reads into a T,
// the fast path writes as json.Marshal does.
func fuzzFastEncode[T any](t *testing.T, data []byte, appendFn func([]byte, *T) ([]byte, bool)) {
	v := new(T)
	if json.Unmarshal(data, v) != nil {
		return
	}
	checkFastEncode(t, v, appendFn)
}

// The fuzz targets' seeds, realistic bodies and edge cases, run under a plain go test too;
// checkFastEncode fails on a fallback there as on a mismatch.

func FuzzFastEncodeRequest(f *testing.F) {
	for _, s := range slices.Concat(fastRequests, edgeRequests, encodeSeeds) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzFastEncode(t, data, appendMessagesRequest)
	})
}

func FuzzFastEncodeMessage(f *testing.F) {
	for _, s := range slices.Concat(fastResponses, edgeResponses, encodeMessageSeeds) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzFastEncode(t, data, appendMessage)
	})
}

func FuzzFastEncodeBlocks(f *testing.F) {
	for _, s := range encodeBlockSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzFastEncode(t, data, func(b []byte, blocks *[]ContentBlock) ([]byte, bool) {
			return appendContentBlocks(b, *blocks)
		})
	})
}

// FuzzFastEncodeValues builds the values in Go from raw fuzz input, reaching what
// json.Unmarshal never stores: strings with invalid UTF-8, json.RawMessage that is empty or
// not JSON, NaN and infinite floats.
func FuzzFastEncodeValues(f *testing.F) {
	f.Add("claude", "text <&> \u2028", []byte(`{"a": [1, "<"]}`), []byte(`"s"`), 0.7, int64(1024), true)
	f.Add("\xff", "\xe2\x80", []byte(""), []byte("{"), math.NaN(), int64(-1), false)
	f.Add("", "", []byte(" \"\xff\xe2\x80\xa8\" "), []byte(nil), math.Inf(1), int64(math.MaxInt64), true)
	f.Add("m", "t", []byte(`[1e-7, 0.1, 1E400]`), []byte(`tru`), 1e-7, int64(0), false)
	f.Fuzz(func(t *testing.T, s, text string, raw1, raw2 []byte, fl float64, n int64, flag bool) {
		check := func(raw1, raw2 json.RawMessage, fl float64) {
			block := ContentBlock{Type: s, Text: &text, ID: s, Name: text, Input: raw1, ToolUseID: text,
				Content: raw2, IsError: flag, Thinking: &s, Signature: &text, Data: s,
				Source: &ImageSource{Type: s, MediaType: text, Data: s, URL: text, FileID: s}}
			req := MessagesRequest{
				Model: s, MaxTokens: &n, System: raw1, Temperature: &fl, TopP: &fl, TopK: &n,
				Messages:      []MessageParam{{Role: s, Content: raw2}, {Role: text, Content: raw1}},
				Tools:         []Tool{{Type: s, Name: text, Description: s, InputSchema: raw2}},
				ToolChoice:    &ToolChoice{Type: s, Name: text, DisableParallelToolUse: &flag},
				StopSequences: []string{s, text},
				Stream:        flag,
				Thinking:      &Thinking{Type: text, BudgetTokens: &n},
				Metadata:      &Metadata{UserID: s},
				OutputConfig:  &OutputConfig{Effort: text, Format: &OutputFormat{Type: s, Schema: raw1}},
			}
			msg := Message{ID: s, Type: text, Role: s, Model: text, Content: []ContentBlock{block, {}},
				StopReason: &s, StopSequence: &text, Usage: raw1}
			checkFastEncode(t, &req, appendMessagesRequest)
			checkFastEncode(t, &msg, appendMessage)
			blocks := []ContentBlock{block}
			checkFastEncode(t, &blocks, func(b []byte, v *[]ContentBlock) ([]byte, bool) { return appendContentBlocks(b, *v) })
		}
		check(raw1, raw2, fl)
		// Without the values json.Marshal may refuse, so that the strings are checked too.
		check(nil, json.RawMessage(`{}`), 0.5)
	})
}

// TestFastEncodeValues checks values built in Go, zero values and the nil or empty fields
// that decoding seldom produces, against json.Marshal.
func TestFastEncodeValues(t *testing.T) {
	zero, one, neg := int64(0), int64(1), int64(math.MinInt64)
	no, yes := false, true
	empty, html := "", "<a href=\"x\">&amp;</a>\u2028\u2029\x00\x7f\xff"
	f := func(v float64) *float64 { return &v }
	requests := []struct {
		name string
		r    MessagesRequest
	}{
		{"zero", MessagesRequest{}},
		{"empty slices", MessagesRequest{Messages: []MessageParam{}, Tools: []Tool{}, StopSequences: []string{}, System: json.RawMessage{}}},
		{"zero pointers", MessagesRequest{MaxTokens: &zero, TopK: &zero, Temperature: f(0), TopP: f(math.Copysign(0, -1)),
			ToolChoice: &ToolChoice{}, Thinking: &Thinking{}, Metadata: &Metadata{}, OutputConfig: &OutputConfig{}}},
		{"empty nested", MessagesRequest{ToolChoice: &ToolChoice{DisableParallelToolUse: &no}, Thinking: &Thinking{BudgetTokens: &zero},
			OutputConfig: &OutputConfig{Format: &OutputFormat{}}, Tools: []Tool{{}}}},
		{"nil content", MessagesRequest{Model: "m", Messages: []MessageParam{{}}}},
		{"full", MessagesRequest{Model: html, MaxTokens: &one, Messages: []MessageParam{
			{Role: "user", Content: json.RawMessage(` "hi <there>" `)},
			{Role: "assistant", Content: json.RawMessage("[ {\"type\" : \"text\", \"text\":\"a\u2028&\"} ]")},
		}, System: json.RawMessage(`[{"type":"text","text":"s"}]`),
			Tools:       []Tool{{Type: "custom", Name: "f", Description: html, InputSchema: json.RawMessage(`{"type":"object"}`)}, {Name: "g"}},
			ToolChoice:  &ToolChoice{Type: "tool", Name: "f", DisableParallelToolUse: &yes},
			Temperature: f(1e-7), TopP: f(0.1), TopK: &neg, StopSequences: []string{"", html}, Stream: true,
			Thinking: &Thinking{Type: "enabled", BudgetTokens: &one}, Metadata: &Metadata{UserID: html},
			OutputConfig: &OutputConfig{Effort: "max", Format: &OutputFormat{Type: "json_schema", Schema: json.RawMessage(`{ }`)}}}},
		{"large floats", MessagesRequest{Temperature: f(1e21), TopP: f(123456789)}},
		{"tiny floats", MessagesRequest{Temperature: f(5e-324), TopP: f(-1e-100)}},
		// json.Marshal fails on these; the fast path leaves them to it.
		{"NaN", MessagesRequest{Temperature: f(math.NaN())}},
		{"infinity", MessagesRequest{TopP: f(math.Inf(-1))}},
		{"empty content", MessagesRequest{Messages: []MessageParam{{Role: "user", Content: json.RawMessage{}}}}},
		{"invalid system", MessagesRequest{System: json.RawMessage(`{"a":}`)}},
		{"invalid schema", MessagesRequest{OutputConfig: &OutputConfig{Format: &OutputFormat{Schema: json.RawMessage(`nul`)}}}},
		{"invalid tool", MessagesRequest{Tools: []Tool{{Name: "ok"}, {InputSchema: json.RawMessage(`{}}`)}}}},
	}
	for _, tc := range requests {
		t.Run("request/"+tc.name, func(t *testing.T) { checkFastEncode(t, &tc.r, appendMessagesRequest) })
	}

	stop := "end_turn"
	messages := []struct {
		name string
		m    Message
	}{
		{"zero", Message{}},
		{"empty content", Message{Content: []ContentBlock{}, StopReason: &empty, StopSequence: &empty, Usage: json.RawMessage(`{}`)}},
		{"zero block", Message{Content: []ContentBlock{{}}, Usage: json.RawMessage(`null`)}},
		{"pointers to empty", Message{Content: []ContentBlock{{Text: &empty, Thinking: &empty, Signature: &empty, Source: &ImageSource{}}}}},
		{"every field", Message{ID: "msg_1", Type: "message", Role: "assistant", Model: html, StopReason: &stop, StopSequence: &html,
			Usage: json.RawMessage("{\"input_tokens\": 1,\n\t\"output_tokens\": 2}"),
			Content: []ContentBlock{{Type: "x", Text: &html, Source: &ImageSource{Type: "base64", MediaType: "image/png", Data: "UE5H", URL: html, FileID: "f"},
				ID: "i", Name: "n", Input: json.RawMessage(`{"a":1}`), ToolUseID: "t", Content: json.RawMessage(`"c"`), IsError: true,
				Thinking: &html, Signature: &html, Data: html}}}},
		// json.Marshal fails on these; the fast path leaves them to it.
		{"empty usage", Message{Usage: json.RawMessage{}}},
		{"invalid usage", Message{Usage: json.RawMessage(`{`)}},
		{"invalid input", Message{Content: []ContentBlock{{Type: "text", Text: &stop}, {Type: "tool_use", Input: json.RawMessage(`{"a"}`)}}}},
		{"invalid content", Message{Content: []ContentBlock{{Type: "tool_result", Content: json.RawMessage(`"\x"`)}}}},
	}
	for _, tc := range messages {
		t.Run("message/"+tc.name, func(t *testing.T) { checkFastEncode(t, &tc.m, appendMessage) })
	}
}

// TestFastEncodeEveryField keeps the encoders complete: with every field of the encoded
// types set (wiretest.Fill, a field added to types.go included), json.Marshal writes every
// key, and the fast path must write the same.
func TestFastEncodeEveryField(t *testing.T) {
	for _, s := range []string{"", "<é>\u2028\"\\", "\xff"} {
		var r MessagesRequest
		wiretest.Fill(reflect.ValueOf(&r).Elem(), s, nil)
		checkFastEncode(t, &r, appendMessagesRequest)
		var m Message
		wiretest.Fill(reflect.ValueOf(&m).Elem(), s, nil)
		checkFastEncode(t, &m, appendMessage)
		var blocks []ContentBlock
		wiretest.Fill(reflect.ValueOf(&blocks).Elem(), s, nil)
		checkFastEncode(t, &blocks, func(b []byte, v *[]ContentBlock) ([]byte, bool) { return appendContentBlocks(b, *v) })
	}
}

// TestFastEncodeSeedsDecode keeps the seeds useful: one json.Unmarshal refuses checks nothing.
func TestFastEncodeSeedsDecode(t *testing.T) {
	for _, s := range encodeSeeds {
		if err := json.Unmarshal([]byte(s), new(MessagesRequest)); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	for _, s := range encodeMessageSeeds {
		if err := json.Unmarshal([]byte(s), new(Message)); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	for _, s := range encodeBlockSeeds {
		if err := json.Unmarshal([]byte(s), new([]ContentBlock)); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
}

// TestFastEncodeAllocatesOnce checks the size estimates: a typical request and answer fit
// in the buffer allocated first, which never has to grow.
func TestFastEncodeAllocatesOnce(t *testing.T) {
	r, m := benchEncodeValues(t)
	image := benchImageRequest(t)
	for name, fn := range map[string]func() ([]byte, error){
		"request":       func() ([]byte, error) { return marshalRequest(r) },
		"request-image": func() ([]byte, error) { return marshalRequest(image) },
		"response":      func() ([]byte, error) { return marshalMessage(m) },
		"blocks":        func() ([]byte, error) { return marshalBlocks(m.Content) },
	} {
		if n := testing.AllocsPerRun(10, func() { _, _ = fn() }); n != 1 {
			t.Errorf("%s: %v allocations, want 1", name, n)
		}
	}
}

// benchEncodeValues returns a typical request and answer as the callers build them: the
// request EncodeRequest writes for multiTurnRequest and the message EncodeResponse writes
// for benchResponse.
func benchEncodeValues(tb testing.TB) (*MessagesRequest, *Message) {
	req, err := DecodeRequest([]byte(multiTurnRequest))
	if err != nil {
		tb.Fatal(err)
	}
	body, err := EncodeRequest(req)
	if err != nil {
		tb.Fatal(err)
	}
	var r MessagesRequest
	if err := json.Unmarshal(body, &r); err != nil {
		tb.Fatal(err)
	}
	resp, err := DecodeResponse([]byte(benchResponse))
	if err != nil {
		tb.Fatal(err)
	}
	if body, err = EncodeResponse(resp, "msg_gw", "claude-x"); err != nil {
		tb.Fatal(err)
	}
	var m Message
	if err := json.Unmarshal(body, &m); err != nil {
		tb.Fatal(err)
	}
	return &r, &m
}

// benchImageRequest is a request with a 150 kB image, where the cost is in long strings.
func benchImageRequest(tb testing.TB) *MessagesRequest {
	data := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("\x89PNG\r\n\x1a\n", 14000)))
	content, err := marshalBlocks([]ContentBlock{
		{Type: "image", Source: &ImageSource{Type: "base64", MediaType: "image/png", Data: data}},
		{Type: "text", Text: ptr("What is in this image?")},
	})
	if err != nil {
		tb.Fatal(err)
	}
	maxTokens := int64(1024)
	return &MessagesRequest{Model: "claude-sonnet-4-5", MaxTokens: &maxTokens, Messages: []MessageParam{{Role: "user", Content: content}}}
}

// TestAppendMessageAdditions: the members a caller adds go at the end of the usage object,
// with no comma after an empty one, and at the end of the message; a usage that is not an
// object leaves them to the caller (the fast encoder declines).
func TestAppendMessageAdditions(t *testing.T) {
	add := providers.Additions{Usage: []byte(`"cost":"0.01","cost_nanos":10000000`), Top: []byte(`"meta":{"provider":"an"}`)}
	for usage, want := range map[string]string{
		`{"input_tokens":3,"output_tokens":4}`: `"usage":{"input_tokens":3,"output_tokens":4,"cost":"0.01","cost_nanos":10000000},"meta":{"provider":"an"}}`,
		` { } `:                                `"usage":{"cost":"0.01","cost_nanos":10000000},"meta":{"provider":"an"}}`,
	} {
		m := Message{ID: "msg_1", Type: "message", Role: "assistant", Model: "m", Content: []ContentBlock{}, Usage: json.RawMessage(usage), add: add}
		b, ok := appendMessage(nil, &m)
		if !ok || !json.Valid(b) || !strings.HasSuffix(string(b), want) {
			t.Errorf("usage %s: %s, %v; want it to end with %s", usage, b, ok, want)
		}
	}
	m := Message{ID: "msg_1", Content: []ContentBlock{}, Usage: json.RawMessage(`null`), add: add}
	if b, ok := appendMessage(nil, &m); ok {
		t.Errorf("additions into a null usage: %s", b)
	}
	b, added, err := appendMarshalMessageWith(nil, &m)
	if err != nil || added || !json.Valid(b) || bytes.Contains(b, []byte("cost")) {
		t.Errorf("slow path: %s, added %v, %v", b, added, err)
	}
}

// TestMarshalRequestFallback: a request the fast encoder declines (raw content that is not
// JSON) goes to encoding/json through a copy, with encoding/json's answer: an error, as
// json.Marshal of the request itself gives; and a valid one is the same bytes either way.
func TestMarshalRequestFallback(t *testing.T) {
	bad := &MessagesRequest{Model: "m", Messages: []MessageParam{{Role: "user", Content: json.RawMessage(`{"type":`)}}}
	if _, ok := appendMessagesRequest(nil, bad); ok {
		t.Fatal("the fast encoder took content that is not JSON")
	}
	_, want := json.Marshal(bad)
	if _, err := marshalRequest(bad); err == nil || want == nil || err.Error() != want.Error() {
		t.Fatalf("marshalRequest: %v, json.Marshal: %v", err, want)
	}
	maxTokens := int64(5)
	good := &MessagesRequest{Model: "m", MaxTokens: &maxTokens, Messages: []MessageParam{{Role: "user", Content: json.RawMessage(`"hi"`)}}}
	got, err := marshalRequest(good)
	if want, _ := json.Marshal(good); err != nil || string(got) != string(want) {
		t.Fatalf("got %s (%v), want %s", got, err, want)
	}
}

// marshalMessage is json.Marshal(m), on the fast path when it can: how the tests drive
// appendMessage with a fallback (AppendResponseWith has its own, marshalResponse).
func marshalMessage(m *Message) ([]byte, error) { return appendMarshalMessage(nil, m) }

// appendMarshalMessage appends what marshalMessage returns to dst.
func appendMarshalMessage(dst []byte, m *Message) ([]byte, error) {
	b, _, err := appendMarshalMessageWith(dst, m)
	return b, err
}

// appendMarshalMessageWith is appendMarshalMessage reporting whether m.add is in what it
// wrote (only the fast encoder adds it).
func appendMarshalMessageWith(dst []byte, m *Message) ([]byte, bool, error) {
	if b, ok := appendMessage(bufs.Grow(dst, messageSize(m)), m); ok {
		return b, true, nil
	}
	// By value: a pointer would move every caller's Message to the heap for this rare path.
	b, err := json.Marshal(*m)
	return append(dst, b...), false, err
}
