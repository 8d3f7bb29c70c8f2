package handlers

import (
	"fmt"
	"strings"
	"time"

	"github.com/modelgateway/caddy-modelgateway/billing"
	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/providers"
)

// usageMinus is u without what o counted, never below zero.
func usageMinus(u, o providers.Usage) providers.Usage {
	sub := func(a, b int64) int64 { return max(0, a-b) }
	return providers.Usage{Input: sub(u.Input, o.Input), CacheRead: sub(u.CacheRead, o.CacheRead), CacheWrite: sub(u.CacheWrite, o.CacheWrite),
		Output: sub(u.Output, o.Output), Reasoning: sub(u.Reasoning, o.Reasoning)}
}

func usagePlus(u, o providers.Usage) providers.Usage {
	return providers.Usage{Input: u.Input + o.Input, CacheRead: u.CacheRead + o.CacheRead, CacheWrite: u.CacheWrite + o.CacheWrite,
		Output: u.Output + o.Output, Reasoning: u.Reasoning + o.Reasoning}
}

// prepareFailover decides, before streaming, whether the text delivered must be tracked: only
// when a later route could continue the answer from a prefill.
func (c *call) prepareFailover(stream bool, decode func() (*providers.Request, error)) {
	c.neutralReq = decode
	if !stream {
		return
	}
	for i, rt := range c.routes {
		if i > 0 && rt.Prefill {
			if _, ok := rt.Provider.(providers.ChatProvider); ok {
				c.trackText = true
				return
			}
		}
	}
}

// midStreamFailure handles a stream that broke after part of the answer reached the client:
// it continues on the next route that accepts a prefill, sending only the remainder through
// sink, or ends the stream with the surface's in-band error (never a clean end).
func (c *call) midStreamFailure(out *sseWriter, broken Route, ue *providers.UpstreamError, sink streamSink) {
	c.addFailure(broken, ue)
	if n := len(c.Attempts); n > 0 {
		c.Attempts[n-1].Error, c.Attempts[n-1].Category = "stream broke after output began: "+ue.Error(), string(ue.Category)
	}
	if _, fixed := sink.(interface{ noContinue() }); !fixed && c.trackText && c.failover(out, broken, sink) {
		return
	}
	c.ErrorCode, c.ErrorOrigin, c.ErrorMessage = CodeUpstream, "upstream", ue.Error()
	c.settleOutcome(c.reqCtx)
	out.frames(sink.fail(ue))
}

// failover continues the answer on the routes after broken that accept a prefill. It returns
// false when none could (nothing more was written then).
func (c *call) failover(out *sseWriter, broken Route, sink streamSink) bool {
	req, err := c.neutralReq()
	if err != nil {
		return false
	}
	after := false
	for _, rt := range c.routes {
		if !after {
			after = rt.ProviderName == broken.ProviderName && rt.UpstreamModel == broken.UpstreamModel
			continue
		}
		cp, ok := rt.Provider.(providers.ChatProvider)
		if !ok || !rt.Prefill || !rt.breaker.allow(c.g.Now(), rt.Policy) {
			continue
		}
		// What the broken attempt consumed stays billed at its route's prices.
		c.estimateUsage()
		c.carry()
		delivered := c.delivered.String()
		rq := *req
		rq.Model, rq.Stream = rt.UpstreamModel, true
		rq.Messages = append(append([]providers.Message{}, req.Messages...), providers.Message{
			Role: providers.RoleAssistant, Content: []providers.Part{{Type: providers.PartText, Text: delivered}},
		})
		began := c.g.Now()
		st, err := cp.ChatStream(c.reqCtx, &rq)
		if err != nil {
			c.recordAttempt(rt, began, err)
			rt.breaker.fail(c.g.Now(), rt.Policy, err)
			continue
		}
		done := c.relayContinuation(out, rt, began, st, sink)
		_ = st.Close()
		if done {
			return true
		}
	}
	return false
}

// carry moves the current attempt's usage and cost into the call's carried totals.
func (c *call) carry() {
	if c.route == nil {
		return
	}
	lines, total := pricing.Cost(usageMinus(c.tokens(), c.carriedTokens()).Metered(), c.priceOf(*c.route))
	if c.Carried == nil {
		c.Carried = &billing.Carried{}
	}
	c.Carried.Lines = append(c.Carried.Lines, lines...)
	c.Carried.Nanos += total
	c.Carried.Usage = c.Usage
	c.UsageKnown = false
}

// carriedTokens is what the broken attempts of a failed-over stream consumed, in tokens.
func (c *call) carriedTokens() providers.Usage {
	if c.Carried == nil {
		return providers.Usage{}
	}
	return tokenCounts(&c.Carried.Usage)
}

// priceOf is what the call is charged on rt: billedPrice, which POST /pricing/calculate
// prices with too.
func (c *call) priceOf(rt Route) pricing.Price { return billedPrice(c.model, rt) }

// relayContinuation streams a continuation through sink. It returns false if the route failed
// before adding anything (the next route may try), true once the client has the end of the
// answer or an in-band error.
func (c *call) relayContinuation(out *sseWriter, rt Route, began time.Time, st providers.Stream, sink streamSink) bool {
	added := false
	for st.Next() {
		ev := st.Current()
		switch ev.Type {
		case providers.EventUsage:
			c.reportTokens(usagePlus(c.carriedTokens(), ev.Usage))
			continue
		case providers.EventFinish:
			c.FinishReason, c.stopSequence = string(ev.FinishReason), ev.StopSequence
		case providers.EventText:
			if !added && endsWithSpace(c.delivered.String()) {
				// Providers trim a prefill's trailing whitespace, then start the continuation
				// with it: the client already has it.
				ev.Text = strings.TrimLeft(ev.Text, " \t\n")
				if ev.Text == "" {
					continue
				}
			}
			if !added {
				c.recordAttempt(rt, began, nil)
				c.route = &rt
				c.streaming = c.g.Now()
				added = true
			}
			c.chunks++
			c.delivered.WriteString(ev.Text)
		case providers.EventToolCall, providers.EventReasoning:
			continue
		}
		out.frames(sink.event(ev))
		if out.failed || c.gone() {
			rt.breaker.release()
			c.clientGone()
			c.streamDone()
			c.settleOutcome(c.reqCtx)
			return true
		}
	}
	c.streamDone()
	if err := st.Err(); err != nil {
		ue, ok := providers.AsUpstreamError(err)
		if !ok {
			ue = c.providerFault(rt, err.Error(), nil)
		}
		if !added {
			c.recordAttempt(rt, began, ue)
			rt.breaker.fail(c.g.Now(), rt.Policy, ue)
			return false
		}
		rt.breaker.fail(c.g.Now(), rt.Policy, ue)
		c.addFailure(rt, ue)
		c.ErrorCode, c.ErrorOrigin, c.ErrorMessage = CodeUpstream, "upstream", fmt.Sprintf("the continuation on %s broke too: %v", rt.ProviderName, ue)
		c.settleOutcome(c.reqCtx)
		out.frames(sink.fail(ue))
		return true
	}
	if !added {
		c.recordAttempt(rt, began, nil)
		c.route = &rt
	}
	rt.breaker.record(c.g.Now(), rt.Policy, true)
	c.failedOver = true
	if !c.UsageKnown {
		c.estimateUsage()
	}
	final := sink.finish(c)
	if settled, _ := c.chargeDelivered(c.reqCtx); !settled {
		final = sink.fail(notRecordedStream)
	}
	out.frames(final)
	return true
}

// failoverNote describes a failed-over answer for the generation record.
func (c *call) failoverNote() string {
	names := make([]string, 0, len(c.Failures))
	for _, f := range c.Failures {
		names = append(names, f.Provider)
	}
	return "continued after a broken stream on " + strings.Join(names, ", ")
}

func endsWithSpace(s string) bool {
	return s != "" && strings.ContainsRune(" \t\n", rune(s[len(s)-1]))
}
