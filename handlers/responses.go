package handlers

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/openai"
	"github.com/modelgateway/caddy-modelgateway/providers/sse"
)

var responsesSurface = textSurface{
	capability: capability{endpoint: "/responses", format: providers.FormatOpenAIResponses, neutral: isChatProvider, meters: textMeters},
	inputKey:   "input", stringInput: true,
	decode:   openai.DecodeResponsesRequest,
	forward:  (*call).responsesForward,
	encoder:  func(chatFields) neutralSurface { return responsesEncoder{} },
	precheck: statelessCheck,
}

// responses serves POST /responses, OpenAI's Responses API. The gateway is stateless: the
// whole conversation comes with each request.
func (g *Gateway) responses(w http.ResponseWriter, r *http.Request, caller *Caller) error {
	return g.serveText(w, r, caller, &responsesSurface)
}

// statelessCheck refuses the Responses features that need the upstream to keep state, before
// anything is forwarded.
func statelessCheck(body []byte) error {
	for _, key := range []string{"previous_response_id", "conversation"} {
		if v, _ := rawjson.Get(body, key); !rawjson.IsNull(v) {
			return fmt.Errorf("%s is not supported by this gateway; send the full input", key)
		}
	}
	for _, key := range []string{"store", "background"} {
		if v, _ := rawjson.Get(body, key); string(v) == "true" {
			return fmt.Errorf("%s: true is not supported by this gateway: responses are not kept", key)
		}
	}
	return nil
}

type responsesEncoder struct{}

func (responsesEncoder) response(dst []byte, c *call, resp *providers.Response, model string) ([]byte, error) {
	return c.appendAnswer(dst, "", openai.AppendResponsesUsage, func(dst []byte, add providers.Additions) ([]byte, bool, error) {
		return openai.AppendResponsesResponseWith(dst, resp, c.GenerationID, c.Start.Unix(), model, add), true, nil
	})
}

func (responsesEncoder) sink(c *call, model string) streamSink {
	return &responsesSink{enc: openai.NewResponsesStreamEncoder(c.GenerationID, model, c.Start.Unix())}
}

type responsesSink struct {
	enc *openai.ResponsesStreamEncoder
}

func fromResponses(fs []openai.ResponsesFrame) []frame {
	out := make([]frame, len(fs))
	for i, f := range fs {
		out[i] = frame{event: f.Event, data: f.Data}
	}
	return out
}

func (s *responsesSink) start() []frame { return fromResponses(s.enc.Start()) }

func (s *responsesSink) event(ev providers.Event) []frame { return fromResponses(s.enc.Encode(ev)) }

func (s *responsesSink) finish(c *call) []frame {
	frames := fromResponses(s.enc.Finish(providers.FinishReason(c.FinishReason), c.tokens()))
	if n := len(frames); n > 0 {
		frames[n-1].data = c.decorateFinal(frames[n-1].data)
	}
	return append(frames, doneFrame)
}

func (s *responsesSink) fail(ue *providers.UpstreamError) []frame {
	f := s.enc.ErrorFrame(inBandCode(ue), "the answer was interrupted: "+upstreamMessage(ue))
	return []frame{{event: f.Event, data: f.Data}}
}

func inBandCode(ue *providers.UpstreamError) string {
	if ue.Timeout {
		return "upstream_timeout"
	}
	return CodeUpstream
}

// decorateFinal adds cost to response.usage of a terminal Responses event, and meta.
func (c *call) decorateFinal(data []byte) []byte {
	if dec, err := c.decorateUsage(data, openai.AppendResponsesUsage, "response", "usage"); err == nil {
		data = dec
	}
	if dec, err := c.withMeta(data); err == nil {
		data = dec
	}
	return data
}

// responsesForward relays a Responses request to an upstream that speaks it, byte for byte.
func (c *call) responsesForward(w http.ResponseWriter, r *http.Request, rt Route, fw providers.Forwarder, body []byte, f chatFields) error {
	up, err := upstreamBody(body, rt.UpstreamModel)
	if err == nil {
		// The gateway is stateless: the upstream keeps nothing either.
		up, err = rawjson.Set(up, "store", []byte("false"))
	}
	if err != nil {
		return fmt.Errorf("rewriting the request: %w", err)
	}
	return c.forward(w, r, rt, fw, up, f.stream, responsesWire, func(began time.Time, resp *providers.RawResponse) error {
		return c.responsesForwardStream(w, r, rt, began, resp)
	})
}

var responsesWire = wireFormat{format: providers.FormatOpenAIResponses, parseUsage: openai.ParseResponsesUsage, appendUsage: openai.AppendResponsesUsage, finish: responsesFinish}

// responsesFinish reads a response object's outcome as a neutral finish reason.
func responsesFinish(resp []byte) string {
	var v struct {
		Status            string `json:"status"`
		IncompleteDetails *struct {
			Reason string `json:"reason"`
		} `json:"incomplete_details"`
	}
	_ = json.Unmarshal(resp, &v)
	if v.Status == "incomplete" && v.IncompleteDetails != nil {
		if v.IncompleteDetails.Reason == "content_filter" {
			return string(providers.FinishContentFilter)
		}
		return string(providers.FinishLength)
	}
	return string(providers.FinishStop)
}

// responsesForwardStream relays an upstream Responses stream. The terminal event
// (response.completed or response.incomplete), the format's last, ends the relay; it is held
// until the charge is recorded, then sent with the cost in response.usage.
func (c *call) responsesForwardStream(w http.ResponseWriter, r *http.Request, rt Route, began time.Time, resp *providers.RawResponse) error {
	defer resp.Body.Close()
	idle := newIdleTimer(c.g.StreamIdleTimeout, func() { _ = resp.Body.Close() })
	defer idle.Stop()
	out := newSSEWriter(w)
	defer out.release()
	rd := sse.NewReader(resp.Body, maxStreamEvent)
	defer rd.Release()
	out.holdFor(rd)
	var terminal []byte
	var terminalName string
	lastSeq := -1
	var streamErr *providers.UpstreamError
	for rd.Next() {
		idle.kick()
		ev := rd.Event()
		data := ev.Data
		if len(data) == 0 || string(data) == "[DONE]" {
			continue
		}
		if c.FirstByte.IsZero() {
			c.FirstByte = c.g.Now()
		}
		var ef eventFields // empty for valid JSON that is not an object
		if ef.read(data) != nil && !rawjson.Valid(data) {
			c.skippedFrames++
			continue
		}
		name := ev.Name
		if ef.typ != nil && name == "" {
			name, _ = rawjson.String(ef.typ)
		}
		if ef.seq != nil {
			if n, err := strconv.Atoi(string(ef.seq)); err == nil {
				lastSeq = n
			}
		}
		switch name {
		case "error", "response.failed":
			streamErr = responsesStreamError(rt.ProviderName, data)
		case "response.created", "response.in_progress", "response.queued":
			if raw, _ := rawjson.Get(data, "response"); raw != nil && c.UpstreamID == "" {
				if id, _ := rawjson.Get(raw, "id"); id != nil {
					c.UpstreamID, _ = rawjson.String(id)
				}
			}
			data = c.setID(data, "response", "id")
		case "response.completed", "response.incomplete":
			if raw, _ := rawjson.Get(data, "response"); raw != nil {
				if u, _ := rawjson.Get(raw, "usage"); !rawjson.IsNull(u) {
					if usage, err := openai.ParseResponsesUsage(u); err == nil {
						c.reportTokens(usage)
					}
				}
				c.FinishReason = responsesFinish(raw)
			}
			// The format's last event: the relay ends here, without waiting for the body's
			// end, so that what came with it leaves with it.
			terminal, terminalName = c.setID(data, "response", "id"), name
		case "response.output_text.delta", "response.function_call_arguments.delta", "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
			c.chunks++
			c.gotToken()
		}
		if streamErr != nil || terminal != nil {
			break
		}
		c.relayCommit(out, &rt, began)
		out.event(name, data)
		if out.failed {
			break
		}
	}
	streamErr, err := c.relayEnd(r, rt, out, idle, rd.Err(), streamErr, terminal != nil)
	if err != nil {
		return relayResult(err)
	}
	if streamErr == nil && terminal == nil {
		streamErr = c.providerFault(rt, "the provider's stream ended before response.completed", nil)
	}
	if streamErr != nil {
		return c.relayFailed(out, rt, began, streamErr, &responsesTailSink{seq: lastSeq})
	}
	c.relayCommit(out, &rt, began)
	final := c.decorateFinal(terminal)
	if settled, _ := c.chargeDelivered(r.Context()); !settled {
		out.frames((&responsesTailSink{seq: lastSeq}).fail(notRecordedStream))
		return nil
	}
	out.frames([]frame{{event: terminalName, data: final}, doneFrame})
	return nil
}

// responsesStreamError reads an error event or a response.failed event.
func responsesStreamError(provider string, data []byte) *providers.UpstreamError {
	ue := &providers.UpstreamError{Provider: provider, Category: providers.CategoryServerError, Retryable: true, Payload: providers.Preview(data)}
	src := data
	if raw, _ := rawjson.Get(data, "response"); raw != nil {
		src, _ = rawjson.Get(raw, "error")
	}
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(src, &e)
	ue.Code, ue.Message = e.Code, e.Message
	if ue.Message == "" {
		ue.Message = "the provider reported an error in its stream"
	}
	if e.Code == "rate_limit_exceeded" {
		ue.Category = providers.CategoryRateLimited
	}
	return ue
}

// responsesTailSink ends a relayed Responses stream that broke: its item ids and output
// indices belong to the upstream, so it cannot be continued elsewhere, only closed with the
// in-band error, numbered after the last event the client had.
type responsesTailSink struct{ seq int }

func (s *responsesTailSink) noContinue() {}

func (s *responsesTailSink) start() []frame                { return nil }
func (s *responsesTailSink) event(providers.Event) []frame { return nil }
func (s *responsesTailSink) finish(*call) []frame          { return []frame{doneFrame} }
func (s *responsesTailSink) fail(ue *providers.UpstreamError) []frame {
	b, _ := json.Marshal(map[string]any{"type": "error", "code": inBandCode(ue), "message": "the answer was interrupted: " + upstreamMessage(ue), "param": nil, "sequence_number": s.seq + 1})
	return []frame{{event: "error", data: b}}
}

// eventFields are the members of a Responses stream event the relay reads, found as the
// event is checked, in one pass (rawjson.EachValid): its raw type and sequence_number, as
// rawjson.Get finds them (escaped keys decoded, the last of a repeated key).
type eventFields struct {
	typ, seq []byte
}

func (ef *eventFields) read(data []byte) error {
	return rawjson.EachValid(data, func(key []byte, f rawjson.Field) {
		ef.set(key, data[f.ValueStart:f.ValueEnd])
	})
}

func (ef *eventFields) set(raw, v []byte) {
	key, ok := rawjson.Key(raw)
	if !ok {
		return
	}
	switch string(key) {
	case "type":
		ef.typ = v
	case "sequence_number":
		ef.seq = v
	}
}
