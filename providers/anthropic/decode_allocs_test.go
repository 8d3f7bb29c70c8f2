package anthropic

import (
	"errors"
	"strings"
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

// TestAppendResponseRoom: the message built on the writer's stack (its pointers set there)
// writes what marshalResponse, the fallback that builds its own and hands it to json.Marshal,
// writes, for text, thinking, a stop sequence and tool calls; the fast path, into a buffer
// with room, allocates nothing for a text answer (its blocks, stop reason and usage were four
// allocations); and the buffer messageSize sizes holds a long answer's escapes.
func TestAppendResponseRoom(t *testing.T) {
	usage := providers.Usage{Input: 12, CacheRead: 3, CacheWrite: 2, Output: 7, Reasoning: 4}
	text := &providers.Response{ID: "msg_1", Model: "m-1", Text: "Hello <there> \"you\"\n", FinishReason: providers.FinishStop, Usage: usage}
	for _, r := range []*providers.Response{
		text,
		{ID: "msg_2", Model: "m-1", Reasoning: "Hmm.", ReasoningSignature: "sig", Text: "Yes.", Usage: usage},
		{ID: "msg_3", Model: "m-1", Text: "Up to", StopSequence: "END", FinishReason: providers.FinishStop},
		{ID: "msg_4", Model: "m-1", Text: "Calling.", ToolCalls: []providers.ToolCall{{ID: "toolu_1", Name: "f", Arguments: `{"a":1}`}, {ID: "toolu_2", Name: "g"}}},
	} {
		fast, added, err := AppendResponseWith(nil, r, "gen_1", "", providers.Additions{})
		if err != nil || !added {
			t.Fatalf("fast path: %v, added %v", err, added)
		}
		slow, err := marshalResponse(r, "gen_1", "", providers.Additions{})
		if err != nil || string(fast) != string(slow) {
			t.Fatalf("fast path wrote\n%s\njson.Marshal\n%s (%v)", fast, slow, err)
		}
	}
	buf := make([]byte, 0, 4096)
	alloctest.AtMost(t, "AppendResponseWith", 0, func() error {
		_, _, err := AppendResponseWith(buf[:0], text, "gen_1", "", providers.Additions{})
		return err
	})
	// Text as models write it, at any length, fits quoted in the room messageSize makes for
	// the message: no second allocation to grow it.
	const paragraph = "The gateway checks the key, then the wallet. It routes the request to the \"cheapest\" provider that serves the model, and writes what it cost.\n"
	for _, n := range []int{1, 15, 150, 1500} {
		r := *text
		r.Text = strings.Repeat(paragraph, n)
		var room responseRoom
		room.fill(&r, "gen_1", "", providers.Additions{})
		room.msg.Content, room.msg.StopReason = room.content(), &room.stop
		room.msg.Usage = AppendUsage(room.usage[:0], r.Usage)
		if b, ok := appendMessage(nil, &room.msg); !ok || len(b) > messageSize(&room.msg) {
			t.Errorf("%d bytes of prose: a message of %d bytes, more than messageSize's %d", len(r.Text), len(b), messageSize(&room.msg))
		}
	}
}

// TestStreamEncoderAllocations: encoding a usual streamed message (its start, 16 text
// deltas, its finish) allocates nothing once encoders are pooled: every frame is written in
// the encoder's buffer, and Release hands it to the next stream. Each stream's new encoder
// took 13 allocations (and, with message_start, content_block_start and message_delta grown
// from their first words and the buffer from nothing, 23).
func TestStreamEncoderAllocations(t *testing.T) {
	usage := providers.Usage{Input: 1117, CacheRead: 1024, CacheWrite: 93, Output: 4096, Reasoning: 812}
	text := providers.Event{Type: providers.EventText, Text: " the weather in Paris today ~t3@1764118800123456789"}
	alloctest.AtMost(t, "a stream of 16 text deltas", 0, func() error {
		e := NewStreamEncoder("msg_01XFDUDYJgAACzvnptvVoYEL", "claude-sonnet-4-5-20250929")
		e.Start(usage)
		for range 16 {
			if len(e.Encode(text)) == 0 {
				return errors.New("no frame for a text delta")
			}
		}
		if len(e.Finish(providers.FinishStop, "", usage)) == 0 {
			return errors.New("no frame at the finish")
		}
		e.Release()
		return nil
	})
}
