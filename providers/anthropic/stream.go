package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
// connection go back to the pool instead of paying a new TLS handshake.
const drainTimeout = 200 * time.Millisecond

// maxBlocks bounds the content blocks of one streamed message, so that a hostile stream
// cannot grow the block table without limit.
const maxBlocks = 1 << 16

// errSkipFrame is what handle returns for a malformed frame: Next counts it and drops the
// frame whole. It never leaves the stream.
var errSkipFrame = errors.New("malformed frame skipped")

// blockKind is the kind of a content block, as far as the neutral model cares.
type blockKind uint8

const (
	blockNone blockKind = iota
	blockText
	blockThinking
	blockTool
	// blockOther is a block the neutral model has no place for (redacted thinking, server
	// tools and their results): its deltas are dropped.
	blockOther
)

// blockState is what the decoder knows of a started content block.
type blockState struct {
	kind blockKind
	tool int // the tool call's ordinal among the message's tool calls
}

// messagesStream turns an upstream Messages SSE body into neutral events. No goroutine is
// involved: Next reads the body; the idle watchdog is a timer that closes it.
//
// A frame that is not the expected JSON (not JSON, a missing field, a delta that does not
// fit its block...) is skipped whole and counted (SkippedFrames); an error event ends the
// stream with an error. A body that ends cleanly without message_stop ends the stream
// cleanly, completed with what is pending (see complete); a body that breaks off (transport
// error, idle timeout) is an error.
type messagesStream struct {
	conn *upstreamhttp.StreamConn // message_stop marks it done
	rd   *sse.Reader

	pending []providers.Event
	pos     int
	cur     providers.Event
	err     error
	ended   bool

	blocks                 map[int]blockState
	tools                  int
	usage                  usageCounters
	sawFinish, sawToolCall bool
	usageLast              bool         // the last event sent was EventUsage with usage
	skipped                atomic.Int64 // frames skipped as malformed
	// room is where each event's index and delta are decoded (streamEvent.room).
	room eventRoom
}

func newMessagesStream(ctx context.Context, provider string, at *upstreamhttp.Attempt, body *upstreamhttp.IdleBody) *messagesStream {
	return &messagesStream{
		conn:   upstreamhttp.NewStreamConn(ctx, provider, at, body),
		rd:     sse.NewReader(body, 0),
		blocks: make(map[int]blockState),
		// A message_delta makes two events (the finish and the usage): room for them from the
		// start, where growing from nothing took two allocations of every stream.
		pending: make([]providers.Event, 0, 2),
	}
}

var _ providers.Waiter = (*messagesStream)(nil)

// OnWait implements providers.Waiter.
func (s *messagesStream) OnWait(f func()) { s.rd.OnWait(f) }

// Next implements providers.Stream.
func (s *messagesStream) Next() bool {
	if s.conn.Closed() {
		if !s.ended {
			s.end(upstreamhttp.ErrClosed)
		}
		return false
	}
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
			// A clean end, with or without message_stop: what is missing is completed.
			err := s.conn.ReadEnd(s.rd.Err(), ErrMalformedFrame)
			if err == nil && !s.conn.Done() {
				s.complete()
			}
			s.end(err)
			continue
		}
		if err := s.handle(s.rd.Event()); err != nil {
			s.pending = s.pending[:0]
			if err == errSkipFrame {
				s.skipped.Add(1)
				continue
			}
			s.end(err)
			continue
		}
		if n := len(s.pending); n > 0 {
			s.usageLast = s.pending[n-1].Type == providers.EventUsage
		}
	}
}

// complete adds what a body that ended cleanly without message_stop leaves pending: the
// finish when none came (stop, or tool_calls after tool calls, as at message_stop), then the
// last usage known, zero when none came, unless the last event already carried it.
func (s *messagesStream) complete() {
	if !s.sawFinish {
		s.finish("", nil)
		s.usageLast = false
	}
	if !s.usageLast {
		s.usageLast = true
		s.emit(providers.Event{Type: providers.EventUsage, Usage: s.usage.neutral()})
	}
}

// SkippedFrames is the number of frames skipped as malformed so far. It may be called from
// any goroutine.
func (s *messagesStream) SkippedFrames() int { return int(s.skipped.Load()) }

func (s *messagesStream) end(err error) {
	s.ended = true
	s.err = err
	s.conn.Body.Stop()
	s.rd.Release()
}

// Current implements providers.Stream.
func (s *messagesStream) Current() providers.Event { return s.cur }

// Err implements providers.Stream.
func (s *messagesStream) Err() error { return s.err }

// Close implements providers.Stream. It may be called at any time and more than once.
func (s *messagesStream) Close() error {
	s.conn.Close(drainTimeout)
	return nil
}

func (s *messagesStream) emit(ev providers.Event) { s.pending = append(s.pending, ev) }

// handle turns one SSE event into pending neutral events. As in the SDKs, "error" and "ping"
// are recognised by the event name and everything else by the data's type (the name when
// the data has none), so a server that omits event lines is read all the same. A malformed
// frame returns errSkipFrame before it changes anything.
func (s *messagesStream) handle(ev sse.Event) error {
	data := bytes.TrimSpace(ev.Data)
	switch ev.Name {
	case "ping":
		return nil
	case "error":
		return streamError(s.conn.Provider, data)
	}
	if len(data) == 0 {
		return nil
	}
	se := streamEvent{room: &s.room}
	if !se.fastDecode(data) {
		// A shape the fast path leaves to encoding/json, malformed frames included
		// (UnmarshalFresh, which keeps se off the heap for every event).
		if rawjson.UnmarshalFresh(data, &se) != nil {
			return errSkipFrame
		}
	}
	typ := se.Type
	if typ == "" {
		typ = ev.Name
	}
	switch typ {
	case "message_start":
		if se.Message != nil {
			u, err := decodeUsage(se.Message.Usage)
			if err != nil {
				return errSkipFrame
			}
			if u != nil {
				s.usage.merge(u)
			}
			s.emit(providers.Event{Type: providers.EventUsage, Usage: s.usage.neutral()})
		}
	case "content_block_start":
		// No index or no block; an index out of range.
		if se.Index == nil || se.ContentBlock == nil || *se.Index < 0 || len(s.blocks) >= maxBlocks {
			return errSkipFrame
		}
		return s.startBlock(*se.Index, se.ContentBlock)
	case "content_block_delta":
		if se.Index == nil || se.Delta == nil {
			return errSkipFrame
		}
		return s.delta(*se.Index, se.Delta)
	case "content_block_stop", "ping":
	case "message_delta":
		u, err := decodeUsage(se.Usage)
		if err != nil {
			return errSkipFrame
		}
		if d := se.Delta; d != nil && d.StopReason != nil && !s.sawFinish {
			s.finish(*d.StopReason, d.StopSequence)
		}
		if u != nil {
			s.usage.merge(u)
			s.emit(providers.Event{Type: providers.EventUsage, Usage: s.usage.neutral()})
		}
	case "message_stop":
		if !s.sawFinish {
			s.finish("", nil)
		}
		s.conn.MarkDone()
		s.end(nil)
	case "error":
		return streamError(s.conn.Provider, data)
	}
	// Unknown event types are future additions to the protocol: skipped, as the SDKs do.
	return nil
}

func (s *messagesStream) finish(stopReason string, stopSequence *string) {
	s.sawFinish = true
	ev := providers.Event{Type: providers.EventFinish, FinishReason: FinishReason(stopReason)}
	if ev.FinishReason == providers.FinishStop && s.sawToolCall {
		ev.FinishReason = providers.FinishToolCalls
	}
	if stopSequence != nil {
		ev.StopSequence = *stopSequence
	}
	s.emit(ev)
}

// decodeUsage decodes a usage object, nil when there is none. Merged into the running
// counters, each counter it carries replaces the previous value (message_delta's are
// cumulative), never adds to it.
func decodeUsage(raw json.RawMessage) (*Usage, error) {
	if isNull(bytes.TrimSpace(raw)) {
		return nil, nil
	}
	// raw comes from a decoded event, so it is valid JSON; rawjson.Valid keeps the fast path's
	// precondition local all the same, at little cost for an object this small.
	var u Usage
	if !rawjson.Valid(raw) || !u.fastDecode(raw) {
		u = Usage{}
		if err := json.Unmarshal(raw, &u); err != nil {
			return nil, fmt.Errorf("decoding usage: %w", err)
		}
	}
	return &u, nil
}

func (s *messagesStream) startBlock(index int, b *ContentBlock) error {
	st := blockState{kind: blockOther}
	switch b.Type {
	case "text":
		st.kind = blockText
		if b.Text != nil && *b.Text != "" {
			s.emit(providers.Event{Type: providers.EventText, Text: *b.Text})
		}
	case "thinking":
		st.kind = blockThinking
		ev := providers.Event{Type: providers.EventReasoning}
		if b.Thinking != nil {
			ev.Text = *b.Thinking
		}
		if b.Signature != nil {
			ev.Signature = providers.Tag(providers.SigAnthropic, *b.Signature)
		}
		if ev.Text != "" || ev.Signature != "" {
			s.emit(ev)
		}
	case "tool_use":
		ev := providers.Event{Type: providers.EventToolCall, ToolCall: providers.ToolCall{ID: b.ID, Name: b.Name}}
		// The API starts with "input":{} and streams the input; a server that sends the
		// whole input here instead is read too.
		if in := bytes.TrimSpace(b.Input); len(in) > 2 && in[0] == '{' {
			args, err := decodeInput(in)
			if err != nil {
				return errSkipFrame
			}
			if args != "{}" {
				ev.ToolCall.Arguments = args
			}
		}
		st.kind, st.tool = blockTool, s.tools
		s.tools++
		s.sawToolCall = true
		ev.Index = st.tool
		s.emit(ev)
	}
	s.blocks[index] = st
	return nil
}

// delta handles a content block delta; one that does not fit its block is errSkipFrame.
func (s *messagesStream) delta(index int, d *streamDelta) error {
	st, ok := s.blocks[index]
	if !ok {
		// A delta for a block that never started cannot be attributed; text still can.
		st.kind = blockNone
	}
	switch d.Type {
	case "text_delta":
		if st.kind == blockOther || st.kind == blockTool || st.kind == blockThinking {
			return errSkipFrame // text_delta for a non-text block
		}
		if d.Text != "" {
			s.emit(providers.Event{Type: providers.EventText, Text: d.Text})
		}
	case "thinking_delta", "signature_delta":
		if st.kind == blockOther {
			return nil
		}
		if st.kind != blockThinking && st.kind != blockNone {
			return errSkipFrame // a thinking delta for a non-thinking block
		}
		ev := providers.Event{Type: providers.EventReasoning, Text: d.Thinking}
		if d.Type == "signature_delta" {
			// The API sends a block's whole signature in one signature_delta.
			ev = providers.Event{Type: providers.EventReasoning, Signature: providers.Tag(providers.SigAnthropic, d.Signature)}
		}
		if ev.Text != "" || ev.Signature != "" {
			s.emit(ev)
		}
	case "input_json_delta":
		switch st.kind {
		case blockOther:
			return nil // a server tool's input
		case blockTool:
		default:
			return errSkipFrame // input_json_delta for a block that is not a tool_use
		}
		if d.PartialJSON != "" {
			s.emit(providers.Event{Type: providers.EventToolCall, Index: st.tool, ToolCall: providers.ToolCall{Arguments: d.PartialJSON}})
		}
	}
	// citations_delta and future delta types carry nothing the neutral model holds.
	return nil
}

// responseEvents is a complete answer as the events a stream would have carried.
func responseEvents(r *providers.Response) []providers.Event {
	events := make([]providers.Event, 0, len(r.ToolCalls)+4)
	if r.Reasoning != "" || r.ReasoningSignature != "" {
		events = append(events, providers.Event{Type: providers.EventReasoning, Text: r.Reasoning, Signature: r.ReasoningSignature})
	}
	if r.Text != "" {
		events = append(events, providers.Event{Type: providers.EventText, Text: r.Text})
	}
	for i, tc := range r.ToolCalls {
		events = append(events, providers.Event{Type: providers.EventToolCall, Index: i, ToolCall: tc})
	}
	return append(events,
		providers.Event{Type: providers.EventFinish, FinishReason: r.FinishReason, StopSequence: r.StopSequence},
		providers.Event{Type: providers.EventUsage, Usage: r.Usage})
}

// Frame is one event of an Anthropic stream: its name and its JSON data, whose "type" is
// the same name. Write it with sse.WriteEvent(w, f.Event, f.Data).
type Frame struct {
	Event string
	Data  []byte
}

// StreamEncoder writes neutral stream events as the Anthropic Messages SSE sequence, for the
// gateway's messages surface: message_start, then for each content block
// content_block_start, its deltas and content_block_stop, then one message_delta with
// stop_reason and usage, then message_stop. It is what the SDKs' stream accumulators
// (anthropic-sdk-go Message.Accumulate, the TypeScript MessageStream) require: message_start
// first, a block started before its deltas, block indexes 0, 1, 2... in order, and
// usage.output_tokens in message_delta.
//
// Blocks open on demand: text (text_delta), thinking (thinking_delta, signature_delta) and
// one tool_use block per neutral tool call index (input_json_delta). The current block
// closes when the kind or the tool call changes, with one exception: a tool_use block whose
// arguments are not yet complete JSON stays open until Finish, so that a late piece of an
// interleaved call still reaches its block (the Go SDK resets the input of a block stopped
// with incomplete JSON). The encoder is not safe for concurrent use. The frames each call
// returns (Start, Encode, Finish) are valid only until the next call: write them out first.
// The encoder reuses its buffers from one call to the next, and Release hands them to the
// next stream's encoder, so that a stream's frames allocate nothing once its buffers have
// grown to fit.
type StreamEncoder struct {
	id, model string

	started, finished bool
	next              int       // index of the next content block
	cur               blockKind // kind of the current block, blockNone when none
	curIndex          int       // content block index of the current block
	curTool           int       // neutral tool index, when cur is blockTool
	signed            bool      // the current thinking block has had its signature
	args              []byte    // the arguments sent so far to the current tool block
	lingering         []int     // tool blocks left open with incomplete arguments
	tools             map[int]int
	sawTool           bool

	// frames and buf are what Encode returns, reused from one call to the next.
	frames []Frame
	buf    []byte
}

// NewStreamEncoder returns an encoder of the message with this id and model.
// Call Release once its last frames are written.
func NewStreamEncoder(id, model string) *StreamEncoder {
	e := streamEncoders.Get().(*StreamEncoder)
	e.id, e.model = id, model
	return e
}

// streamEncoders keeps released encoders with their buffers: each stream's encoder had
// allocated its own, 700-900 bytes of every translated stream's heap (the buffer, the frames,
// message_start, each block's start and stop, message_delta), which the collector then
// had to reclaim.
var streamEncoders = sync.Pool{New: func() any {
	// buf has room for the frames of a usual event from the start: grown from nothing, it
	// took three or four allocations in the first events of every stream.
	return &StreamEncoder{tools: make(map[int]int), buf: make([]byte, 0, encodeRoom)}
}}

// encodeRoom is what a new StreamEncoder's buffer holds to begin with: a text delta's frame
// is about 80 bytes and its text, the first event's frames (a block's start and its delta) a
// little more, message_start about 300.
const encodeRoom = 512

// Release hands e and its buffers to the next stream's encoder. Neither e nor any frame it
// returned may be used after it.
func (e *StreamEncoder) Release() {
	e.reset()
	streamEncoders.Put(e)
}

// reset makes e a new encoder, with no id or model yet, that keeps its buffers.
func (e *StreamEncoder) reset() {
	buf, frames, args, lingering, tools := bufs.Reuse(e.buf, encodeRoom), e.frames[:0], bufs.Reuse(e.args, 0), e.lingering[:0], e.tools
	clear(frames[:cap(frames)]) // their data is in buf, or a buffer that grew away from it
	clear(tools)
	*e = StreamEncoder{buf: buf, frames: frames, args: args, lingering: lingering, tools: tools}
}

// put appends a frame whose data is buf from start, capped there, so that nothing appended
// to the buffer later reaches it, and still valid if the buffer moves on growing.
func (e *StreamEncoder) put(frames []Frame, event string, b []byte, start int) []Frame {
	e.buf = b
	return append(frames, Frame{Event: event, Data: b[start:len(b):len(b)]})
}

// Start returns message_start, with u's input and cache counts (emit the real ones: clients
// read input usage from here) and its output so far, usually 0. It returns nothing when the
// message has already started; Encode and Finish start it with zero usage if needed.
func (e *StreamEncoder) Start(u providers.Usage) []Frame {
	if e.started {
		return nil
	}
	e.buf = e.buf[:0]
	frames := e.start(e.frames[:0], u)
	e.frames = frames[:0]
	return frames
}

// start appends message_start to frames unless the message has started, its data written
// in e.buf after what the call wrote there before.
func (e *StreamEncoder) start(frames []Frame, u providers.Usage) []Frame {
	if e.started {
		return frames
	}
	e.started = true
	start := len(e.buf)
	b := append(e.buf, `{"type":"message_start","message":{"id":`...)
	b = rawjson.AppendString(b, e.id)
	b = append(b, `,"type":"message","role":"assistant","model":`...)
	b = rawjson.AppendString(b, e.model)
	b = append(b, `,"content":[],"stop_reason":null,"stop_sequence":null,"usage":`...)
	b = appendUsage(b, u, false)
	b = append(b, "}}"...)
	return e.put(frames, "message_start", b, start)
}

const (
	textBlock     = `{"type":"text","text":""}`
	thinkingBlock = `{"type":"thinking","thinking":"","signature":""}`
)

// Encode returns the frames of one neutral event: text, reasoning and tool call pieces.
// EventFinish and EventUsage make no frame: pass the final reason and usage to Finish.
// Nothing is encoded after Finish.
func (e *StreamEncoder) Encode(ev providers.Event) []Frame {
	if e.finished {
		return nil
	}
	frames := e.frames[:0]
	e.buf = e.buf[:0]
	defer func() { e.frames = frames[:0] }()
	switch ev.Type {
	case providers.EventText:
		if ev.Text == "" {
			return nil
		}
		frames = e.start(frames, providers.Usage{})
		if e.cur != blockText {
			frames = e.switchBlock(frames)
			frames = e.openBlock(frames, blockText, textBlock)
		}
		frames = e.delta(frames, e.curIndex, "text_delta", "text", ev.Text)
	case providers.EventReasoning:
		if ev.Text == "" && ev.Signature == "" {
			return nil
		}
		frames = e.start(frames, providers.Usage{})
		if ev.Text != "" {
			if e.cur != blockThinking || e.signed {
				frames = e.switchBlock(frames)
				frames = e.openBlock(frames, blockThinking, thinkingBlock)
			}
			frames = e.delta(frames, e.curIndex, "thinking_delta", "thinking", ev.Text)
		}
		if ev.Signature != "" {
			if e.cur != blockThinking {
				frames = e.switchBlock(frames)
				frames = e.openBlock(frames, blockThinking, thinkingBlock)
			}
			frames = e.delta(frames, e.curIndex, "signature_delta", "signature", providers.NativeSignature(providers.SigAnthropic, ev.Signature))
			e.signed = true
		}
	case providers.EventToolCall:
		frames = e.start(frames, providers.Usage{})
		e.sawTool = true
		var index int
		switch idx, seen := e.tools[ev.Index]; {
		case e.cur == blockTool && e.curTool == ev.Index:
			index = e.curIndex
			e.args = append(e.args, ev.ToolCall.Arguments...)
		case seen:
			// A late piece of an earlier call: its block is still open unless its arguments
			// were already complete, in which case the upstream broke them anyway.
			index = idx
		default:
			frames = e.switchBlock(frames)
			id := ev.ToolCall.ID
			if id == "" {
				id = "toolu_" + toolID(e.id) + "_" + strconv.Itoa(ev.Index)
			}
			cb := []byte(`{"type":"tool_use","id":`)
			cb = rawjson.AppendString(cb, id)
			cb = append(cb, `,"name":`...)
			cb = rawjson.AppendString(cb, ev.ToolCall.Name)
			cb = append(cb, `,"input":{}}`...)
			frames = e.openBlock(frames, blockTool, string(cb))
			e.curTool = ev.Index
			e.tools[ev.Index] = e.curIndex
			e.args = append(e.args[:0], ev.ToolCall.Arguments...)
			index = e.curIndex
		}
		if ev.ToolCall.Arguments != "" {
			frames = e.delta(frames, index, "input_json_delta", "partial_json", ev.ToolCall.Arguments)
		}
	}
	return frames
}

// Finish closes the open blocks and returns message_delta, with stop_reason (StopReason of
// reason and stopSeq; tool_use when the message had tool calls and reason is stop or empty),
// stop_sequence and the final usage u (output_tokens, required by the SDKs, and the input
// and cache counts), then message_stop. It returns nothing the second time.
func (e *StreamEncoder) Finish(reason providers.FinishReason, stopSeq string, u providers.Usage) []Frame {
	if e.finished {
		return nil
	}
	e.buf = e.buf[:0]
	frames := e.start(e.frames[:0], u)
	for _, index := range e.lingering {
		frames = e.stop(frames, index)
	}
	if e.cur != blockNone {
		frames = e.stop(frames, e.curIndex)
		e.cur = blockNone
	}
	e.finished = true
	if e.sawTool && (reason == "" || reason == providers.FinishStop) {
		reason = providers.FinishToolCalls
	}
	stop := StopReason(reason, stopSeq)
	start := len(e.buf)
	b := append(e.buf, `{"type":"message_delta","delta":{"stop_reason":`...)
	b = rawjson.AppendString(b, stop)
	b = append(b, `,"stop_sequence":`...)
	if stop == "stop_sequence" {
		b = rawjson.AppendString(b, stopSeq)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `},"usage":`...)
	b = appendUsage(b, u, true)
	b = append(b, '}')
	frames = e.put(frames, "message_delta", b, start)
	frames = append(frames, Frame{Event: "message_stop", Data: messageStop})
	e.frames = frames[:0]
	return frames
}

// messageStop is message_stop's data, the same for every stream: callers only read it.
var messageStop = []byte(`{"type":"message_stop"}`)

// ErrorFrame returns an in-stream error event: {"type":"error","error":{"type","message"}}.
// errType should be one of the API's error types (overloaded_error, api_error...), which
// the SDKs turn into their typed errors.
func ErrorFrame(errType, message string) Frame {
	b := []byte(`{"type":"error","error":{"type":`)
	b = rawjson.AppendString(b, errType)
	b = append(b, `,"message":`...)
	b = rawjson.AppendString(b, message)
	b = append(b, "}}"...)
	return Frame{Event: "error", Data: b}
}

func (e *StreamEncoder) openBlock(frames []Frame, kind blockKind, block string) []Frame {
	e.cur, e.curIndex, e.signed = kind, e.next, false
	e.next++
	start := len(e.buf)
	b := append(e.buf, `{"type":"content_block_start","index":`...)
	b = strconv.AppendInt(b, int64(e.curIndex), 10)
	b = append(b, `,"content_block":`...)
	b = append(b, block...)
	b = append(b, '}')
	return e.put(frames, "content_block_start", b, start)
}

// switchBlock ends the current block before another opens: it is stopped, except a tool_use
// block with incomplete arguments, which lingers open until Finish.
func (e *StreamEncoder) switchBlock(frames []Frame) []Frame {
	switch {
	case e.cur == blockNone:
		return frames
	case e.cur == blockTool && !json.Valid(e.args):
		e.lingering = append(e.lingering, e.curIndex)
	default:
		frames = e.stop(frames, e.curIndex)
	}
	e.cur = blockNone
	return frames
}

// stop appends content_block_stop for the block at index.
func (e *StreamEncoder) stop(frames []Frame, index int) []Frame {
	start := len(e.buf)
	b := append(e.buf, `{"type":"content_block_stop","index":`...)
	b = strconv.AppendInt(b, int64(index), 10)
	b = append(b, '}')
	return e.put(frames, "content_block_stop", b, start)
}

// delta appends a content_block_delta frame whose data is written in e.buf: capped, so that
// nothing appended to it reaches the next frame's, and still valid if e.buf moves on growing.
func (e *StreamEncoder) delta(frames []Frame, index int, typ, field, value string) []Frame {
	start := len(e.buf)
	b := append(e.buf, `{"type":"content_block_delta","index":`...)
	b = strconv.AppendInt(b, int64(index), 10)
	b = append(b, `,"delta":{"type":"`...)
	b = append(b, typ...)
	b = append(b, `","`...)
	b = append(b, field...)
	b = append(b, `":`...)
	b = rawjson.AppendString(b, value)
	b = append(b, "}}"...)
	return e.put(frames, "content_block_delta", b, start)
}
