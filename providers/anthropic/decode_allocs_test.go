package anthropic

import (
	"testing"

	"github.com/modelgateway/caddy-modelgateway/internal/alloctest"
)

// TestDecodeAllocations: the fast decoders' structs stay on the stack (the slow path's
// json.Unmarshal goes through rawjson.UnmarshalFresh): decoding a usual request or answer
// allocates what the neutral model keeps, and not the wire struct too (one more each).
func TestDecodeAllocations(t *testing.T) {
	req := []byte(`{"model":"claude-haiku-4-5","max_tokens":64,"system":"Be brief.","messages":[{"role":"user","content":"Say hi."}],"temperature":0.2}`)
	resp := []byte(`{"id":"msg_1","type":"message","role":"assistant","model":"claude-haiku-4-5","content":[{"type":"text","text":"Hi."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":2}}`)
	alloctest.AtMost(t, "DecodeRequest", 16, func() error { _, err := DecodeRequest(req); return err })
	alloctest.AtMost(t, "DecodeResponse", 12, func() error { _, err := DecodeResponse(resp); return err })
}
