package rawjson

import (
	"strings"
	"testing"
)

// longProse is 100 KB of prose with a quote and a new line every 80 bytes, as a pasted
// document: the text of a long prompt or a long answer.
var longProse = strings.Repeat("The quick brown fox jumps over the lazy dog; \"quoted\" text, then a new line.\n", 1300)

// BenchmarkValidLongPrompt checks a chat request whose one message is 100 KB of prose (a
// pasted document), as every request body is checked before the gateway reads it.
func BenchmarkValidLongPrompt(b *testing.B) {
	body := AppendString([]byte(`{"model":"m","messages":[{"role":"user","content":`), longProse)
	body = append(body, `}],"max_tokens":256}`...)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if !ValidDepth(body, 512) {
			b.Fatal("invalid")
		}
	}
}

// BenchmarkAppendLongProse encodes 100 KB of prose as a JSON string (a translated request's
// message, an answer's text), and copies it as raw JSON the way json.Marshal writes a
// RawMessage (the encoders' pass over content they hold already encoded).
func BenchmarkAppendLongProse(b *testing.B) {
	buf := make([]byte, 0, 2*len(longProse))
	b.Run("AppendStringLikeMarshal", func(b *testing.B) {
		b.SetBytes(int64(len(longProse)))
		for b.Loop() {
			buf = AppendStringLikeMarshal(buf[:0], longProse)
		}
	})
	raw := AppendString(nil, longProse)
	b.Run("AppendRawLikeMarshal", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			buf, _ = AppendRawLikeMarshal(buf[:0], raw)
		}
	})
}
