package handlers

import "testing"

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
