package openai

import (
	"testing"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

func FuzzChatStream(f *testing.F) {
	seeds := []string{
		"data: " + chunkRole + "\n\ndata: " + chunkHello + "\n\ndata: " + chunkStop + "\n\ndata: " + chunkUsage + "\n\ndata: [DONE]\n\n",
		`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{"}}]}}]}` + "\n\n" +
			`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"id":"b","function":{"arguments":"}"}}]},"finish_reason":"tool_calls"}]}` + "\n\n",
		`data: {"error":{"message":"boom","code":500}}` + "\n\n",
		"event: error\ndata: oops\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}}],\"x_groq\":{\"usage\":{}}}\r\n\r\n",
		"data: [DONE]",
		"data: {\n\n",
		": ping\n\n",
		"",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s := bodyStream(string(body))
		defer s.Close()
		n, finishes := 0, 0
		calls := map[int]bool{}
		for s.Next() {
			n++
			if n > 4*len(body)+4 {
				t.Fatalf("%d events from %d bytes", n, len(body))
			}
			ev := s.Current()
			switch ev.Type {
			case providers.EventFinish:
				finishes++
			case providers.EventToolCall:
				if ev.Index < 0 || ev.Index > len(calls) {
					t.Fatalf("tool call index %d after %d calls", ev.Index, len(calls))
				}
				calls[ev.Index] = true
			case providers.EventUsage:
				u := ev.Usage
				if u.Input < 0 || u.CacheRead < 0 || u.CacheWrite < 0 || u.Output < 0 || u.Reasoning < 0 {
					t.Fatalf("negative usage %+v", u)
				}
			}
		}
		if finishes > 1 {
			t.Fatalf("%d finish events", finishes)
		}
		if err := s.Err(); err != nil {
			if _, ok := providers.AsUpstreamError(err); !ok {
				t.Fatalf("err %v is not an UpstreamError", err)
			}
		}
	})
}
