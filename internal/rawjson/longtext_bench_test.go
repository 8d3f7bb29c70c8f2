package rawjson

import (
	"strings"
	"testing"
)

// BenchmarkValidLongPrompt checks a chat request whose one message is 100 KB of prose (a
// pasted document), as every request body is checked before the gateway reads it.
func BenchmarkValidLongPrompt(b *testing.B) {
	text := strings.Repeat(`The quick brown fox jumps over the lazy dog; \"quoted\" text, then a new line.\n`, 1300)
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + text + `"}],"max_tokens":256}`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if !ValidDepth(body, 512) {
			b.Fatal("invalid")
		}
	}
}
