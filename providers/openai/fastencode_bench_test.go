package openai

import (
	"encoding/json"
	"testing"
)

func BenchmarkChatRequestEncode(b *testing.B) {
	var cr ChatRequest
	if err := json.Unmarshal([]byte(benchChatRequest), &cr); err != nil {
		b.Fatal(err)
	}
	req, err := DecodeChatRequest([]byte(benchChatRequest))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(&cr); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("appendChatRequest", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := appendChatRequest(make([]byte, 0, chatRequestSize(&cr)), &cr); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("EncodeChatRequest", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := EncodeChatRequest(req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkChatResponseEncode(b *testing.B) {
	var cr ChatResponse
	if err := json.Unmarshal([]byte(benchChatResponse), &cr); err != nil {
		b.Fatal(err)
	}
	resp, err := DecodeChatResponse([]byte(benchChatResponse))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(&cr); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("appendChatResponse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := appendChatResponse(make([]byte, 0, chatResponseSize(&cr)), &cr); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("EncodeChatResponse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := EncodeChatResponse(resp, "chatcmpl-1", 1741570283); err != nil {
				b.Fatal(err)
			}
		}
	})
}
