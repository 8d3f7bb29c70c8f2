package handlers

import (
	"bytes"
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

// TestAppendDecoratedAllocatesNothing: decorating an answer into a buffer with room builds
// the costed usage and the id in a pooled buffer and the cost figures on the stack. Each in
// a buffer of its own, that was five allocations per answer.
func TestAppendDecoratedAllocatesNothing(t *testing.T) {
	c := &call{genID: "gen_1", usage: providers.Usage{Input: 12, Output: 7}}
	obj := []byte(`{"id":"up_1","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19}}`)
	dst := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(200, func() {
		out, err := c.appendDecorated(dst[:0], obj, "id", "usage", openai.AppendChatUsage)
		if err != nil || !bytes.Contains(out, []byte(`"cost_nanos":0`)) {
			t.Fatalf("%s, %v", out, err)
		}
	})
	// Under the race detector sync.Pool drops a quarter of what is put back.
	limit := 0.0
	if raceEnabled {
		limit = 0.5
	}
	if allocs > limit {
		t.Fatalf("%.2f allocations per decorated answer, want none", allocs)
	}
}
