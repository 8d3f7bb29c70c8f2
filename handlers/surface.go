package handlers

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// frame is one SSE event of a surface: an optional event name and its data.
type frame struct {
	event string
	data  []byte
}

// neutralSurface writes neutral answers in a client surface's own wire format. Each surface
// (chat completions, messages, responses) has one; adapters never see it.
type neutralSurface interface {
	// response encodes a complete answer, decorated with the gateway's id, cost and meta,
	// appending it to dst.
	response(dst []byte, c *call, resp *providers.Response, model string) ([]byte, error)
	// sink starts the encoding of one streamed answer.
	sink(c *call, model string) streamSink
}

// streamSink encodes one streamed answer event by event.
type streamSink interface {
	// start is what precedes the first event (Anthropic's message_start, Responses' created).
	start() []frame
	event(ev providers.Event) []frame
	// finish closes the answer after a clean end: the usage frame, decorated with cost, and
	// the surface's terminator.
	finish(c *call) []frame
	// fail is the in-band error of a stream that already began.
	fail(ue *providers.UpstreamError) []frame
}

// releaser is a sink whose encoder goes back to its pool once the stream's last frame is
// written.
type releaser interface{ release() }

// lastFrame holds a stream's last frame, the one that carries the usage, decorated (its
// cost under "usage", meta when asked, the gateway's id under idKey) in a pooled buffer until
// the stream's frames are written.
type lastFrame struct{ buf *[]byte }

// decorate returns obj decorated as a complete answer is, or obj itself when it cannot be
// (it is not a JSON object).
func (l *lastFrame) decorate(c *call, obj []byte, idKey string, fallback usageEncoder) []byte {
	if l.buf == nil {
		l.buf = decorationBufs.Get()
	}
	dec, err := c.appendDecorated((*l.buf)[:0], obj, idKey, "usage", fallback)
	if err != nil {
		return obj
	}
	*l.buf = dec
	return dec
}

// release hands the buffer back; what decorate returned may not be used after it.
func (l *lastFrame) release() {
	if l.buf != nil {
		decorationBufs.Put(l.buf, *l.buf)
		l.buf = nil
	}
}

var doneFrame = frame{data: []byte("[DONE]")}

// neutral serves a request through a route's ChatProvider and encodes the answer for the
// surface. It returns an *providers.UpstreamError when nothing reached the client, so that the
// next route can be tried; nil once the client has an answer (or an in-band error).
func (c *call) neutral(w http.ResponseWriter, r *http.Request, rt Route, req *providers.Request, stream bool, s neutralSurface) error {
	cp, ok := rt.Provider.(providers.ChatProvider)
	if !ok {
		return &providers.UpstreamError{Provider: rt.ProviderName, Category: providers.CategoryModelUnavailable, Message: "the provider cannot serve this endpoint"}
	}
	rq := *req
	rq.Model = rt.UpstreamModel
	rq.Stream = stream
	c.dropped = unsupported(rt.Provider, &rq)
	began := c.g.Now()
	if !stream {
		resp, err := cp.Chat(r.Context(), &rq)
		c.recordAttempt(rt, began, err)
		if err != nil {
			return err
		}
		c.FirstByte = c.g.Now()
		c.route = &rt
		c.reportTokens(resp.Usage)
		c.UpstreamID, c.FinishReason = resp.ID, string(resp.FinishReason)
		// Built in a buffer reused across requests: nothing keeps it once written.
		buf := answerBufs.Get()
		out, err := s.response((*buf)[:0], c, resp, rt.UpstreamModel)
		defer answerBufs.Put(buf, out)
		if err != nil {
			return err
		}
		c.Status = http.StatusOK
		if apiErr := c.settleAnswer(r.Context()); apiErr != nil {
			return apiErr
		}
		writeRawJSON(w, http.StatusOK, out)
		return nil
	}
	st, err := cp.ChatStream(r.Context(), &rq)
	if err != nil {
		c.recordAttempt(rt, began, err)
		return err
	}
	c.headersArrived()
	defer st.Close()
	return c.neutralStream(w, r, rt, began, st, s.sink(c, rt.UpstreamModel))
}

// neutralStream relays a neutral stream through a sink. Nothing is written before the first
// upstream event, so an early failure can still fall back.
func (c *call) neutralStream(w http.ResponseWriter, r *http.Request, rt Route, began time.Time, st providers.Stream, sink streamSink) error {
	if rs, ok := sink.(releaser); ok {
		// Every frame is written by the time this returns (sseWriter copies them).
		defer rs.release()
	}
	out := newSSEWriter(w)
	defer out.release()
	if wt, ok := st.(providers.Waiter); ok {
		out.holdFor(wt)
	}
	commit := func() {
		if !out.started {
			c.relayCommit(out, &rt, began)
			out.frames(sink.start())
		}
	}
	for st.Next() {
		ev := st.Current()
		if c.FirstByte.IsZero() {
			c.FirstByte = c.g.Now()
		}
		switch ev.Type {
		case providers.EventUsage:
			c.reportTokens(ev.Usage)
			continue
		case providers.EventFinish:
			c.FinishReason = string(ev.FinishReason)
			c.stopSequence = ev.StopSequence
		case providers.EventText, providers.EventToolCall, providers.EventReasoning:
			c.chunks++
			c.gotToken()
			if ev.Type == providers.EventText && c.trackText {
				c.delivered.WriteString(ev.Text)
			}
		}
		frames := sink.event(ev)
		if len(frames) == 0 {
			continue
		}
		commit()
		out.frames(frames)
		if out.failed {
			break
		}
	}
	c.streamDone()
	if sf, ok := st.(interface{ SkippedFrames() int }); ok {
		c.skippedFrames += sf.SkippedFrames()
	}
	if c.gone() || out.failed {
		if !out.started {
			return context.Canceled
		}
		c.clientGone()
		return nil
	}
	if err := st.Err(); err != nil {
		ue, ok := providers.AsUpstreamError(err)
		if tu := c.timeoutCause(r.Context(), rt); tu != nil {
			ue, ok = tu, true
		}
		if !ok {
			ue = c.providerFault(rt, "the provider's stream failed: "+err.Error(), nil)
		}
		return c.relayFailed(out, rt, began, ue, sink)
	}
	commit()
	final := sink.finish(c)
	if settled, _ := c.chargeDelivered(r.Context()); !settled {
		final = sink.fail(notRecordedStream)
	}
	out.frames(final)
	return nil
}

// unsupported asks an adapter which request parameters it cannot honour; they are dropped
// and reported in meta.dropped_parameters.
func unsupported(p providers.Provider, req *providers.Request) []string {
	if u, ok := p.(interface {
		Unsupported(*providers.Request) []string
	}); ok {
		return u.Unsupported(req)
	}
	return nil
}

// usageEncoder appends usage in a surface's wire format (openai.AppendChatUsage...): the
// usage object an answer gets when it came without one. It runs only then.
type usageEncoder func(b []byte, u providers.Usage) []byte

// decorateUsage adds cost fields to the usage object at path inside obj (creating it with
// fallback when absent) and returns the new object.
func (c *call) decorateUsage(obj []byte, fallback usageEncoder, path ...string) ([]byte, error) {
	if len(path) == 0 {
		return obj, nil
	}
	if len(path) > 1 {
		inner, err := rawjson.Get(obj, path[0])
		if err != nil {
			return nil, err
		}
		if rawjson.IsNull(inner) {
			return obj, nil
		}
		if inner, err = c.decorateUsage(inner, fallback, path[1:]...); err != nil {
			return nil, err
		}
		return rawjson.Set(obj, path[0], inner)
	}
	usage, err := c.costedUsage(obj, path[0], fallback)
	if err != nil {
		return nil, err
	}
	return rawjson.Set(obj, path[0], usage)
}

// costedUsage is the usage object under key in obj (fallback when absent) with the cost
// fields added.
func (c *call) costedUsage(obj []byte, key string, fallback usageEncoder) ([]byte, error) {
	return c.appendCostedUsage(nil, obj, key, fallback)
}

// appendCostedUsage appends what costedUsage returns to dst, which must not overlap obj.
func (c *call) appendCostedUsage(dst, obj []byte, key string, fallback usageEncoder) ([]byte, error) {
	usage, err := rawjson.Get(obj, key)
	if err != nil {
		return nil, err
	}
	if rawjson.IsNull(usage) {
		usage = fallback(nil, c.tokens())
	}
	lines, total := c.cost()
	// The values live on the stack: they are copied into dst and dropped.
	var costBuf, nanosBuf [24]byte
	var linesBuf [256]byte
	return rawjson.AppendSetMany(dst, usage,
		rawjson.Edit{Key: "cost", Value: pricing.AppendUSD(costBuf[:0], total)},
		rawjson.Edit{Key: "cost_nanos", Value: strconv.AppendInt(nanosBuf[:0], total, 10)},
		rawjson.Edit{Key: "cost_lines", Value: store.AppendCostLinesJSON(linesBuf[:0], nonNilLines(lines))})
}

// appendDecorated appends obj to dst with the gateway's id set under idKey (left as it is
// with no idKey), cost added to the usage object under usageKey (fallback when absent) and
// meta when asked, in one copy of obj. The values it sets are built in a pooled buffer,
// garbage once copied into dst.
func (c *call) appendDecorated(dst, obj []byte, idKey, usageKey string, fallback usageEncoder) ([]byte, error) {
	scratch := decorationBufs.Get()
	b, err := c.appendCostedUsage((*scratch)[:0], obj, usageKey, fallback)
	if err != nil {
		decorationBufs.Put(scratch, nil)
		return nil, err
	}
	usageEnd := len(b)
	if idKey != "" {
		b = rawjson.AppendStringLikeMarshal(b, c.GenerationID)
	}
	idEnd := len(b)
	if c.wantMeta {
		b = c.appendMeta(b)
	}
	// Sliced once b no longer grows.
	edits := make([]rawjson.Edit, 0, 3)
	if idKey != "" {
		edits = append(edits, rawjson.Edit{Key: idKey, Value: b[usageEnd:idEnd]})
	}
	edits = append(edits, rawjson.Edit{Key: usageKey, Value: b[:usageEnd]})
	if c.wantMeta {
		edits = append(edits, rawjson.Edit{Key: "meta", Value: b[idEnd:]})
	}
	out, err := rawjson.AppendSetMany(dst, obj, edits...)
	decorationBufs.Put(scratch, b)
	return out, err
}

// appendAdditions appends to b what appendDecorated adds to an answer (the cost members of
// its usage object, then meta when asked) as members for an encoder to write in
// (providers.Additions); they live in b.
func (c *call) appendAdditions(b []byte) ([]byte, providers.Additions) {
	lines, total := c.cost()
	b = pricing.AppendUSD(append(b, `"cost":`...), total)
	b = strconv.AppendInt(append(b, `,"cost_nanos":`...), total, 10)
	b = store.AppendCostLinesJSON(append(b, `,"cost_lines":`...), nonNilLines(lines))
	usageEnd := len(b)
	if c.wantMeta {
		b = c.appendMeta(append(b, `"meta":`...))
	}
	return b, providers.Additions{Usage: b[:usageEnd], Top: b[usageEnd:]}
}

// appendAnswer appends the neutral answer to dst as encode writes it, decorated: the cost and
// meta written in by encode itself when it can (added), otherwise by appendDecorated reading
// the encoded answer back.
func (c *call) appendAnswer(dst []byte, idKey string, fallback usageEncoder, encode func(dst []byte, add providers.Additions) (b []byte, added bool, err error)) ([]byte, error) {
	scratch := decorationBufs.Get()
	b, add := c.appendAdditions((*scratch)[:0])
	out, added, err := encode(dst, add)
	decorationBufs.Put(scratch, b)
	if err != nil {
		return nil, err
	}
	if added {
		return out, nil
	}
	tmp := answerBufs.Get()
	data := append((*tmp)[:0], out[len(dst):]...)
	defer answerBufs.Put(tmp, data)
	return c.appendDecorated(dst, data, idKey, "usage", fallback)
}

// setID replaces a string field (the answer's id) with the generation id.
func (c *call) setID(obj []byte, path ...string) []byte {
	quoted := rawjson.AppendStringLikeMarshal(nil, c.GenerationID)
	if len(path) == 1 {
		if out, err := rawjson.Set(obj, path[0], quoted); err == nil {
			return out
		}
		return obj
	}
	inner, err := rawjson.Get(obj, path[0])
	if err != nil || rawjson.IsNull(inner) {
		return obj
	}
	if out, err := rawjson.Set(obj, path[0], c.setID(inner, path[1:]...)); err == nil {
		return out
	}
	return obj
}

// withMeta adds the meta object when the request asked for it.
func (c *call) withMeta(obj []byte) ([]byte, error) {
	if !c.wantMeta {
		return obj, nil
	}
	return rawjson.Set(obj, "meta", c.appendMeta(make([]byte, 0, 320)))
}

var noCostLines = []store.CostLine{}

// nonNilLines makes no cost lines read [] rather than null in a response.
func nonNilLines(lines []store.CostLine) []store.CostLine {
	if lines == nil {
		return noCostLines
	}
	return lines
}
