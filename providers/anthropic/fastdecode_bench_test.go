package anthropic

import (
	"encoding/json"
	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"testing"
)

func BenchmarkFastDecode(b *testing.B) {
	for _, c := range []struct {
		name  string
		body  []byte
		fresh func() fastDecoder
	}{
		{"response", []byte(benchResponse), func() fastDecoder { return new(Message) }},
		{"response-tools", []byte(messageResponse), func() fastDecoder { return new(Message) }},
		{"request", []byte(multiTurnRequest), func() fastDecoder { return new(MessagesRequest) }},
	} {
		b.Run(c.name+"/fastDecode", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.body)))
			for b.Loop() {
				if !c.fresh().fastDecode(c.body) {
					b.Fatal("fell back")
				}
			}
		})
		b.Run(c.name+"/Unmarshal", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.body)))
			for b.Loop() {
				if err := json.Unmarshal(c.body, c.fresh()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecode measures the callers, whose other work the fast path does not change.
func BenchmarkDecode(b *testing.B) {
	b.Run("DecodeResponse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeResponse([]byte(benchResponse)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DecodeRequest", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeRequest([]byte(multiTurnRequest)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkValidJSON(b *testing.B) {
	body := []byte(benchResponse)
	b.Run("rawjson.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			rawjson.Valid(body)
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			json.Valid(body)
		}
	})
}
