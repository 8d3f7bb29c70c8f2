package openai

import (
	"encoding/json"
	"testing"
)

// finishCases are choices arrays of stream chunks, the usual ones and the ones only
// encoding/json can read.
var finishCases = []string{
	`[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]`,
	`[{"index":0,"delta":{"content":"x"},"finish_reason":null}]`,
	`[{"index":0,"finish_reason":""},{"index":1,"finish_reason":"length"}]`,
	`[{"index":0,"finish_reason":null},{"index":1,"finish_reason":"tool_calls"}]`,
	`[]`,
	`null`,
	`[null,{"finish_reason":"stop"}]`,
	`[{"finish_reason":"st\u006fp"}]`,
	`[{"Finish_Reason":"stop"}]`,
	`[{"finish_reaso\u006e":"stop"}]`,
	`[{"finish_reason":"stop","finish_reason":"length"}]`,
	`[{"finish_reason":"stop","FINISH_REASON":null}]`,
	`[{"finish_reason":1}]`,
	`[{"finish_reason":"stop"},2]`,
	`[{"finish_reason":"\u00e9t\u00e9"}]`,
	`[ { "finish_reason" : "stop" } ]`,
	"[\n  {\n    \"finish_reason\" :\t\"stop\"\n  }\n]",
}

// frameJSON is what encoding/json reads of a frame: the reference ChunkFrame is held to.
func frameJSON(data []byte) (finish, text string, answer, ok bool) {
	var c ChatChunk
	if json.Unmarshal(data, &c) != nil {
		return "", "", false, false
	}
	textOf := func(raw json.RawMessage) string {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
		var parts []struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		_ = json.Unmarshal(raw, &parts)
		for _, p := range parts {
			if p.Type == "text" && p.Text != nil {
				s += *p.Text
			}
		}
		return s
	}
	textSet := false
	for _, ch := range c.Choices {
		if ch.FinishReason != nil && *ch.FinishReason != "" && finish == "" {
			finish = *ch.FinishReason
		}
		s := textOf(ch.Delta.Content)
		if ch.Index == 0 && !textSet {
			text, textSet = s, true
		}
		if s != "" || len(ch.Delta.ToolCalls) > 0 || (ch.Delta.Refusal != nil && *ch.Delta.Refusal != "") ||
			textOf(ch.Delta.ReasoningContent) != "" || textOf(ch.Delta.Reasoning) != "" {
			answer = true
		}
	}
	return finish, text, answer, true
}

func checkFrame(t *testing.T, data []byte) {
	t.Helper()
	var f ChunkFrame
	ok := f.Read(data)
	finish, text, answer, refOK := frameJSON(data)
	if ok != refOK {
		t.Fatalf("Read(%s) = %v, encoding/json %v", data, ok, refOK)
	}
	if !ok {
		return
	}
	if got := f.FinishReason(); got != finish {
		t.Errorf("FinishReason(%s) = %q, encoding/json %q", data, got, finish)
	}
	if got := f.Answer(); got != answer {
		t.Errorf("Answer(%s) = %v, encoding/json %v", data, got, answer)
	}
	if got := f.Text(); got != text {
		t.Errorf("Text(%s) = %q, encoding/json %q", data, got, text)
	}
	if f.IDEnd > 0 {
		var v struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.Unmarshal(data, &v)
		if got := string(data[f.IDStart:f.IDEnd]); got != string(v.ID) {
			t.Errorf("id span of %s is %s, encoding/json reads %s", data, got, v.ID)
		}
	}
}

// frameCases are whole frames written the ways servers write them: compact, with spaces
// after colons and commas (Python's json.dumps), over several lines, keys in another order,
// escapes in values and in keys.
var frameCases = []string{
	`{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
	`{"id":"c1","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}`,
	`{"id": "c1", "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": null}]}`,
	"{\n  \"choices\" : [ {\n    \"delta\" : { \"content\" : \"H\\u00e9 \\/ x\" },\n    \"index\" : 0 } ],\n  \"id\" : \"c1\"\n}",
	`{"choices":[{"delta":{"content":null,"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":""}}]},"index":0}],"id":"c1"}`,
	`{"choices":[{"delta":{"refusal":"no"},"index":0}]}`,
	`{"choices":[{"delta":{"reasoning_content":"hmm"},"index":0}]}`,
	`{"choices":[{"delta":{"reasoning":"hmm"},"index":0}]}`,
	`{"choices":[{"delta":{"content":[{"type":"text","text":"part"}]},"index":0}]}`,
	`{"choices":[{"delta":{},"index":0,"finish_reason" : "stop"}]}`,
	`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`,
	`{"choices":[{"delta":{"c\u006fntent":"escaped key"},"index":0}],"\u0069d":"c1"}`,
	`{"choices":[{"delta":{"content":"x"},"index":1},{"delta":{"content":"y"},"index":0}]}`,
	`{"id":"c1","id":"c2","choices":[]}`,
	`{"error":{"message":"boom"}}`,
	`[1,2]`,
	`"text"`,
	`null`,
	`{"choices":"no"}`,
	`{"choices":[{"delta":{"content":"x"}}`,
}

func TestChunkFrameAgreesWithEncodingJSON(t *testing.T) {
	for _, c := range finishCases {
		checkFrame(t, []byte(`{"id":"x","choices":`+c+`}`))
	}
	for _, c := range frameCases {
		checkFrame(t, []byte(c))
	}
}

func TestChunkFrameFirstToken(t *testing.T) {
	for _, tc := range []struct {
		frame  string
		answer bool
	}{
		{`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`, false},
		{`{"choices":[{"index":0,"delta":{"role":"assistant"}}]}`, false},
		{`{"choices":[{"index":0,"delta":{"content": "Hi"}}]}`, true},
		{`{ "choices" : [ { "delta" : { "content" : "Hi" } } ] }`, true},
		{`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, false},
		{`{"choices":[],"usage":{"prompt_tokens":1}}`, false},
		{`{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}`, true},
		{`{"choices":[{"delta":{"content":"\u00e9"}}]}`, true},
	} {
		var f ChunkFrame
		if !f.Read([]byte(tc.frame)) {
			t.Fatalf("Read(%s) failed", tc.frame)
		}
		if got := f.Answer(); got != tc.answer {
			t.Errorf("Answer(%s) = %v, want %v", tc.frame, got, tc.answer)
		}
	}
}

// FuzzChunkFrame holds ChunkFrame to encoding/json on any input.
func FuzzChunkFrame(f *testing.F) {
	for _, c := range frameCases {
		f.Add(c)
	}
	for _, c := range finishCases {
		f.Add(`{"choices":` + c + `}`)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkFrame(t, []byte(s))
	})
}
