package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
	"github.com/modelgateway/caddy-modelgateway/providers/sse"
)

// ResponsesFrame is one event of a Responses stream: its name and its JSON data, whose
// "type" is the same name. Write it with sse.WriteEvent(w, f.Event, f.Data).
type ResponsesFrame struct {
	Event string
	Data  []byte
}

// ResponsesStreamEncoder writes neutral stream events as the Responses API SSE sequence,
// for the gateway's responses surface. Every frame carries a sequence_number, 0, 1, 2...
// in the order the frames are returned. The sequence is the one OpenAI sends and the SDK
// stream helpers require (openai-node's responses.stream() throws unless the first event is
// response.created and an output_item.added and content_part.added came before a text
// delta):
//
//	response.created, response.in_progress                  (Start)
//	per output item, in output_index order 0, 1, 2...:
//	  message:   output_item.added, content_part.added, output_text.delta...,
//	             output_text.done, content_part.done, output_item.done
//	  reasoning: output_item.added, reasoning_summary_part.added,
//	             reasoning_summary_text.delta..., reasoning_summary_text.done,
//	             reasoning_summary_part.done, output_item.done (with encrypted_content)
//	  call:      output_item.added (arguments ""), function_call_arguments.delta...,
//	             function_call_arguments.done, output_item.done
//	response.completed, or response.incomplete for a length or content_filter finish,
//	with the whole response: every output item and the usage  (Finish)
//
// Neutral reasoning is written as a reasoning summary, as OpenAI's hosted models stream it,
// rather than as reasoning_text: it is what most clients display, and the SDK accumulators
// that ignore it still get the complete item from output_item.done and the final response.
//
// Items open on demand and the open item closes when another starts. A call whose arguments
// are not yet complete JSON stays open until Finish instead, so that a late piece of an
// interleaved call still reaches its item; a piece for a call already closed is still sent
// and kept in the final response. The encoder is not safe for concurrent use; each frame's
// Data is its own.
type ResponsesStreamEncoder struct {
	id, model string
	createdAt int64
	ids       itemIDs

	seq               int64
	started, finished bool
	items             []*outputItem
	cur               *outputItem         // the item deltas go to, nil when none
	calls             map[int]*outputItem // neutral tool call index → its item
}

// NewResponsesStreamEncoder returns an encoder of the response with this id, model and
// creation time (Unix seconds).
func NewResponsesStreamEncoder(id, model string, createdAt int64) *ResponsesStreamEncoder {
	return &ResponsesStreamEncoder{id: id, model: model, createdAt: createdAt, ids: newItemIDs(id), calls: make(map[int]*outputItem)}
}

// Start returns response.created and response.in_progress, with the response in progress.
// It returns nothing when the response has already started; Encode and Finish start it if
// needed.
func (e *ResponsesStreamEncoder) Start() []ResponsesFrame {
	if e.started {
		return nil
	}
	e.started = true
	return []ResponsesFrame{
		e.responseFrame("response.created", "in_progress", "", nil),
		e.responseFrame("response.in_progress", "in_progress", "", nil),
	}
}

// Encode returns the frames of one neutral event: text, reasoning and tool call pieces.
// EventFinish and EventUsage make no frame: pass the final reason and usage to Finish.
// Nothing is encoded after Finish or ErrorFrame.
func (e *ResponsesStreamEncoder) Encode(ev providers.Event) []ResponsesFrame {
	if e.finished {
		return nil
	}
	var frames []ResponsesFrame
	switch ev.Type {
	case providers.EventText:
		if ev.Text == "" {
			return nil
		}
		frames = e.Start()
		if e.cur == nil || e.cur.kind != itemMessage {
			frames = e.open(frames, itemMessage)
		}
		it := e.cur
		if !it.partOpen {
			it.partOpen = true
			b := e.begin("response.content_part.added")
			b = appendItemRef(b, it)
			b = append(b, `,"content_index":0,"part":`...)
			b = appendTextPart(b, "")
			frames = append(frames, e.frame("response.content_part.added", b))
		}
		it.text.WriteString(ev.Text)
		b := e.begin("response.output_text.delta")
		b = appendItemRef(b, it)
		b = append(b, `,"content_index":0,"delta":`...)
		b = rawjson.AppendString(b, ev.Text)
		b = append(b, `,"logprobs":[]`...)
		frames = append(frames, e.frame("response.output_text.delta", b))
	case providers.EventReasoning:
		if ev.Text == "" && ev.Signature == "" {
			return nil
		}
		frames = e.Start()
		// A signature ends a reasoning item: more reasoning text starts another.
		if e.cur == nil || e.cur.kind != itemReasoning || (ev.Text != "" && e.cur.signature != "") {
			frames = e.open(frames, itemReasoning)
		}
		it := e.cur
		if ev.Text != "" {
			if !it.partOpen {
				it.partOpen = true
				b := e.begin("response.reasoning_summary_part.added")
				b = appendItemRef(b, it)
				b = append(b, `,"summary_index":0,"part":`...)
				b = appendSummaryPart(b, "")
				frames = append(frames, e.frame("response.reasoning_summary_part.added", b))
			}
			it.text.WriteString(ev.Text)
			b := e.begin("response.reasoning_summary_text.delta")
			b = appendItemRef(b, it)
			b = append(b, `,"summary_index":0,"delta":`...)
			b = rawjson.AppendString(b, ev.Text)
			frames = append(frames, e.frame("response.reasoning_summary_text.delta", b))
		}
		it.signature += ev.Signature
	case providers.EventToolCall:
		frames = e.Start()
		it, seen := e.calls[ev.Index]
		if !seen {
			frames = e.open(frames, itemCall)
			it = e.cur
			it.callID = ev.ToolCall.ID
			if it.callID == "" {
				it.callID = e.ids.callID(ev.Index)
			}
			it.name = ev.ToolCall.Name
			e.calls[ev.Index] = it
			frames = e.added(frames, it)
		} else if it.name == "" {
			// A name after the first piece only reaches the done item and the final response.
			it.name = ev.ToolCall.Name
		}
		if ev.ToolCall.Arguments != "" {
			it.args = append(it.args, ev.ToolCall.Arguments...)
			b := e.begin("response.function_call_arguments.delta")
			b = appendItemRef(b, it)
			b = append(b, `,"delta":`...)
			b = rawjson.AppendString(b, ev.ToolCall.Arguments)
			frames = append(frames, e.frame("response.function_call_arguments.delta", b))
		}
	}
	return frames
}

// Finish closes the open items and returns response.completed, or response.incomplete with
// incomplete_details.reason max_output_tokens or content_filter when reason is length or
// content_filter; it carries the whole response: every output item, complete, and the
// usage u. Items still open are marked incomplete in an incomplete response. It returns
// nothing the second time, or after ErrorFrame.
func (e *ResponsesStreamEncoder) Finish(reason providers.FinishReason, u providers.Usage) []ResponsesFrame {
	if e.finished {
		return nil
	}
	frames := e.Start()
	status, incomplete := responsesStatus(reason)
	closing := "completed"
	if status == "incomplete" {
		closing = "incomplete"
	}
	for _, it := range e.items {
		if !it.done {
			frames = e.close(frames, it, closing)
		}
	}
	e.cur = nil
	e.finished = true
	event := "response." + status
	return append(frames, e.responseFrame(event, status, incomplete, &u))
}

// ErrorFrame returns an in-stream error event, {"type":"error","code","message","param":null},
// with code null when empty. It ends the stream: nothing is encoded after it. Send it after
// Start: before the stream has started, an HTTP error status is the better answer.
func (e *ResponsesStreamEncoder) ErrorFrame(code, message string) ResponsesFrame {
	e.started, e.finished = true, true
	b := e.begin("error")
	b = append(b, `,"code":`...)
	if code == "" {
		b = append(b, "null"...)
	} else {
		b = rawjson.AppendString(b, code)
	}
	b = append(b, `,"message":`...)
	b = rawjson.AppendString(b, message)
	b = append(b, `,"param":null`...)
	return e.frame("error", b)
}

// open closes the current item (a call with incomplete arguments lingers open) and opens a
// new item of kind, with its output_item.added, except for calls, whose added frame waits
// for their call id and name.
func (e *ResponsesStreamEncoder) open(frames []ResponsesFrame, kind itemKind) []ResponsesFrame {
	if c := e.cur; c != nil && (c.kind != itemCall || json.Valid(c.args)) {
		frames = e.close(frames, c, "completed")
	}
	it := e.ids.item(kind, len(e.items))
	e.items = append(e.items, it)
	e.cur = it
	if kind != itemCall {
		frames = e.added(frames, it)
	}
	return frames
}

func (e *ResponsesStreamEncoder) added(frames []ResponsesFrame, it *outputItem) []ResponsesFrame {
	b := e.begin("response.output_item.added")
	b = append(b, `,"output_index":`...)
	b = strconv.AppendInt(b, int64(it.index), 10)
	b = append(b, `,"item":`...)
	b = appendItem(b, it, false)
	return append(frames, e.frame("response.output_item.added", b))
}

// close ends an item: its part and its text or arguments, then output_item.done with the
// complete item in the given status.
func (e *ResponsesStreamEncoder) close(frames []ResponsesFrame, it *outputItem, status string) []ResponsesFrame {
	it.done, it.status = true, status
	if e.cur == it {
		e.cur = nil
	}
	switch it.kind {
	case itemMessage:
		if it.partOpen {
			text := it.text.String()
			b := e.begin("response.output_text.done")
			b = appendItemRef(b, it)
			b = append(b, `,"content_index":0,"text":`...)
			b = rawjson.AppendString(b, text)
			b = append(b, `,"logprobs":[]`...)
			frames = append(frames, e.frame("response.output_text.done", b))
			b = e.begin("response.content_part.done")
			b = appendItemRef(b, it)
			b = append(b, `,"content_index":0,"part":`...)
			b = appendTextPart(b, text)
			frames = append(frames, e.frame("response.content_part.done", b))
		}
	case itemReasoning:
		if it.partOpen {
			text := it.text.String()
			b := e.begin("response.reasoning_summary_text.done")
			b = appendItemRef(b, it)
			b = append(b, `,"summary_index":0,"text":`...)
			b = rawjson.AppendString(b, text)
			frames = append(frames, e.frame("response.reasoning_summary_text.done", b))
			b = e.begin("response.reasoning_summary_part.done")
			b = appendItemRef(b, it)
			b = append(b, `,"summary_index":0,"part":`...)
			b = appendSummaryPart(b, text)
			frames = append(frames, e.frame("response.reasoning_summary_part.done", b))
		}
	case itemCall:
		b := e.begin("response.function_call_arguments.done")
		b = appendItemRef(b, it)
		b = append(b, `,"name":`...)
		b = rawjson.AppendString(b, it.name)
		b = append(b, `,"arguments":`...)
		b = rawjson.AppendString(b, string(it.args))
		frames = append(frames, e.frame("response.function_call_arguments.done", b))
	}
	b := e.begin("response.output_item.done")
	b = append(b, `,"output_index":`...)
	b = strconv.AppendInt(b, int64(it.index), 10)
	b = append(b, `,"item":`...)
	b = appendItem(b, it, true)
	return append(frames, e.frame("response.output_item.done", b))
}

// begin starts a frame's JSON with its type and the next sequence number.
func (e *ResponsesStreamEncoder) begin(typ string) []byte {
	b := make([]byte, 0, 128)
	b = append(b, `{"type":"`...)
	b = append(b, typ...)
	b = append(b, `","sequence_number":`...)
	b = strconv.AppendInt(b, e.seq, 10)
	e.seq++
	return b
}

func (e *ResponsesStreamEncoder) frame(typ string, b []byte) ResponsesFrame {
	return ResponsesFrame{Event: typ, Data: append(b, '}')}
}

func (e *ResponsesStreamEncoder) responseFrame(typ, status, incomplete string, u *providers.Usage) ResponsesFrame {
	b := e.begin(typ)
	b = append(b, `,"response":`...)
	var items []*outputItem
	if u != nil {
		items = e.items
	}
	b = appendResponse(b, e.id, e.createdAt, e.model, status, incomplete, items, u, providers.Additions{})
	return e.frame(typ, b)
}

// appendItemRef appends the item_id and output_index of an item's events.
func appendItemRef(b []byte, it *outputItem) []byte {
	b = append(b, `,"item_id":`...)
	b = rawjson.AppendString(b, it.id)
	b = append(b, `,"output_index":`...)
	return strconv.AppendInt(b, int64(it.index), 10)
}

// errResponsesTruncated is the cause of a Responses stream that ended before its terminal
// event. It matches ErrStreamTruncated with errors.Is, so that callers need one check for
// both formats, but says what happened in this format, which has no [DONE].
var errResponsesTruncated error = truncatedError{}

type truncatedError struct{}

func (truncatedError) Error() string        { return "stream ended before it was complete" }
func (truncatedError) Is(target error) bool { return target == ErrStreamTruncated }

// NewResponsesStreamDecoder returns the neutral events of an upstream Responses SSE body,
// read as it arrives; provider names the upstream in errors. The body fails with an
// *UpstreamError when it stays silent longer than idle (no check when idle ≤ 0), and ctx is
// the caller's: its cancellation is returned as the context's error, not as an upstream
// failure. Close closes the body.
//
// Text comes from response.output_text.delta (and refusal deltas), reasoning from
// reasoning_summary_text and reasoning_text deltas (summary parts after the first are
// separated by a blank line) and from the encrypted_content of reasoning items as a
// Signature, tool calls from function_call items: output_item.added gives the call's
// neutral index (0, 1, 2... in order), call_id and name, function_call_arguments.delta its
// arguments. Done events and the final response's output are reconciled with what the
// deltas carried, so that a server that sends only done events or only the final response
// loses nothing. response.completed and response.incomplete end the stream with a finish
// and the usage; response.failed and error events (and any frame with a top-level error
// key) end it with an *UpstreamError classified from the error code, and the end of the
// body (or a [DONE]) before a terminal event with an *UpstreamError "stream ended before it
// was complete", which matches ErrStreamTruncated. As in the chat completions stream, a
// malformed frame (not JSON, or a field the gateway reads of the wrong type) is skipped
// whole and counted: the stream has a SkippedFrames() int method, for the optional
// interface interface{ SkippedFrames() int }; a later done event or the final response
// often restores what it carried. An event larger than the SSE reader's limit ends the
// stream with an *UpstreamError wrapping ErrMalformedFrame.
func NewResponsesStreamDecoder(ctx context.Context, provider string, body io.ReadCloser, idle time.Duration) providers.Stream {
	return newResponsesStream(ctx, provider, upstreamhttp.NewAttempt(ctx, 0), upstreamhttp.NewIdleBody(body, idle, provider))
}

// responsesStream turns an upstream Responses SSE body into neutral events. Like chatStream
// it involves no goroutine: Next reads the body; the idle watchdog is a timer that closes it.
type responsesStream struct {
	conn *upstreamhttp.StreamConn // the terminal event marks it done
	rd   *sse.Reader

	pending []providers.Event
	pos     int
	cur     providers.Event
	err     error
	ended   bool

	items       map[string]*streamedItem // by item id, or "#<output_index>" without one
	calls       int                      // calls seen, the next neutral index
	sawSummary  bool                     // a reasoning summary part was seen: the next is separated
	sawToolCall bool
	skipped     atomic.Int64 // frames skipped as malformed
}

// streamedItem is what was emitted for one upstream output item.
type streamedItem struct {
	typ      string
	text     []byte // text, or arguments, emitted so far
	call     int    // neutral index of a function call, -1 until its first event
	sentID   bool
	sentName bool
	signed   bool
}

func newResponsesStream(ctx context.Context, provider string, at *upstreamhttp.Attempt, body *upstreamhttp.IdleBody) *responsesStream {
	return &responsesStream{conn: upstreamhttp.NewStreamConn(ctx, provider, at, body), rd: sse.NewReader(body, 0), items: make(map[string]*streamedItem)}
}

var _ providers.Waiter = (*responsesStream)(nil)

// OnWait implements providers.Waiter.
func (s *responsesStream) OnWait(f func()) { s.rd.OnWait(f) }

// Next implements providers.Stream.
func (s *responsesStream) Next() bool {
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
			err := s.conn.ReadEnd(s.rd.Err(), ErrMalformedFrame)
			if err == nil {
				// The body ended before the terminal event.
				err = upstreamhttp.Failure(s.conn.Provider, errResponsesTruncated, nil, nil)
			}
			s.end(err)
			continue
		}
		if err := s.handle(s.rd.Event()); err != nil {
			s.pending = s.pending[:0]
			s.end(err)
		}
	}
}

func (s *responsesStream) end(err error) {
	s.ended = true
	s.err = err
	s.conn.Body.Stop()
	s.rd.Release()
}

// Current implements providers.Stream.
func (s *responsesStream) Current() providers.Event { return s.cur }

// Err implements providers.Stream.
func (s *responsesStream) Err() error { return s.err }

// Close implements providers.Stream. It may be called at any time and more than once.
func (s *responsesStream) Close() error {
	s.conn.Close(drainTimeout)
	return nil
}

// responsesEvent is one stream event, its variable fields kept raw so that an event the
// gateway does not read can never fail decoding.
type responsesEvent struct {
	Type         string          `json:"type"`
	ItemID       json.RawMessage `json:"item_id"`
	OutputIndex  json.RawMessage `json:"output_index"`
	SummaryIndex json.RawMessage `json:"summary_index"`
	Delta        json.RawMessage `json:"delta"`
	Text         json.RawMessage `json:"text"`
	Arguments    json.RawMessage `json:"arguments"`
	Item         json.RawMessage `json:"item"`
	Response     json.RawMessage `json:"response"`
	Error        json.RawMessage `json:"error"`
}

// handle turns one SSE event into pending neutral events. An error event is returned as
// the stream's error; a malformed frame (not JSON, or a field the gateway reads of the wrong
// type) is counted and skipped whole: it is validated completely before it changes anything.
func (s *responsesStream) handle(ev sse.Event) error {
	data := bytes.TrimSpace(ev.Data)
	if len(data) == 0 {
		return nil
	}
	if string(data) == "[DONE]" {
		// Not sent by OpenAI; a compatible server's [DONE] before the terminal event is
		// a truncated stream.
		return upstreamhttp.Failure(s.conn.Provider, errResponsesTruncated, nil, data)
	}
	var e responsesEvent
	if err := json.Unmarshal(data, &e); err != nil {
		if ev.Name == "error" {
			return s.streamErrorEvent(data)
		}
		s.skip()
		return nil
	}
	if e.Type == "" {
		e.Type = ev.Name
	}
	if e.Type == "error" || ev.Name == "error" || !isFalsy(e.Error) {
		return s.streamErrorEvent(data)
	}
	switch e.Type {
	case "response.output_text.delta", "response.refusal.delta", "response.output_text.done",
		"response.reasoning_summary_text.delta", "response.reasoning_text.delta":
		raw, typ, whole := e.Delta, "message", false
		switch e.Type {
		case "response.output_text.done":
			raw, whole = e.Text, true
		case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
			typ = "reasoning"
		}
		text, err := rawString(raw)
		if err != nil {
			s.skip()
			return nil
		}
		it, err := s.item(e.ItemID, e.OutputIndex, typ)
		if err != nil {
			s.skip()
			return nil
		}
		s.emitText(it, text, whole)
	case "response.reasoning_summary_part.added":
		s.separateSummary()
	case "response.function_call_arguments.delta", "response.function_call_arguments.done":
		raw, whole := e.Delta, false
		if e.Type == "response.function_call_arguments.done" {
			raw, whole = e.Arguments, true
		}
		args, err := rawString(raw)
		if err != nil {
			s.skip()
			return nil
		}
		it, err := s.item(e.ItemID, e.OutputIndex, "function_call")
		if err != nil {
			s.skip()
			return nil
		}
		s.emitCall(it, "", "", args, whole)
	case "response.output_item.added", "response.output_item.done":
		var item ResponsesItem
		if json.Unmarshal(e.Item, &item) != nil {
			s.skip()
			return nil
		}
		id := itemID(item)
		out, err := responseFromItems([]ResponsesItem{item})
		if err == nil {
			_, err = itemKey(id, e.OutputIndex)
		}
		if err != nil {
			s.skip()
			return nil
		}
		s.reconcile(id, e.OutputIndex, item, out, e.Type == "response.output_item.done")
	case "response.completed", "response.incomplete":
		var r ResponsesResponse
		if json.Unmarshal(e.Response, &r) != nil {
			s.skip()
			return nil
		}
		status := r.Status
		if status == "" {
			status = e.Type[len("response."):]
		}
		outs := make([]*providers.Response, len(r.Output))
		var err error
		for i := range r.Output {
			if outs[i], err = responseFromItems(r.Output[i : i+1]); err != nil {
				break
			}
		}
		var u providers.Usage
		if err == nil {
			u, err = ParseResponsesUsage(r.Usage)
		}
		if err == nil {
			// The finish reason depends only on the status here: calls are counted below.
			_, err = responsesFinish(status, r.IncompleteDetails, false)
		}
		if err != nil {
			s.skip()
			return nil
		}
		for i, item := range r.Output {
			s.reconcile(itemID(item), json.RawMessage(strconv.Itoa(i)), item, outs[i], true)
		}
		reason, _ := responsesFinish(status, r.IncompleteDetails, s.sawToolCall)
		s.pending = append(s.pending, providers.Event{Type: providers.EventFinish, FinishReason: reason})
		if !isNull(bytes.TrimSpace(r.Usage)) {
			s.pending = append(s.pending, providers.Event{Type: providers.EventUsage, Usage: u})
		}
		s.conn.MarkDone()
		s.end(nil)
	case "response.failed":
		var r struct {
			Error json.RawMessage `json:"error"`
		}
		_ = json.Unmarshal(e.Response, &r)
		body := make([]byte, 0, len(r.Error)+16)
		body = append(body, `{"error":`...)
		if isNull(bytes.TrimSpace(r.Error)) {
			body = append(body, `{"message":"response failed"}`...)
		} else {
			body = append(body, r.Error...)
		}
		body = append(body, '}')
		ue := streamError(s.conn.Provider, body)
		ue.Payload = providers.Preview(data)
		return ue
	}
	return nil
}

// SkippedFrames is the number of frames skipped as malformed so far. It may be called from
// any goroutine.
func (s *responsesStream) SkippedFrames() int { return int(s.skipped.Load()) }

// skip counts a malformed frame, which is then ignored.
func (s *responsesStream) skip() { s.skipped.Add(1) }

// streamErrorEvent is the *UpstreamError of an error event. Its "type" is the event's,
// not an error type.
func (s *responsesStream) streamErrorEvent(data []byte) *providers.UpstreamError {
	ue := streamError(s.conn.Provider, data)
	if ue.Type == "error" {
		ue.Type = ""
	}
	return ue
}

// separateSummary starts a reasoning summary part: parts after the first are separated
// from the text before by a blank line.
func (s *responsesStream) separateSummary() {
	if s.sawSummary {
		s.pending = append(s.pending, providers.Event{Type: providers.EventReasoning, Text: "\n\n"})
	}
	s.sawSummary = true
}

// item returns the state of the item an event names, created on first sight with typ.
func (s *responsesStream) item(id, index json.RawMessage, typ string) (*streamedItem, error) {
	key, err := itemKey(id, index)
	if err != nil {
		return nil, err
	}
	it := s.items[key]
	if it == nil {
		it = &streamedItem{typ: typ, call: -1}
		s.items[key] = it
	}
	return it, nil
}

// itemID is an item's id as the raw JSON that itemKey reads, nil when it has none.
func itemID(item ResponsesItem) json.RawMessage {
	if item.ID == "" {
		return nil
	}
	return jsonString(item.ID)
}

// itemKey identifies an item by its id, or by its output index when it has none.
func itemKey(id, index json.RawMessage) (string, error) {
	if s, err := rawString(id); err == nil && s != "" {
		return s, nil
	}
	index = bytes.TrimSpace(index)
	if isNull(index) {
		return "#", nil
	}
	n, err := strconv.ParseInt(string(index), 10, 64)
	if err != nil || n < 0 {
		return "", fmt.Errorf("output_index %.32s is not a valid index", index)
	}
	return "#" + strconv.FormatInt(n, 10), nil
}

// reconcile brings what was emitted for an item in line with the item itself, from
// output_item.added, output_item.done or the final response; out is the item read by
// responseFromItems, which validated it. The item's key must be valid.
func (s *responsesStream) reconcile(id, index json.RawMessage, item ResponsesItem, out *providers.Response, final bool) {
	switch item.Type {
	case "message", "reasoning", "function_call":
	default:
		return // hosted tool items and the like carry nothing neutral
	}
	it, err := s.item(id, index, item.Type)
	if err != nil {
		return
	}
	switch item.Type {
	case "message":
		if final {
			s.emitText(it, out.Text, true)
		}
	case "reasoning":
		if final && len(it.text) == 0 && out.Reasoning != "" {
			s.separateSummary()
			s.emitText(it, out.Reasoning, true)
		}
		if out.ReasoningSignature != "" && !it.signed {
			it.signed = true
			s.pending = append(s.pending, providers.Event{Type: providers.EventReasoning, Signature: out.ReasoningSignature})
		}
	case "function_call":
		s.emitCall(it, item.CallID, item.Name, string(item.Arguments), final || item.Arguments != "")
	}
}

// emitText emits text for an item: a delta as it is, or with whole set the complete text,
// of which only what was not emitted yet goes out (nothing when it does not extend it).
func (s *responsesStream) emitText(it *streamedItem, text string, whole bool) {
	if whole {
		if len(text) <= len(it.text) || !bytes.HasPrefix([]byte(text), it.text) {
			return
		}
		text = text[len(it.text):]
	}
	if text == "" {
		return
	}
	it.text = append(it.text, text...)
	typ := providers.EventText
	if it.typ == "reasoning" {
		typ = providers.EventReasoning
	}
	s.pending = append(s.pending, providers.Event{Type: typ, Text: text})
}

// emitCall emits a piece of a call: its id and name the first time they are known, and
// arguments, a delta or, with whole set, the complete arguments.
func (s *responsesStream) emitCall(it *streamedItem, callID, name, args string, whole bool) {
	if it.typ != "function_call" {
		return
	}
	s.sawToolCall = true
	ev := providers.Event{Type: providers.EventToolCall}
	if callID != "" && !it.sentID {
		it.sentID, ev.ToolCall.ID = true, callID
	}
	if name != "" && !it.sentName {
		it.sentName, ev.ToolCall.Name = true, name
	}
	if whole {
		if len(args) > len(it.text) && bytes.HasPrefix([]byte(args), it.text) {
			args = args[len(it.text):]
		} else {
			args = ""
		}
	}
	it.text = append(it.text, args...)
	ev.ToolCall.Arguments = args
	if ev.ToolCall.ID == "" && ev.ToolCall.Name == "" && args == "" {
		return
	}
	// The neutral index is given with the first event, so that indexes follow the events.
	if it.call < 0 {
		it.call = s.calls
		s.calls++
	}
	ev.Index = it.call
	s.pending = append(s.pending, ev)
}

// rawString reads a JSON string; absent or null is "".
func rawString(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return "", nil
	}
	if raw[0] != '"' {
		return "", errors.New("not a string")
	}
	return rawjson.UnmarshalString(raw)
}

// responsesEvents is a complete answer as the events a Responses stream would have carried.
func responsesEvents(r *providers.Response) []providers.Event {
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
		providers.Event{Type: providers.EventFinish, FinishReason: r.FinishReason},
		providers.Event{Type: providers.EventUsage, Usage: r.Usage})
}
