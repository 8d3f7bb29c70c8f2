package anthropic

import (
	"testing"

	"github.com/modelgateway/caddy-modelgateway/internal/alloctest"
	"github.com/modelgateway/caddy-modelgateway/providers"
)

// TestDecodeAllocations: the fast decoders' structs stay on the stack (the slow path's
// json.Unmarshal goes through rawjson.UnmarshalFresh): decoding a usual request or answer
// allocates what the neutral model keeps, and not the wire struct too (one more each), and
// so do the usage parsers and the request encoder.
func TestDecodeAllocations(t *testing.T) {
	req := []byte(`{"model":"claude-haiku-4-5","max_tokens":64,"system":"Be brief.","messages":[{"role":"user","content":"Say hi."}],"temperature":0.2}`)
	resp := []byte(`{"id":"msg_1","type":"message","role":"assistant","model":"claude-haiku-4-5","content":[{"type":"text","text":"Hi."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":2}}`)
	alloctest.AtMost(t, "DecodeRequest", 16, func() error { _, err := DecodeRequest(req); return err })
	alloctest.AtMost(t, "DecodeResponse", 12, func() error { _, err := DecodeResponse(resp); return err })
	usage := []byte(`{"input_tokens":12,"cache_read_input_tokens":0,"output_tokens":2}`)
	alloctest.AtMost(t, "ParseUsage", 3, func() error { _, err := ParseUsage(usage); return err })
	// The request the encoder builds stays on its stack too (marshalRequest's fallback
	// marshals a copy).
	neutral := &providers.Request{Model: "claude-haiku-4-5", System: "Be brief.", Messages: []providers.Message{
		{Role: providers.RoleUser, Content: []providers.Part{{Type: providers.PartText, Text: "Say hi."}}},
	}}
	alloctest.AtMost(t, "EncodeRequest", 9, func() error { _, err := EncodeRequest(neutral); return err })
}
