package handlers

import (
	"encoding/json"
	"testing"
)

func TestFirstFinishReason(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"id":"x","choices":[{"index":0,"message":{"content":"a \"q\" ]"},"finish_reason":"stop"},{"finish_reason":"length"}]}`, "stop"},
		{`{"choices":[{"finish_reason":"tool_calls","message":{"tool_calls":[{"id":"c"}]}}]}`, "tool_calls"},
		{`{"choices":[{"finish_reason":null}]}`, ""},
		{`{"choices":[]}`, ""},
		{`{"choices":null}`, ""},
		{`{"choices":[1]}`, ""},
		{`{"id":"x"}`, ""},
		{`{"choices":[{"finish_reason":"st\u006fp"}]}`, "stop"},
		{`not json`, ""},
	} {
		if got := firstFinishReason([]byte(tc.body)); got != tc.want {
			t.Errorf("firstFinishReason(%s) = %q, want %q", tc.body, got, tc.want)
		}
	}
}

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
	`[{"finish_reason":"stop"},"x"]`,
	`[{"finish_reason":"stop"},[]]`,
	`[{"finish_reason":"\u00e9t\u00e9"}]`,
	`[ { "finish_reason" : "stop" } ]`,
	`{"finish_reason":"stop"}`,
	`"stop"`,
}

// TestDecodeFinishReason: the in-place read gives what encoding/json gives, on every case.
func TestDecodeFinishReason(t *testing.T) {
	want := map[string]string{
		finishCases[0]: "stop", finishCases[2]: "length", finishCases[3]: "tool_calls",
		finishCases[6]: "stop", finishCases[7]: "stop", finishCases[8]: "stop", finishCases[9]: "stop",
		finishCases[10]: "length", finishCases[11]: "", finishCases[16]: "été", finishCases[17]: "stop",
	}
	for _, c := range finishCases {
		got, ref := decodeFinishReason([]byte(c)), decodeFinishReasonJSON([]byte(c))
		if got != ref || got != want[c] {
			t.Errorf("decodeFinishReason(%s) = %q, encoding/json %q, want %q", c, got, ref, want[c])
		}
	}
	if n := testing.AllocsPerRun(100, func() { decodeFinishReason([]byte(finishCases[0])) }); n > 1 {
		t.Errorf("%.1f allocations for the usual finish chunk, want at most 1", n)
	}
}

// FuzzDecodeFinishReason holds the in-place read to encoding/json's on any well-formed array.
func FuzzDecodeFinishReason(f *testing.F) {
	for _, c := range finishCases {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := []byte(s)
		if !json.Valid(b) {
			return
		}
		if got, ref := decodeFinishReason(b), decodeFinishReasonJSON(b); got != ref {
			t.Errorf("decodeFinishReason(%s) = %q, encoding/json %q", b, got, ref)
		}
	})
}
