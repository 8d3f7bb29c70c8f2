package anthropic

import (
	"encoding/json"
	"testing"
)

// benchStreamEvents is the mix of a typical streamed answer: one message_start, a block
// start and stop, many text deltas, then message_delta and message_stop.
var benchStreamEvents = func() [][]byte {
	events := [][]byte{
		[]byte(`{"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":472,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"cache_creation":{"ephemeral_5m_input_tokens":100,"ephemeral_1h_input_tokens":0},"output_tokens":2,"service_tier":"standard"}}}`),
		[]byte(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
	}
	for range 40 {
		events = append(events, []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" revenue grew **12%** year over \"year\",\n"}}`))
	}
	return append(events,
		[]byte(`{"type":"content_block_stop","index":0}`),
		[]byte(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":612}}`),
		[]byte(`{"type":"message_stop"}`))
}()

func BenchmarkStreamEventDecode(b *testing.B) {
	for _, c := range []struct {
		name   string
		events [][]byte
	}{
		{"text_delta", [][]byte{[]byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" revenue grew **12%** year over \"year\",\n"}}`)}},
		{"message_start", benchStreamEvents[:1]},
		{"message_delta", [][]byte{[]byte(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":472,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"output_tokens":89,"output_tokens_details":{"thinking_tokens":40}}}`)}},
		{"stream", benchStreamEvents},
	} {
		size := 0
		for _, e := range c.events {
			size += len(e)
		}
		b.Run(c.name+"/fastDecode", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				for _, e := range c.events {
					var se streamEvent
					if !se.fastDecode(e) {
						b.Fatal("fell back")
					}
				}
			}
		})
		b.Run(c.name+"/Unmarshal", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				for _, e := range c.events {
					var se streamEvent
					if err := json.Unmarshal(e, &se); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkDecodeUsage measures the usage of message_start and message_delta as the stream
// decodes it.
func BenchmarkDecodeUsage(b *testing.B) {
	raw := json.RawMessage(`{"input_tokens":472,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"cache_creation":{"ephemeral_5m_input_tokens":100,"ephemeral_1h_input_tokens":0},"output_tokens":2,"service_tier":"standard"}`)
	b.Run("decodeUsage", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeUsage(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var u Usage
			if err := json.Unmarshal(raw, &u); err != nil {
				b.Fatal(err)
			}
		}
	})
}
