package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/openai"
	"github.com/modelgateway/caddy-modelgateway/providers/sse"
)

const (
	// maxUpstreamBody bounds a non-streamed upstream answer held in memory.
	maxUpstreamBody = 64 << 20
	// maxStreamEvent bounds one upstream SSE event.
	maxStreamEvent = 8 << 20
)

// chatFields are the members of a chat completions request the gateway reads; the rest of
// the body is forwarded untouched.
type chatFields struct {
	model        string
	stream       bool
	includeUsage bool
	meta         bool
	hasTools     bool
	maxTokens    int64
}

// parseFields validates the members every text surface shares: model, the conversation
// (under inputKey; a plain string allowed when stringInput), stream, tools and max tokens.
func parseFields(body []byte, inputKey string, stringInput bool) (chatFields, *APIError) {
	var f chatFields
	var haveModel, haveMessages bool
	var bad *APIError
	invalid := func(param, msg string) {
		if bad == nil {
			bad = newError(http.StatusBadRequest, CodeValidation, msg)
			bad.Param = param
		}
	}
	err := rawjson.Each(body, func(key []byte, fl rawjson.Field) bool {
		v := body[fl.ValueStart:fl.ValueEnd]
		switch string(key) {
		case "model":
			s, ok := rawjson.String(v)
			if !ok {
				invalid("model", "model must be a string")
			}
			f.model, haveModel = s, ok && s != ""
		case inputKey:
			if stringInput && v[0] == '"' {
				haveMessages = len(v) > 2
				break
			}
			if v[0] != '[' {
				invalid(inputKey, inputKey+" must be an array")
				break
			}
			haveMessages = !emptyArray(v)
		case "stream":
			b, ok := rawjson.Bool(v)
			if !ok && !rawjson.IsNull(v) {
				invalid("stream", "stream must be a boolean")
			}
			f.stream = b
		case "stream_options":
			if iu, _ := rawjson.Get(v, "include_usage"); iu != nil {
				f.includeUsage, _ = rawjson.Bool(iu)
			}
		case "tools":
			if v[0] == '[' {
				f.hasTools = !emptyArray(v)
			} else if !rawjson.IsNull(v) {
				invalid("tools", "tools must be an array")
			}
		case "meta":
			f.meta, _ = rawjson.Bool(v)
		case "max_tokens", "max_completion_tokens", "max_output_tokens":
			if rawjson.IsNull(v) {
				break
			}
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil || n <= 0 {
				invalid(string(key), string(key)+" must be a positive integer")
			}
			f.maxTokens = n
		}
		return true
	})
	switch {
	case err != nil:
		return f, newError(http.StatusBadRequest, CodeInvalidJSON, "the request body must be a JSON object")
	case bad != nil:
		return f, bad
	case !haveModel:
		e := newError(http.StatusBadRequest, CodeModelRequired, "model is required")
		e.Param = "model"
		return f, e
	case !haveMessages:
		e := newError(http.StatusBadRequest, CodeValidation, inputKey+" is required and must not be empty")
		e.Param = inputKey
		return f, e
	case f.stream && f.hasTools:
		e := newError(http.StatusBadRequest, CodeValidation, "stream: true cannot be combined with tools; send tool-calling requests without streaming")
		e.Param = "stream"
		return f, e
	}
	return f, nil
}

func emptyArray(v []byte) bool {
	for _, c := range v[1:] {
		switch c {
		case ' ', '\t', '\n', '\r':
		case ']':
			return true
		default:
			return false
		}
	}
	return true
}

// textSurface describes one text-generation surface: how its requests are read, forwarded to
// an upstream of the same format, and answered from the neutral model.
type textSurface struct {
	// capability is the surface's endpoint and wire format; every text surface needs a
	// ChatProvider when the route cannot take its format as it is.
	capability  capability
	inputKey    string
	stringInput bool
	decode      func(body []byte) (*providers.Request, error)
	// forward relays the body to an upstream speaking the surface's own format.
	forward func(c *call, w http.ResponseWriter, r *http.Request, rt Route, fw providers.Forwarder, body []byte, f chatFields) error
	// encoder answers from the neutral model.
	encoder func(f chatFields) neutralSurface
	// precheck refuses requests the surface cannot serve at all, before any credit is held.
	precheck func(body []byte) error
}

var chatCompletionsSurface = textSurface{
	capability: capability{endpoint: "/chat/completions", format: providers.FormatOpenAIChat, neutral: isChatProvider, meters: textMeters},
	inputKey:   "messages",
	decode:     openai.DecodeChatRequest,
	forward:    (*call).chatForward,
	encoder:    func(f chatFields) neutralSurface { return chatSurface{includeUsage: f.includeUsage} },
}

// chatCompletions serves POST /chat/completions.
func (g *Gateway) chatCompletions(w http.ResponseWriter, r *http.Request, caller *Caller) error {
	return g.serveText(w, r, caller, &chatCompletionsSurface)
}

// serveText runs a text request: validate, reserve, try the routes in order, settle.
func (g *Gateway) serveText(w http.ResponseWriter, r *http.Request, caller *Caller, ts *textSurface) error {
	body, apiErr := g.readBody(w, r)
	if apiErr != nil {
		return apiErr
	}
	f, apiErr := parseFields(body, ts.inputKey, ts.stringInput)
	if apiErr != nil {
		return apiErr
	}
	if ts.precheck != nil {
		if err := ts.precheck(body); err != nil {
			return newError(http.StatusBadRequest, CodeNotSupported, err.Error())
		}
	}
	c, apiErr := g.begin(w, r, caller, &ts.capability, f.model, len(body), f.meta, func(rt Route) (int64, error) {
		out := rt.MaxOutputTokens
		if f.maxTokens > 0 {
			out = f.maxTokens
		}
		return pricing.WorstCase(rt.Price, estimateTokens(len(body)), out), nil
	})
	if apiErr != nil {
		return apiErr
	}
	defer c.settleOutcome(r.Context())
	c.Streamed, c.prompt = f.stream, body

	var neutral *providers.Request
	decode := func() (*providers.Request, error) {
		if neutral != nil {
			return neutral, nil
		}
		var err error
		neutral, err = ts.decode(body)
		return neutral, err
	}
	c.prepareFailover(f.stream, decode)
	return c.tryRoutes(r.Context(), f.stream, func(rt Route) *APIError {
		if _, ok := forwarderFor(rt, ts.capability.format); !ok || ts.forward == nil {
			if _, err := decode(); err != nil {
				return validationFrom(err)
			}
		}
		return nil
	}, func(ctx context.Context, rt Route) error {
		ar := requestIn(r, ctx)
		if fw, ok := forwarderFor(rt, ts.capability.format); ok && ts.forward != nil {
			return ts.forward(c, w, ar, rt, fw, body, f)
		}
		return c.neutral(w, ar, rt, neutral, f.stream, ts.encoder(f))
	})
}

// CodeContextLengthExceeded is the code adapters give a request too long for the model.
const CodeContextLengthExceeded = "context_length_exceeded"

// clientGone notes that the client left before the answer was complete.
func (c *call) clientGone() {
	c.Cancelled = true
	if c.Status == 0 {
		c.Status = 499
	}
	c.ErrorCode, c.ErrorOrigin, c.ErrorMessage = CodeClientClosedRequest, "user", "the client closed the connection"
}

func validationFrom(err error) *APIError {
	return newError(http.StatusBadRequest, CodeValidation, err.Error())
}

func forwarderFor(rt Route, f providers.WireFormat) (providers.Forwarder, bool) {
	fw, ok := rt.Provider.(providers.Forwarder)
	if !ok {
		return nil, false
	}
	for _, have := range fw.Formats() {
		if have == f {
			return fw, true
		}
	}
	return nil, false
}

// forwardHeaders are client headers an upstream may use; credentials are never among them.
var forwardHeaders = []string{"User-Agent", "X-Request-Id", "Idempotency-Key", "Anthropic-Version", "Anthropic-Beta"}

func passHeaders(r *http.Request) http.Header {
	h := make(http.Header, len(forwardHeaders))
	for _, k := range forwardHeaders {
		if v := r.Header.Get(k); v != "" {
			h.Set(k, v)
		}
	}
	return h
}

// upstreamChatBody rewrites the client's body for a route: its model id, no "meta", and
// usage always requested on streams (the gateway bills from it).
func upstreamChatBody(body []byte, model string, f chatFields) ([]byte, error) {
	// Deleting first copies nothing when there is no meta; the sets then copy once.
	out, err := rawjson.Delete(body, "meta")
	if err != nil {
		return nil, err
	}
	edits := []rawjson.Edit{{Key: "model", Value: rawjson.AppendStringLikeMarshal(nil, model)}}
	if f.stream && !f.includeUsage {
		opts, _ := rawjson.Get(out, "stream_options")
		if rawjson.IsNull(opts) || opts[0] != '{' {
			opts = []byte(`{}`)
		}
		if opts, err = rawjson.Set(opts, "include_usage", []byte("true")); err != nil {
			return nil, err
		}
		edits = append(edits, rawjson.Edit{Key: "stream_options", Value: opts})
	}
	return rawjson.SetMany(out, edits...)
}

// chatForward is the byte-forwarding path: the upstream speaks chat completions itself.
func (c *call) chatForward(w http.ResponseWriter, r *http.Request, rt Route, fw providers.Forwarder, body []byte, f chatFields) error {
	up, err := upstreamChatBody(body, rt.UpstreamModel, f)
	if err != nil {
		return fmt.Errorf("rewriting the request: %w", err)
	}
	return c.forward(w, r, rt, fw, up, f.stream, chatWire, func(began time.Time, resp *providers.RawResponse) error {
		return c.chatForwardStream(w, r, rt, began, resp, f)
	})
}

var chatWire = wireFormat{format: providers.FormatOpenAIChat, parseUsage: openai.ParseChatUsage, appendUsage: openai.AppendChatUsage, finish: firstFinishReason}

func firstFinishReason(resp []byte) string {
	choices, err := rawjson.Get(resp, "choices")
	if err != nil || len(choices) == 0 || choices[0] != '[' {
		return ""
	}
	first, err := rawjson.First(choices)
	if err != nil || len(first) == 0 || first[0] != '{' {
		return ""
	}
	raw, err := rawjson.Get(first, "finish_reason")
	if err != nil {
		return ""
	}
	fr, _ := rawjson.String(raw)
	return fr
}

// chatForwardStream relays an upstream chat stream event by event. Nothing reaches the
// client before the first upstream event, so a stream that fails at once can still fall
// back to the next route.
func (c *call) chatForwardStream(w http.ResponseWriter, r *http.Request, rt Route, began time.Time, resp *providers.RawResponse, f chatFields) error {
	defer resp.Body.Close()
	idle := newIdleTimer(c.g.StreamIdleTimeout, func() { _ = resp.Body.Close() })
	defer idle.Stop()
	out := newSSEWriter(w)
	defer out.release()
	rd := sse.NewReader(resp.Body, maxStreamEvent)
	defer rd.Release()
	out.holdFor(rd)
	quotedID := rawjson.AppendStringLikeMarshal(nil, c.GenerationID)
	var usageChunk []byte
	done := false
	var streamErr *providers.UpstreamError
	var chunk openai.ChunkFrame
	for rd.Next() {
		idle.kick()
		data := rd.Event().Data
		if len(data) == 0 {
			continue
		}
		if string(data) == "[DONE]" {
			done = true
			break
		}
		if c.FirstByte.IsZero() {
			c.FirstByte = c.g.Now()
		}
		chunkOK := chunk.Read(data)
		if !chunkOK && !rawjson.Valid(data) {
			// One bad frame does not spoil the answer: skip it and note it. (Valid JSON of
			// another shape is relayed as it came.)
			c.skippedFrames++
			continue
		}
		if chunkOK {
			if chunk.Failed() {
				streamErr = inStreamError(rt.ProviderName, chunk.Error, data)
				break
			}
			if c.trackText {
				c.delivered.WriteString(chunk.Text())
			}
			if raw := chunk.UsageValue(); raw != nil {
				if u, err := openai.ParseChatUsage(raw); err == nil {
					c.reportTokens(u)
				}
				if len(chunk.Choices) == 0 {
					usageChunk = append(usageChunk[:0], data...)
					continue
				}
			}
			if c.UpstreamID == "" && chunk.IDEnd > 0 {
				c.UpstreamID, _ = rawjson.String(data[chunk.IDStart:chunk.IDEnd])
			}
			if fr := chunk.FinishReason(); fr != "" {
				c.FinishReason = fr
			}
			if c.awaitingToken() && chunk.Answer() {
				c.gotToken()
			}
		}
		c.relayCommit(out, &rt, began)
		if chunkOK && chunk.IDEnd > 0 {
			// The gateway's id in place of the upstream's, spliced as the frame is written.
			out.dataReplacing(data, chunk.IDStart, chunk.IDEnd, quotedID)
		} else if withID, err := rawjson.Set(data, "id", quotedID); err == nil {
			out.data(withID)
		} else {
			out.data(data)
		}
		c.chunks++
		if out.failed {
			break
		}
	}
	// A stream that ended cleanly without [DONE] is finished for the client, with usage.
	streamErr, err := c.relayEnd(r, rt, out, idle, rd.Err(), streamErr, done)
	if err != nil {
		return relayResult(err)
	}
	if streamErr != nil {
		sink := &chatSink{c: c, enc: openai.NewChunkEncoder(c.GenerationID, rt.UpstreamModel, c.Start.Unix()), includeUsage: f.includeUsage}
		defer sink.release()
		return c.relayFailed(out, rt, began, streamErr, sink)
	}
	c.relayCommit(out, &rt, began)
	var final []byte
	if f.includeUsage || c.wantMeta {
		if usageChunk == nil {
			usageChunk = usageChunkFor(c.GenerationID, rt.UpstreamModel, c.Start.Unix(), c.tokens())
		}
		var last lastFrame
		defer last.release()
		final = last.decorate(c, usageChunk, "id", openai.AppendChatUsage)
	}
	if settled, _ := c.chargeDelivered(r.Context()); !settled {
		out.data(chatErrorFrame(notRecordedStream))
		return nil
	}
	if final != nil {
		out.frames([]frame{{data: final}, doneFrame})
		return nil
	}
	out.frames([]frame{doneFrame})
	return nil
}

// inStreamError reads an error frame an upstream sent inside its stream.
func inStreamError(provider string, errRaw, frame []byte) *providers.UpstreamError {
	ue := &providers.UpstreamError{Provider: provider, Category: providers.CategoryServerError, Retryable: true, Payload: providers.Preview(frame)}
	if s, ok := rawjson.String(errRaw); ok {
		ue.Message = s
		return ue
	}
	var e struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    any    `json:"code"`
	}
	_ = json.Unmarshal(errRaw, &e)
	ue.Message, ue.Type = e.Message, e.Type
	if e.Code != nil {
		ue.Code = fmt.Sprint(e.Code)
	}
	if ue.Message == "" {
		ue.Message = "the provider reported an error in its stream"
	}
	return ue
}

// chatErrorFrame is the in-band error of a chat stream that already began: openai-go and
// openai-node raise any frame with an "error" key as an API error.
func chatErrorFrame(ue *providers.UpstreamError) []byte {
	code := "upstream_error"
	if ue.Timeout {
		code = "upstream_timeout"
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": fmt.Sprintf("the answer was interrupted: %s", upstreamMessage(ue)),
		"type":    "server_error", "param": nil, "code": code,
	}})
	return b
}

// usageChunkFor is a chat chunk with choices: [] and the usage, for streams whose upstream
// sent its usage some other way.
func usageChunkFor(id, model string, created int64, u providers.Usage) []byte {
	enc := openai.NewChunkEncoder(id, model, created)
	defer enc.Release()
	chunk, _ := enc.Encode(providers.Event{Type: providers.EventUsage, Usage: u})
	return bytes.Clone(chunk)
}
