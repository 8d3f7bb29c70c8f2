package openai

import (
	"testing"

	"github.com/modelgateway/caddy-modelgateway/internal/alloctest"
	"github.com/modelgateway/caddy-modelgateway/providers/sse"
)

// TestDecodeAllocations: the fast decoders' structs stay on the stack (the slow path's
// json.Unmarshal goes through rawjson.UnmarshalFresh): decoding a usual request or answer
// allocates what the neutral model keeps, and not the wire struct too (one more each), and
// so does the usage parser.
func TestDecodeAllocations(t *testing.T) {
	req := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Say hi."}],"max_tokens":64,"temperature":0.2}`)
	resp := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Hi."},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":2,"total_tokens":14}}`)
	alloctest.AtMost(t, "DecodeChatRequest", 13, func() error { _, err := DecodeChatRequest(req); return err })
	alloctest.AtMost(t, "DecodeChatResponse", 8, func() error { _, err := DecodeChatResponse(resp); return err })
	usage := []byte(`{"prompt_tokens":12,"completion_tokens":2,"total_tokens":14,"prompt_tokens_details":{"cached_tokens":0}}`)
	alloctest.AtMost(t, "ParseChatUsage", 1, func() error { _, err := ParseChatUsage(usage); return err })
	// A text chunk of a stream that asks for usage (null on every chunk but the last): its
	// content's raw copy and its text, and nothing for its id, model and null usage.
	chunk := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":" there"},"finish_reason":null}],"usage":null}`)
	s := &chatStream{}
	alloctest.AtMost(t, "chatStream.handle", 2, func() error {
		s.pending = s.pending[:0]
		return s.handle(sse.Event{Data: chunk})
	})
}
