package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/bufs"
	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
	"github.com/modelgateway/caddy-modelgateway/providers/sse"
)

// drainTimeout bounds how long Close reads the rest of a finished stream, which lets the
// connection go back to the pool instead of paying a new TLS handshake. A variable for tests.
var drainTimeout = 200 * time.Millisecond

// chatStream turns an upstream chat completions SSE body into neutral events. No goroutine
// is involved: Next reads the body; the idle watchdog is a timer that closes it.
//
// A frame that is not a chunk (data that is not JSON, or JSON of the wrong shape) is
// skipped whole and counted (SkippedFrames); an error frame ends the stream with an error.
// A body that ends cleanly without [DONE] ends the stream cleanly, completed with what is
// pending (see complete); a body that breaks off (transport error, idle timeout) is an error.
type chatStream struct {
	conn *upstreamhttp.StreamConn // [DONE] marks it done
	rd   *sse.Reader

	pending []providers.Event
	pos     int
	cur     providers.Event
	err     error
	ended   bool

	sawFinish, sawToolCall bool
	usage                  providers.Usage // the last usage the upstream sent
	usageLast              bool            // the last event sent was EventUsage with usage
	calls                  []callIndex
	skipped                atomic.Int64 // frames skipped as malformed
	// choices is the last chunk's choices, whose room the next chunk's are decoded in: its
	// events hold nothing of them.
	choices []ChunkChoice
}

// callIndex maps an upstream tool call to its neutral index.
type callIndex struct {
	upstream int
	id       string
	neutral  int
}

func newChatStream(ctx context.Context, provider string, at *upstreamhttp.Attempt, body *upstreamhttp.IdleBody) *chatStream {
	return &chatStream{conn: upstreamhttp.NewStreamConn(ctx, provider, at, body), rd: sse.NewReader(body, 0)}
}

var _ providers.Waiter = (*chatStream)(nil)

// OnWait implements providers.Waiter.
func (s *chatStream) OnWait(f func()) { s.rd.OnWait(f) }

// Next implements providers.Stream.
func (s *chatStream) Next() bool {
	for {
		if s.pos < len(s.pending) {
			s.cur = s.pending[s.pos]
			s.pos++
			return true
		}
		if s.ended {
			return false
		}
		s.pending, s.pos = s.pending[:0], 0
		if !s.rd.Next() {
			// A clean end without [DONE], as some compatible servers send, is completed.
			err := s.conn.ReadEnd(s.rd.Err(), ErrMalformedFrame)
			if err == nil {
				s.complete()
			}
			s.end(err)
			continue
		}
		if err := s.handle(s.rd.Event()); err != nil {
			s.pending = s.pending[:0]
			s.end(err)
			continue
		}
		if n := len(s.pending); n > 0 {
			s.usageLast = s.pending[n-1].Type == providers.EventUsage
		}
	}
}

// complete adds what a body that ended cleanly without [DONE] leaves pending: the finish
// when none came (stop, or tool_calls after tool calls, as for a finish reason the adapter
// does not know), then the last usage known, zero when none came, unless the last event
// already carried it.
func (s *chatStream) complete() {
	if !s.sawFinish {
		s.sawFinish = true
		s.pending = append(s.pending, providers.Event{
			Type:         providers.EventFinish,
			FinishReason: finishReason("", s.sawToolCall),
		})
		s.usageLast = false
	}
	if !s.usageLast {
		s.usageLast = true
		s.pending = append(s.pending, providers.Event{Type: providers.EventUsage, Usage: s.usage})
	}
}

// SkippedFrames is the number of frames skipped as malformed so far. It may be called from
// any goroutine.
func (s *chatStream) SkippedFrames() int { return int(s.skipped.Load()) }

// skip counts a malformed frame, which is then ignored.
func (s *chatStream) skip() { s.skipped.Add(1) }

func (s *chatStream) end(err error) {
	s.ended = true
	s.err = err
	s.conn.Body.Stop()
	s.rd.Release()
}

// Current implements providers.Stream.
func (s *chatStream) Current() providers.Event { return s.cur }

// Err implements providers.Stream.
func (s *chatStream) Err() error { return s.err }

// Close implements providers.Stream. It may be called at any time and more than once.
func (s *chatStream) Close() error {
	s.conn.Close(drainTimeout)
	return nil
}

// handle turns one SSE event into pending neutral events. An error frame is returned as
// the stream's error; a malformed frame is counted and skipped whole: it is decoded
// completely before it changes anything.
func (s *chatStream) handle(ev sse.Event) error {
	switch ev.Name {
	case "", "message", "error":
	default:
		return nil // not part of the chat format
	}
	data := bytes.TrimSpace(ev.Data)
	if len(data) == 0 {
		return nil
	}
	if ev.Name != "error" && string(data) == "[DONE]" {
		s.conn.MarkDone()
		s.end(nil)
		return nil
	}
	var c ChatChunk
	c.Choices = s.choices[:0]
	// The chunk's content and reasoning stay in data: they are read into the events below.
	ok := c.decodeFrame(data)
	s.choices = c.Choices
	if !ok {
		// As in DecodeChatRequest: the fast path (fastdecode.go) takes the usual chunks and
		// leaves the rest, malformed frames included, to json.Unmarshal from a zero struct
		// (UnmarshalFresh, which keeps c off the heap for every chunk).
		if err := rawjson.UnmarshalFresh(data, &c); err != nil {
			var probe struct {
				Error json.RawMessage `json:"error"`
			}
			if ev.Name == "error" || (json.Unmarshal(data, &probe) == nil && !isFalsy(probe.Error)) {
				return streamError(s.conn.Provider, data)
			}
			s.skip()
			return nil
		}
	}
	if ev.Name == "error" || !isFalsy(c.Error) {
		return streamError(s.conn.Provider, data)
	}
	usage := c.Usage
	if isNull(usage) && c.XGroq != nil {
		usage = c.XGroq.Usage
	}
	var u providers.Usage
	if !isNull(usage) {
		var err error
		if u, err = ParseChatUsage(usage); err != nil {
			s.skip()
			return nil
		}
	}
	var buf [1]string
	texts := buf[:0] // the content of each choice 0, decoded before anything is emitted
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue // the neutral model has one choice
		}
		text, err := contentText(ch.Delta.Content)
		if err != nil {
			s.skip()
			return nil
		}
		texts = append(texts, text)
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue
		}
		text := texts[0]
		texts = texts[1:]
		if r := reasoningText(ch.Delta.ReasoningContent, ch.Delta.Reasoning); r != "" {
			s.pending = append(s.pending, providers.Event{Type: providers.EventReasoning, Text: r})
		}
		if text == "" && ch.Delta.Refusal != nil {
			text = *ch.Delta.Refusal
		}
		if text != "" {
			s.pending = append(s.pending, providers.Event{Type: providers.EventText, Text: text})
		}
		for i, tc := range ch.Delta.ToolCalls {
			s.sawToolCall = true
			s.pending = append(s.pending, providers.Event{
				Type:  providers.EventToolCall,
				Index: s.callIndex(tc, i),
				ToolCall: providers.ToolCall{
					ID:        tc.ID,
					Name:      tc.Function.Name,
					Arguments: string(tc.Function.Arguments),
				},
			})
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" && !s.sawFinish {
			s.sawFinish = true
			s.pending = append(s.pending, providers.Event{
				Type:         providers.EventFinish,
				FinishReason: finishReason(*ch.FinishReason, s.sawToolCall),
			})
		}
	}
	if !isNull(usage) {
		s.usage = u
		s.pending = append(s.pending, providers.Event{Type: providers.EventUsage, Usage: u})
	}
	return nil
}

// callIndex gives a tool call piece its neutral index: calls are numbered 0..n-1 in the
// order they appear, whatever the upstream's numbering. A new id on an index already used
// by another call starts a new call (some servers number every call 0), and a piece without
// an index belongs to the call of the last id.
func (s *chatStream) callIndex(tc ChunkToolCall, pos int) int {
	up := pos
	switch {
	case tc.Index != nil:
		up = *tc.Index
	case tc.ID != "":
		for _, c := range s.calls {
			if c.id == tc.ID {
				return c.neutral
			}
		}
		up = -1 - len(s.calls) // a fresh upstream key that cannot collide
	case len(s.calls) > 0:
		return s.calls[len(s.calls)-1].neutral
	}
	for i := len(s.calls) - 1; i >= 0; i-- {
		c := &s.calls[i]
		if c.upstream != up {
			continue
		}
		if tc.ID == "" || c.id == "" || c.id == tc.ID {
			if c.id == "" {
				c.id = tc.ID
			}
			return c.neutral
		}
		break // same index, another id: a new call
	}
	n := len(s.calls)
	s.calls = append(s.calls, callIndex{upstream: up, id: tc.ID, neutral: n})
	return n
}

// isFalsy tells whether a JSON value is absent or falsy, as the SDKs test the error key.
func isFalsy(raw json.RawMessage) bool {
	switch string(bytes.TrimSpace(raw)) {
	case "", "null", "false", `""`, "0":
		return true
	}
	return false
}

// responseEvents is a complete answer as the events a stream would have carried.
func responseEvents(r *providers.Response) []providers.Event {
	events := make([]providers.Event, 0, len(r.ToolCalls)+4)
	if r.Reasoning != "" {
		events = append(events, providers.Event{Type: providers.EventReasoning, Text: r.Reasoning})
	}
	if r.Text != "" {
		events = append(events, providers.Event{Type: providers.EventText, Text: r.Text})
	}
	for i, tc := range r.ToolCalls {
		events = append(events, providers.Event{Type: providers.EventToolCall, Index: i, ToolCall: tc})
	}
	return append(events,
		providers.Event{Type: providers.EventFinish, FinishReason: r.FinishReason},
		providers.Event{Type: providers.EventUsage, Usage: r.Usage})
}

// ChunkEncoder writes neutral stream events as chat.completion.chunk objects, for the
// gateway's chat surface. All chunks share the id, model and created time. The first chunk
// carries delta.role "assistant"; a tool call's id, type and name go only with its first
// piece. It never writes a top-level "error" key, which clients would take for an error.
type ChunkEncoder struct {
	prefix   []byte
	buf      []byte
	sentRole bool
	calls    []sentCall
}

type sentCall struct {
	index          int
	sentID, sentFn bool
}

// NewChunkEncoder returns an encoder of chunks with this id, model and creation time (Unix
// seconds). Call Release once its last chunk is written.
func NewChunkEncoder(id, model string, created int64) *ChunkEncoder {
	return chunkEncoders.Get().(*ChunkEncoder).init(id, model, created)
}

// init writes e's prefix, the chunks' common start.
func (e *ChunkEncoder) init(id, model string, created int64) *ChunkEncoder {
	p := e.prefix[:0]
	if p == nil {
		p = make([]byte, 0, 64+len(id)+len(model)) // room for both quoted, and the rest
	}
	p = append(p, `{"id":`...)
	p = rawjson.AppendString(p, id)
	p = append(p, `,"object":"chat.completion.chunk","created":`...)
	p = strconv.AppendInt(p, created, 10)
	p = append(p, `,"model":`...)
	p = rawjson.AppendString(p, model)
	p = append(p, ',')
	e.prefix = p
	return e
}

// chunkEncoders keeps released encoders with their buffers: each stream's encoder had
// allocated its own, about 700 bytes of every translated stream's heap.
var chunkEncoders = sync.Pool{New: func() any { return &ChunkEncoder{buf: make([]byte, 0, chunkRoom)} }}

// chunkRoom is what a new ChunkEncoder's buffer holds to begin with.
const chunkRoom = 512

// Release hands e and its buffers to the next stream's encoder. Neither e nor any chunk it
// returned may be used after it.
func (e *ChunkEncoder) Release() {
	e.reset()
	chunkEncoders.Put(e)
}

// reset makes e a new encoder, with no prefix yet, that keeps its buffers.
func (e *ChunkEncoder) reset() {
	*e = ChunkEncoder{prefix: bufs.Reuse(e.prefix, 0), buf: bufs.Reuse(e.buf, chunkRoom), calls: e.calls[:0]}
}

// Encode returns the JSON of the chunk for ev, false when ev makes no chunk (empty text,
// reasoning, which the chat format has no field for, an unknown event). The JSON is only
// valid until the next call (or Release). EventUsage makes the usage chunk, with empty
// choices: callers send it once, with the final usage, after the finish.
func (e *ChunkEncoder) Encode(ev providers.Event) ([]byte, bool) {
	b := append(e.buf[:0], e.prefix...)
	switch ev.Type {
	case providers.EventText:
		if ev.Text == "" {
			return nil, false
		}
		b = e.openDelta(b)
		b = append(b, `"content":`...)
		b = rawjson.AppendString(b, ev.Text)
		b = append(b, `},"logprobs":null,"finish_reason":null}]}`...)
	case providers.EventToolCall:
		b = e.openDelta(b)
		b = append(b, `"tool_calls":[{"index":`...)
		b = strconv.AppendInt(b, int64(ev.Index), 10)
		c := e.call(ev.Index)
		if !c.sentID && ev.ToolCall.ID != "" {
			c.sentID = true
			b = append(b, `,"id":`...)
			b = rawjson.AppendString(b, ev.ToolCall.ID)
			b = append(b, `,"type":"function"`...)
		}
		b = append(b, `,"function":{`...)
		if !c.sentFn && ev.ToolCall.Name != "" {
			c.sentFn = true
			b = append(b, `"name":`...)
			b = rawjson.AppendString(b, ev.ToolCall.Name)
			b = append(b, ',')
		}
		b = append(b, `"arguments":`...)
		b = rawjson.AppendString(b, ev.ToolCall.Arguments)
		b = append(b, `}}]},"logprobs":null,"finish_reason":null}]}`...)
	case providers.EventFinish:
		reason := ev.FinishReason
		if reason == "" {
			reason = providers.FinishStop
		}
		// An empty answer has had no chunk yet: the role goes here.
		b = e.openDelta(b)
		if b[len(b)-1] == ',' {
			b = b[:len(b)-1]
		}
		b = append(b, `},"logprobs":null,"finish_reason":`...)
		b = rawjson.AppendString(b, string(reason))
		b = append(b, `}]}`...)
	case providers.EventUsage:
		b = append(b, `"choices":[],"usage":`...)
		b = AppendChatUsage(b, ev.Usage)
		b = append(b, '}')
	default:
		return nil, false
	}
	e.buf = b
	return b, true
}

// openDelta starts the single choice and its delta, with the role the first time.
func (e *ChunkEncoder) openDelta(b []byte) []byte {
	b = append(b, `"choices":[{"index":0,"delta":{`...)
	if !e.sentRole {
		e.sentRole = true
		b = append(b, `"role":"assistant",`...)
	}
	return b
}

func (e *ChunkEncoder) call(index int) *sentCall {
	for i := range e.calls {
		if e.calls[i].index == index {
			return &e.calls[i]
		}
	}
	e.calls = append(e.calls, sentCall{index: index})
	return &e.calls[len(e.calls)-1]
}

// AppendChatUsage appends neutral usage as a chat usage object (translation map §2.3).
func AppendChatUsage(b []byte, u providers.Usage) []byte {
	b = append(b, `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, u.PromptTokens(), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, u.CompletionTokens(), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, u.Total(), 10)
	b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, u.CacheRead, 10)
	b = append(b, `,"cache_write_tokens":`...)
	b = strconv.AppendInt(b, u.CacheWrite, 10)
	b = append(b, `},"completion_tokens_details":{"reasoning_tokens":`...)
	b = strconv.AppendInt(b, u.Reasoning, 10)
	return append(b, `}}`...)
}
