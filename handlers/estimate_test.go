package handlers

import (
	"bytes"
	"strings"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/providers/mock"
)

// TestCancelledStreamBillsItsPromptText: a stream the client leaves before the upstream
// reported usage is billed an estimate of its prompt made from the prompt's text, not from
// the JSON around it: a 2-token prompt a few tokens with the message's framing, a long one
// no less than the upstream counts for it.
func TestCancelledStreamBillsItsPromptText(t *testing.T) {
	rt := Route{ProviderName: "mock", Provider: mock.New(mock.Config{Name: "mock"}), UpstreamModel: "mock-1", Price: pricing.Price{Input: usdNanos, Output: usdNanos}}
	long := strings.Repeat("The quick brown fox jumps over the lazy dog, then naps in the sun. ", 60)
	body := func(prompt string, stream bool) string {
		b := `{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"` + prompt + `"}]`
		if stream {
			b += `,"stream":true,"stream_options":{"include_usage":true}`
		}
		return b + `}`
	}
	firstFrame := func(read []byte) bool { return bytes.Contains(read, []byte("data: ")) }
	for _, tc := range []struct {
		name   string
		prompt string
		most   int64
	}{
		// "hi" and "You are terse." are 4 tokens by the mock's count: the estimate adds
		// the framing of two messages and of the answer, not the JSON's 170 bytes.
		{"short", "hi", 20},
		{"long", long, int64(len(long))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// What the upstream counts for the prompt, asked whole.
			_, _, whole := callLeaving(t, rt, "/chat/completions", body(tc.prompt, false), func([]byte) bool { return false })
			_, left, gen := callLeaving(t, rt, "/chat/completions", body(tc.prompt, true), firstFrame)
			if !left || !gen.Cancelled || gen.InputTokens < whole.InputTokens || gen.InputTokens > tc.most {
				t.Fatalf("cancelled %v, billed %d input tokens for a prompt of %d, want %d to %d", gen.Cancelled, gen.InputTokens, whole.InputTokens, whole.InputTokens, tc.most)
			}
		})
	}
}

// TestEstimatePromptTokens: the text of each surface's request is counted, not its keys and
// settings; inline pictures count as the most one is billed; a body not read counts a
// token a byte.
func TestEstimatePromptTokens(t *testing.T) {
	for _, tc := range []struct {
		body string
		want int64
	}{
		// 2 bytes of text, one message, the answer's priming.
		{`{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":0.2,"max_tokens":100}`, 1 + 4 + 3},
		// Responses: a string input and instructions.
		{`{"model":"m","input":"hello there","instructions":"be brief"}`, (11+8+2)/3 + 4 + 3},
		// Messages: a system prompt, a part list with a base64 picture, a tool's schema as read.
		{`{"model":"m","system":"sys","messages":[{"role":"user","content":[{"type":"text","text":"what"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]}],"tools":[{"name":"f"}]}`,
			int64(3+4+9+len(`[{"name":"f"}]`)+2)/3 + 4 + 3 + visionImageTokens},
		// Embeddings: token ids, a token each.
		{`{"model":"m","input":[[1,2,3],[4]]}`, (4*3+2)/3 + 2*4 + 3},
		{`{"model":"m","messages":[`, int64(len(`{"model":"m","messages":[`))},
	} {
		if got := estimatePromptTokens([]byte(tc.body)); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.body, got, tc.want)
		}
	}
}
