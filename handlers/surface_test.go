package handlers

import (
	"strings"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/openai"
)

// TestDecoratedUsageFallback: an answer that came without usage gets the call's, in the
// surface's format, with its cost; one that has usage keeps its own, and the fallback is not
// even encoded.
func TestDecoratedUsageFallback(t *testing.T) {
	c := &call{genID: "gen_1", usage: providers.Usage{Input: 12, Output: 7}}
	encoded := 0
	enc := func(b []byte, u providers.Usage) []byte {
		encoded++
		return openai.AppendChatUsage(b, u)
	}

	out, err := c.appendDecorated(nil, []byte(`{"id":"up_1","choices":[]}`), "id", "usage", enc)
	if err != nil {
		t.Fatal(err)
	}
	usage, err := rawjson.Get(out, "usage")
	if err != nil || encoded != 1 {
		t.Fatalf("usage %s, %v, encoded %d times", usage, err, encoded)
	}
	for _, want := range []string{`"prompt_tokens":12`, `"completion_tokens":7`, `"cost_nanos":0`, `"cost_lines":[]`} {
		if !strings.Contains(string(usage), want) {
			t.Errorf("usage %s lacks %s", usage, want)
		}
	}
	if !strings.Contains(string(out), `"id":"gen_1"`) {
		t.Errorf("id not replaced: %s", out)
	}

	out, err = c.appendDecorated(nil, []byte(`{"id":"up_2","usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`), "id", "usage", enc)
	if err != nil || encoded != 1 {
		t.Fatalf("%s, %v; the fallback was encoded %d times, want once in all", out, err, encoded)
	}
	if usage, _ := rawjson.Get(out, "usage"); !strings.Contains(string(usage), `"prompt_tokens":3`) || !strings.Contains(string(usage), `"cost_nanos":0`) {
		t.Errorf("the answer's own usage was not kept and costed: %s", usage)
	}
}
