package handlers

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/anthropic"
	"github.com/modelgateway/caddy-modelgateway/providers/sse"
)

var messagesSurface = textSurface{
	capability: capability{endpoint: "/messages", format: providers.FormatAnthropic, neutral: isChatProvider, meters: textMeters},
	inputKey:   "messages",
	decode:     anthropic.DecodeRequest,
	forward:    (*call).messagesForward,
	encoder:    func(chatFields) neutralSurface { return anthropicSurface{} },
}

// messages serves POST /messages, Anthropic's Messages API.
func (g *Gateway) messages(w http.ResponseWriter, r *http.Request, caller *Caller) error {
	return g.serveText(w, r, caller, &messagesSurface)
}

// anthropicSurface writes neutral answers as Anthropic messages.
type anthropicSurface struct{}

func (anthropicSurface) response(dst []byte, c *call, resp *providers.Response, model string) ([]byte, error) {
	return c.appendAnswer(dst, "", anthropic.AppendUsage, func(dst []byte, add providers.Additions) ([]byte, bool, error) {
		return anthropic.AppendResponseWith(dst, resp, c.GenerationID, model, add)
	})
}

func (anthropicSurface) sink(c *call, model string) streamSink {
	return &anthropicSink{enc: anthropic.NewStreamEncoder(c.GenerationID, model)}
}

type anthropicSink struct {
	enc *anthropic.StreamEncoder
	// frames is reused from one call to the next: its frames are written before the next.
	frames []frame
	// last holds message_delta, with cost and meta, until release.
	last lastFrame
}

// appendAnthropic appends the encoder's frames to out.
func appendAnthropic(out []frame, fs []anthropic.Frame) []frame {
	for _, f := range fs {
		out = append(out, frame{event: f.Event, data: f.Data})
	}
	return out
}

// start, event and finish return s.frames, reused: each call's frames are written before
// the next call, as the encoder's are.
func (s *anthropicSink) start() []frame {
	// Once an event's frames began the message (they are written right after this call),
	// Start has nothing to say, and s.frames holds those frames: left as it is.
	fs := s.enc.Start(providers.Usage{})
	if len(fs) == 0 {
		return nil
	}
	s.frames = appendAnthropic(s.frames[:0], fs)
	return s.frames
}

func (s *anthropicSink) event(ev providers.Event) []frame {
	s.frames = appendAnthropic(s.frames[:0], s.enc.Encode(ev))
	return s.frames
}

func (s *anthropicSink) finish(c *call) []frame {
	frames := appendAnthropic(s.frames[:0], s.enc.Finish(providers.FinishReason(c.FinishReason), c.stopSequence, c.tokens()))
	for i, f := range frames {
		if f.event == "message_delta" {
			frames[i].data = s.last.decorate(c, f.data, "", anthropic.AppendUsage)
		}
	}
	s.frames = append(frames, doneFrame)
	return s.frames
}

// release hands the encoder and the decorated message_delta's buffer back once the
// stream's frames are written.
func (s *anthropicSink) release() {
	s.enc.Release()
	s.last.release()
}

func (s *anthropicSink) fail(ue *providers.UpstreamError) []frame {
	f := anthropic.ErrorFrame(inBandAnthropicType(ue), "the answer was interrupted: "+upstreamMessage(ue))
	return []frame{{event: f.Event, data: f.Data}}
}

// inBandAnthropicType names an interrupted stream's error the way Anthropic's SDKs type it.
func inBandAnthropicType(ue *providers.UpstreamError) string {
	switch {
	case ue.Timeout:
		return "timeout_error"
	case ue.Category == providers.CategoryRateLimited:
		return "rate_limit_error"
	case ue.Status == 529:
		return "overloaded_error"
	default:
		return "api_error"
	}
}

// messagesForward relays a Messages request to an Anthropic upstream byte for byte.
func (c *call) messagesForward(w http.ResponseWriter, r *http.Request, rt Route, fw providers.Forwarder, body []byte, f chatFields) error {
	up, err := upstreamBody(body, rt.UpstreamModel)
	if err != nil {
		return fmt.Errorf("rewriting the request: %w", err)
	}
	return c.forward(w, r, rt, fw, up, f.stream, messagesWire, func(began time.Time, resp *providers.RawResponse) error {
		return c.messagesForwardStream(w, r, rt, began, resp)
	})
}

var messagesWire = wireFormat{
	format: providers.FormatAnthropic, parseUsage: anthropic.ParseUsage,
	appendUsage: anthropic.AppendUsage,
	finish: func(answer []byte) string {
		raw, _ := rawjson.Get(answer, "stop_reason")
		sr, _ := rawjson.String(raw)
		return string(anthropic.FinishReason(sr))
	},
}

// upstreamBody sets the route's model id and removes the gateway's own "meta" member.
func upstreamBody(body []byte, model string) ([]byte, error) {
	out, err := rawjson.Set(body, "model", rawjson.AppendStringLikeMarshal(nil, model))
	if err != nil {
		return nil, err
	}
	return rawjson.Delete(out, "meta")
}

// messagesForwardStream relays an Anthropic event stream. Usage is merged from
// message_start (input and cache counts) and message_delta (cumulative output, sometimes the
// input counts again: the latest value of each field wins). The message_delta is held until
// the end so that it can carry the cost, written after the charge is recorded.
func (c *call) messagesForwardStream(w http.ResponseWriter, r *http.Request, rt Route, began time.Time, resp *providers.RawResponse) error {
	defer resp.Body.Close()
	idle := newIdleTimer(c.g.StreamIdleTimeout, func() { _ = resp.Body.Close() })
	defer idle.Stop()
	out := newSSEWriter(w)
	defer out.release()
	rd := sse.NewReader(resp.Body, maxStreamEvent)
	defer rd.Release()
	out.holdFor(rd)
	usage := map[string]json.RawMessage{}
	blocks := &openBlock{index: -1}
	var heldDelta []byte
	stopped := false
	var streamErr *providers.UpstreamError
	mergeUsage := func(raw []byte) {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			return
		}
		for k, v := range m {
			if !rawjson.IsNull(v) {
				usage[k] = v
			}
		}
		merged, _ := json.Marshal(usage)
		if u, err := anthropic.ParseUsage(merged); err == nil {
			c.reportTokens(u)
		}
	}
	for rd.Next() {
		idle.kick()
		ev := rd.Event()
		data := ev.Data
		if len(data) == 0 {
			continue
		}
		if c.FirstByte.IsZero() {
			c.FirstByte = c.g.Now()
		}
		if !rawjson.Valid(data) {
			c.skippedFrames++
			continue
		}
		name := ev.Name
		if name == "" {
			if t, _ := rawjson.Get(data, "type"); t != nil {
				name, _ = rawjson.String(t)
			}
		}
		switch name {
		case "error":
			errObj, _ := rawjson.Get(data, "error")
			streamErr = anthropic.ParseError(rt.ProviderName, 0, nil, anthropicErrorBody(errObj), true)
			if streamErr.Status == 0 {
				streamErr.Retryable, streamErr.Category = true, providers.CategoryServerError
			}
		case "message_start":
			if msg, _ := rawjson.Get(data, "message"); msg != nil {
				if raw, _ := rawjson.Get(msg, "id"); raw != nil {
					c.UpstreamID, _ = rawjson.String(raw)
				}
				if u, _ := rawjson.Get(msg, "usage"); !rawjson.IsNull(u) {
					mergeUsage(u)
				}
			}
			data = c.setID(data, "message", "id")
		case "message_delta":
			if u, _ := rawjson.Get(data, "usage"); !rawjson.IsNull(u) {
				mergeUsage(u)
			}
			if d, _ := rawjson.Get(data, "delta"); d != nil {
				if sr, _ := rawjson.Get(d, "stop_reason"); !rawjson.IsNull(sr) {
					s, _ := rawjson.String(sr)
					c.FinishReason = string(anthropic.FinishReason(s))
				}
			}
			heldDelta = append(heldDelta[:0], data...)
			continue
		case "message_stop":
			stopped = true
		case "content_block_start":
			blocks.index, blocks.open = blockIndex(data), true
		case "content_block_stop":
			blocks.open = false
		case "content_block_delta":
			c.chunks++
			c.gotToken()
			if c.trackText {
				c.delivered.WriteString(deltaText(data))
			}
		}
		if streamErr != nil || stopped {
			break
		}
		c.relayCommit(out, &rt, began)
		out.event(name, data)
		if out.failed {
			break
		}
	}
	streamErr, err := c.relayEnd(r, rt, out, idle, rd.Err(), streamErr, stopped)
	if err != nil {
		return relayResult(err)
	}
	if streamErr == nil && !stopped {
		switch {
		case heldDelta == nil && out.started:
			// Ended cleanly without its message_delta: finish it for the client, with usage.
			c.relayCommit(out, &rt, began)
			sink := &anthropicTailSink{blocks: blocks}
			final := sink.finish(c)
			if settled, _ := c.chargeDelivered(r.Context()); !settled {
				final = sink.fail(notRecordedStream)
			}
			out.frames(final)
			return nil
		case heldDelta == nil:
			streamErr = c.providerFault(rt, "the provider's stream ended before it began", nil)
		}
	}
	if streamErr != nil {
		return c.relayFailed(out, rt, began, streamErr, &anthropicTailSink{blocks: blocks})
	}
	c.relayCommit(out, &rt, began)
	var last lastFrame
	defer last.release()
	final := last.decorate(c, heldDelta, "", anthropic.AppendUsage)
	if settled, _ := c.chargeDelivered(r.Context()); !settled {
		f := anthropic.ErrorFrame("api_error", notRecordedStream.Message)
		out.event(f.Event, f.Data)
		return nil
	}
	out.frames([]frame{{event: "message_delta", data: final}, {event: "message_stop", data: []byte(`{"type":"message_stop"}`)}, doneFrame})
	return nil
}

// anthropicErrorBody wraps an in-stream error object in the body shape ParseError reads.
func anthropicErrorBody(errObj []byte) []byte {
	if len(errObj) == 0 {
		errObj = []byte("null")
	}
	return append(append([]byte(`{"type":"error","error":`), errObj...), '}')
}

// openBlock tracks the content block a relayed Anthropic stream has open, so that a
// continuation or a synthesised ending fits what the client already has.
type openBlock struct {
	index int
	open  bool
}

func blockIndex(data []byte) int {
	raw, _ := rawjson.Get(data, "index")
	n, err := strconv.Atoi(string(raw))
	if err != nil {
		return -1
	}
	return n
}

func deltaText(data []byte) string {
	d, _ := rawjson.Get(data, "delta")
	if t, _ := rawjson.Get(d, "type"); string(t) != `"text_delta"` {
		return ""
	}
	raw, _ := rawjson.Get(d, "text")
	s, _ := rawjson.String(raw)
	return s
}

// anthropicTailSink writes the rest of an Anthropic stream whose beginning was relayed from
// an upstream: text continues in the open text block (or a new one), then the stream closes
// with message_delta (usage and cost) and message_stop.
type anthropicTailSink struct {
	blocks *openBlock
}

func (s *anthropicTailSink) start() []frame { return nil }

func (s *anthropicTailSink) event(ev providers.Event) []frame {
	if ev.Type != providers.EventText || ev.Text == "" {
		return nil
	}
	var frames []frame
	if !s.blocks.open {
		s.blocks.index++
		s.blocks.open = true
		frames = append(frames, frame{event: "content_block_start", data: []byte(fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"text","text":""}}`, s.blocks.index))})
	}
	text, _ := json.Marshal(ev.Text)
	return append(frames, frame{event: "content_block_delta", data: []byte(fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":%s}}`, s.blocks.index, text))})
}

func (s *anthropicTailSink) finish(c *call) []frame {
	var frames []frame
	if s.blocks.open {
		frames = append(frames, frame{event: "content_block_stop", data: []byte(fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, s.blocks.index))})
		s.blocks.open = false
	}
	stop := anthropic.StopReason(providers.FinishReason(c.FinishReason), c.stopSequence)
	if c.FinishReason == "" {
		stop = "end_turn"
	}
	stopJSON, _ := json.Marshal(stop)
	delta := []byte(`{"type":"message_delta","delta":{"stop_reason":` + string(stopJSON) + `,"stop_sequence":null},"usage":null}`)
	if dec, err := c.appendDecorated(nil, delta, "", "usage", anthropic.AppendUsage); err == nil {
		delta = dec
	}
	return append(frames, frame{event: "message_delta", data: delta}, frame{event: "message_stop", data: []byte(`{"type":"message_stop"}`)}, doneFrame)
}

func (s *anthropicTailSink) fail(ue *providers.UpstreamError) []frame {
	f := anthropic.ErrorFrame(inBandAnthropicType(ue), "the answer was interrupted: "+upstreamMessage(ue))
	return []frame{{event: f.Event, data: f.Data}}
}
