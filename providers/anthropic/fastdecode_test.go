package anthropic

import (
	"encoding/json"
	"testing"
)

func BenchmarkBaseline(b *testing.B) {
	for _, c := range []struct {
		name string
		body string
		v    func() any
	}{{"response", messageResponse, func() any { return new(Message) }}, {"request", multiTurnRequest, func() any { return new(MessagesRequest) }}} {
		body := []byte(c.body)
		b.Run(c.name+"/unmarshal", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = json.Unmarshal(body, c.v())
			}
		})
		b.Run(c.name+"/valid", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = json.Valid(body)
			}
		})
	}
	b.Run("DecodeResponse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = DecodeResponse([]byte(messageResponse))
		}
	})
	b.Run("DecodeRequest", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = DecodeRequest([]byte(multiTurnRequest))
		}
	})
}
