package openai

import (
	"encoding/json"
	"testing"
)

func BenchmarkChatResponseDecode(b *testing.B) {
	body := []byte(benchChatResponse)
	b.Run("fastDecode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var cr ChatResponse
			if !cr.fastDecode(body) {
				b.Fatal("refused")
			}
		}
	})
	b.Run("json.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var cr ChatResponse
			if err := json.Unmarshal(body, &cr); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DecodeChatResponse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeChatResponse(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkChatRequestDecode(b *testing.B) {
	body := []byte(benchChatRequest)
	b.Run("fastDecode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var cr ChatRequest
			if !cr.fastDecode(body) {
				b.Fatal("refused")
			}
		}
	})
	b.Run("json.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var cr ChatRequest
			if err := json.Unmarshal(body, &cr); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DecodeChatRequest", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeChatRequest(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}
