package rawjson

import (
	"strings"
	"testing"
)

// BenchmarkAppendLongText quotes and re-compacts 10 KB of prose, the size of a long prompt
// or answer, which the translated paths do once per message.
func BenchmarkAppendLongText(b *testing.B) {
	s := strings.Repeat("Lorem ipsum dolor sit amet, consectetur adipiscing elit. ", 180)
	raw := AppendStringLikeMarshal(nil, s)
	buf := make([]byte, 0, len(raw)+64)
	b.Run("AppendStringLikeMarshal", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			AppendStringLikeMarshal(buf[:0], s)
		}
	})
	b.Run("AppendRawLikeMarshal", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			AppendRawLikeMarshal(buf[:0], raw)
		}
	})
}
