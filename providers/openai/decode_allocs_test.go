package openai

import (
	"strings"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/internal/alloctest"
	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/providers"
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
	// text, and nothing for its id, model and null usage, nor for its content's raw value,
	// read where it is in the frame (decodeFrame; a copy of it was a second allocation).
	chunk := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":" there"},"finish_reason":null}],"usage":null}`)
	s := &chatStream{}
	alloctest.AtMost(t, "chatStream.handle", 1, func() error {
		s.pending = s.pending[:0]
		return s.handle(sse.Event{Data: chunk})
	})
}

// TestAppendChatResponseRoom: the chat answer built on the writer's stack (its pointers set
// there) writes what marshalChatResponse, the fallback that builds its own and hands it to
// json.Marshal, writes; the fast path, into a buffer with room, allocates its content's JSON
// only, not the answer, its usage and finish reason too (five more before); and that JSON's
// buffer holds the escapes of text as models write it (quotedRoom).
func TestAppendChatResponseRoom(t *testing.T) {
	resp := &providers.Response{ID: "msg_1", Model: "m-1", Text: "Hello <there> \"you\"\n", FinishReason: providers.FinishStop,
		Usage: providers.Usage{Input: 12, CacheRead: 3, CacheWrite: 2, Output: 7, Reasoning: 4}}
	tool := &providers.Response{ID: "msg_2", Model: "m-1", ToolCalls: []providers.ToolCall{{ID: "call_1", Name: "f", Arguments: `{"a":1}`}}}
	for _, r := range []*providers.Response{resp, tool} {
		fast, added, err := AppendChatResponseWith(nil, r, "gen_1", 1700000000, providers.Additions{})
		if err != nil || !added {
			t.Fatalf("fast path: %v, added %v", err, added)
		}
		slow, err := marshalChatResponse(r, "gen_1", 1700000000, providers.Additions{})
		if err != nil || string(fast) != string(slow) {
			t.Fatalf("fast path wrote\n%s\njson.Marshal\n%s (%v)", fast, slow, err)
		}
	}
	buf := make([]byte, 0, 4096)
	plain := *resp
	plain.Text = "Hello there."
	alloctest.AtMost(t, "AppendChatResponseWith", 1, func() error {
		_, _, err := AppendChatResponseWith(buf[:0], &plain, "gen_1", 1700000000, providers.Additions{})
		return err
	})
	// Text as models write it, at any length, fits quoted in the room jsonString makes for it:
	// no second allocation to grow it.
	for _, n := range []int{100, 2_000, 20_000, 200_000} {
		s := proseOf(n)
		if q := rawjson.AppendStringLikeMarshal(nil, s); len(q) > quotedRoom(len(s)) {
			t.Errorf("%d bytes of prose take %d quoted, more than quotedRoom's %d", len(s), len(q), quotedRoom(len(s)))
		}
	}
}

// proseOf is about n bytes of text as a model writes an answer: sentences with a quote now
// and then, a new line at each paragraph's end.
func proseOf(n int) string {
	const paragraph = "The gateway checks the key, then the wallet. It routes the request to the \"cheapest\" provider that serves the model, and writes what it cost.\n"
	return strings.Repeat(paragraph, max(n/len(paragraph), 1))
}
