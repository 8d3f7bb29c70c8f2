package handlers

import (
	"context"
	"net/http"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/openai"
)

// chatNeutral serves a chat completions request through an adapter of the neutral model.
func (c *call) chatNeutral(w http.ResponseWriter, r *http.Request, rt Route, req *providers.Request, f chatFields) error {
	cp, ok := rt.Provider.(providers.ChatProvider)
	if !ok {
		return &providers.UpstreamError{Provider: rt.ProviderName, Category: providers.CategoryModelUnavailable, Message: "the provider cannot serve chat completions"}
	}
	rq := *req
	rq.Model = rt.UpstreamModel
	rq.Stream = f.stream
	began := c.g.Now()
	if !f.stream {
		resp, err := cp.Chat(r.Context(), &rq)
		c.recordAttempt(rt, began, err)
		if err != nil {
			return err
		}
		c.firstByte = c.g.Now()
		c.route = &rt
		c.usage, c.usageKnown = resp.Usage, true
		c.upstreamID, c.finish = resp.ID, string(resp.FinishReason)
		resp.Model = rt.UpstreamModel
		data, err := openai.EncodeChatResponse(resp, c.genID, c.start.Unix())
		if err != nil {
			return err
		}
		out, err := c.decorate(data, true)
		if err != nil {
			return err
		}
		c.status = http.StatusOK
		c.settle(r.Context())
		writeRawJSON(w, http.StatusOK, out)
		return nil
	}
	st, err := cp.ChatStream(r.Context(), &rq)
	if err != nil {
		c.recordAttempt(rt, began, err)
		return err
	}
	defer st.Close()
	return c.chatNeutralStream(w, r, rt, began, st, f)
}

func (c *call) chatNeutralStream(w http.ResponseWriter, r *http.Request, rt Route, began time.Time, st providers.Stream, f chatFields) error {
	out := newSSEWriter(w)
	enc := openai.NewChunkEncoder(c.genID, rt.UpstreamModel, c.start.Unix())
	for st.Next() {
		ev := st.Current()
		if c.firstByte.IsZero() {
			c.firstByte = c.g.Now()
		}
		switch ev.Type {
		case providers.EventUsage:
			c.usage, c.usageKnown = ev.Usage, true
			continue
		case providers.EventFinish:
			c.finish = string(ev.FinishReason)
		}
		chunk, ok := enc.Encode(ev)
		if !ok {
			continue
		}
		if !out.started {
			c.recordAttempt(rt, began, nil)
			c.route = &rt
			c.status = http.StatusOK
		}
		out.data(chunk)
		if ev.Type == providers.EventText || ev.Type == providers.EventToolCall {
			c.chunks++
		}
		if out.failed {
			break
		}
	}
	if r.Context().Err() != nil || out.failed {
		if !out.started {
			return context.Canceled
		}
		c.clientGone()
		return nil
	}
	if err := st.Err(); err != nil {
		ue, ok := providers.AsUpstreamError(err)
		if !ok {
			ue = c.streamFailure(rt, "the provider's stream failed: "+err.Error(), nil)
		}
		if !out.started {
			c.recordAttempt(rt, began, ue)
			return ue
		}
		c.failures = append(c.failures, failure{route: rt, err: ue})
		c.errCode, c.errMessage = CodeUpstream, ue.Error()
		c.settle(r.Context())
		out.data(chatErrorFrame(ue))
		return nil
	}
	if !out.started {
		c.recordAttempt(rt, began, nil)
		c.route = &rt
		c.status = http.StatusOK
	}
	var final []byte
	if f.includeUsage || c.wantMeta {
		if chunk, ok := enc.Encode(providers.Event{Type: providers.EventUsage, Usage: c.usage}); ok {
			final, _ = c.decorate(chunk, true)
		}
	}
	c.settle(r.Context())
	if final != nil {
		out.data(final)
	}
	out.data([]byte("[DONE]"))
	return nil
}
