package openai

import (
	"encoding/json"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/providers/sse"
)

// benchChunks are the frames of a relayed stream in the proportions that matter: text
// deltas dominate, then tool call argument fragments; the usage chunk comes once.
var benchChunks = []struct{ name, data string }{
	{"content", `{"id":"chatcmpl-BpQ3rX9","object":"chat.completion.chunk","created":1751900000,"model":"gpt-4.1-mini-2025-04-14","service_tier":"default","system_fingerprint":"fp_6f2eabb9a5","choices":[{"index":0,"delta":{"content":" the weather"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"x1Yz"}`},
	{"tool_args", `{"id":"chatcmpl-BpQ3rX9","object":"chat.completion.chunk","created":1751900000,"model":"gpt-4.1-mini-2025-04-14","service_tier":"default","system_fingerprint":"fp_6f2eabb9a5","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"location\":\"Paris"}}]},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"k2"}`},
	{"usage", `{"id":"chatcmpl-BpQ3rX9","object":"chat.completion.chunk","created":1751900000,"model":"gpt-4.1-mini-2025-04-14","service_tier":"default","system_fingerprint":"fp_6f2eabb9a5","choices":[],"usage":{"prompt_tokens":1117,"completion_tokens":46,"total_tokens":1163,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"obfuscation":"r"}`},
}

func BenchmarkChatChunkDecode(b *testing.B) {
	for _, bc := range benchChunks {
		data := []byte(bc.data)
		b.Run(bc.name+"/fastDecode", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				var c ChatChunk
				if !c.fastDecode(data) {
					b.Fatal("refused")
				}
			}
		})
		b.Run(bc.name+"/json.Unmarshal", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				var c ChatChunk
				if err := json.Unmarshal(data, &c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkChatStreamHandle is the whole per-frame work of the stream on a text delta,
// decoding included, for scale.
func BenchmarkChatStreamHandle(b *testing.B) {
	ev := sse.Event{Data: []byte(benchChunks[0].data)}
	s := &chatStream{}
	b.ReportAllocs()
	for b.Loop() {
		s.pending = s.pending[:0]
		if err := s.handle(ev); err != nil {
			b.Fatal(err)
		}
	}
}
