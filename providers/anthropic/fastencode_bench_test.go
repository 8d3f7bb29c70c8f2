package anthropic

import (
	"encoding/json"
	"testing"
)

func BenchmarkFastEncode(b *testing.B) {
	r, m := benchEncodeValues(b)
	image := benchImageRequest(b)
	for _, c := range []struct {
		name    string
		fast    func() ([]byte, error)
		marshal func() ([]byte, error)
	}{
		{"request", func() ([]byte, error) { return marshalRequest(r) }, func() ([]byte, error) { return json.Marshal(r) }},
		{"request-image", func() ([]byte, error) { return marshalRequest(image) }, func() ([]byte, error) { return json.Marshal(image) }},
		{"response", func() ([]byte, error) { return marshalMessage(m) }, func() ([]byte, error) { return json.Marshal(m) }},
	} {
		out, err := c.marshal()
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name+"/fast", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(out)))
			for b.Loop() {
				if _, err := c.fast(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/Marshal", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(out)))
			for b.Loop() {
				if _, err := c.marshal(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEncode measures the callers, whose other work the fast path does not change.
func BenchmarkEncode(b *testing.B) {
	req, err := DecodeRequest([]byte(multiTurnRequest))
	if err != nil {
		b.Fatal(err)
	}
	resp, err := DecodeResponse([]byte(benchResponse))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("EncodeRequest", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := EncodeRequest(req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("EncodeResponse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := EncodeResponse(resp, "msg_gw", "claude-x"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
