package handlers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/billing"
	"github.com/modelgateway/caddy-modelgateway/internal/meter"
	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// call is one generation request in flight, from the reservation to the settlement. It is
// the charge (billing.Charge: what billing knows of the call, free of HTTP) and the
// exchange (the client's request, the attempt, the stream's state, the text failover's
// fields). The surface handlers fill in what happened; settle prices it, charges and
// records it.
type call struct {
	billing.Charge

	g      *Gateway
	caller *Caller
	// reqCtx is the client's request context: it ends when the client leaves.
	reqCtx context.Context
	// att is the attempt in progress, with its timers.
	att   *attemptState
	model *Model
	// routes are the charge's Routes, with what makes them callable.
	routes []Route
	// leaseHold is the storage of the charge's Hold when a key lease admitted the call.
	leaseHold billing.LeaseHold
	wantMeta  bool
	// promptBytes sizes the estimate of input tokens when the upstream never reports usage,
	// unless prompt, the body of a text or embeddings request, is set: its text does.
	promptBytes int
	prompt      []byte

	// lastFailure is the error of the charge's last Failure, which tryRoutes tells apart
	// by identity.
	lastFailure *providers.UpstreamError
	// skipped are the model's routes left out of the call, and why.
	skipped []droppedRoute

	// For mid-stream failover: the conversation in the neutral model, whether text is being
	// tracked (a route that accepts a prefill remains), and the text the client has.
	neutralReq    func() (*providers.Request, error)
	trackText     bool
	delivered     strings.Builder
	skippedFrames int
	failedOver    bool

	// route is the route that produced the answer. The charge's Usage is what it consumed:
	// a media call's (Metered) is priced by every dimension, and one whose usage turns out
	// unpriceable is charged Most, the worst case the call was admitted for.
	route *Route
	// capAtHold charges the metered usage at most Most, the request's hold: its worst case
	// bounds what the upstream can charge (a transcription's, from the audio measured), so
	// more is an upstream's error, not the caller's to pay from a wallet that others draw
	// on. overHold is what it was priced beyond.
	capAtHold bool
	overHold  int64
	// unpricedLogged: the answer and the settlement both price an unpriceable usage; it
	// is logged once.
	unpricedLogged bool
	// abortResponse cuts the response off once the call is settled: a binary answer broke
	// after its first bytes, and the client must not take what it has for the whole.
	abortResponse bool
	chunks        int64
	stopSequence  string
	// dropped lists request parameters the route's adapter could not honour.
	dropped      []string
	upstreamDone time.Time
	// upstreamTime is the time spent waiting on providers, for the overhead figure.
	upstreamTime time.Duration
	// streaming is when the stream being relayed sent its first frame (zero when none is):
	// its time until its end is the provider's, added to upstreamTime by streamDone.
	streaming time.Time
	settled   bool
	// costNanos is what the settlement charged.
	costNanos int64
}

// addFailure notes a failed attempt on rt.
func (c *call) addFailure(rt Route, ue *providers.UpstreamError) {
	c.Failures = append(c.Failures, failureOf(rt, ue))
	c.lastFailure = ue
}

// failureOf is the charge's record of ue on rt.
func failureOf(rt Route, ue *providers.UpstreamError) billing.Failure {
	return billing.Failure{
		RouteName: billing.RouteName{Provider: rt.ProviderName, UpstreamModel: rt.UpstreamModel},
		Category:  string(ue.Category), Status: ue.Status, Code: ue.Code, Message: upstreamMessage(ue), Param: ue.Param,
		Retryable: ue.Retryable, RetryAfter: ue.RetryAfter, PayloadPreview: ue.Payload,
	}
}

// estimateTokens is a deliberately high guess of the tokens in n bytes of request: no
// tokenizer packs less than one byte a token for text, so the reservation covers the prompt.
func estimateTokens(n int) int64 { return int64(n) }

// providerFault is a failure on the provider's side after it answered (a stream broken or cut
// short, an answer the gateway cannot use): retryable, and the next route may do better.
func (c *call) providerFault(rt Route, msg string, payload []byte) *providers.UpstreamError {
	return &providers.UpstreamError{Provider: rt.ProviderName, Category: providers.CategoryServerError, Retryable: true, Message: msg, Payload: providers.Preview(payload)}
}

// recordAttempt notes one upstream call's outcome.
func (c *call) recordAttempt(rt Route, began time.Time, err error) {
	d := c.g.Now().Sub(began)
	c.upstreamTime += d
	a := store.Attempt{Provider: rt.ProviderName, UpstreamModel: rt.UpstreamModel, Status: http.StatusOK, DurationMs: d.Milliseconds()}
	if err != nil {
		a.Status = 0
		a.Error = err.Error()
		if ue, ok := providers.AsUpstreamError(err); ok {
			a.Status = ue.Status
			a.Category = string(ue.Category)
			c.addFailure(rt, ue)
		}
	}
	c.Attempts = append(c.Attempts, a)
	c.g.Metrics.attempt(c, rt.ProviderName, d, err != nil, a.Category)
}

// cost prices the call's usage at its route's prices.
func (c *call) cost() ([]store.CostLine, int64) {
	if c.route == nil {
		return nil, 0
	}
	if c.Metered {
		return c.meteredCost()
	}
	// A ":free" model reserved nothing and is charged nothing, whatever its routes cost.
	lines, total := pricing.Cost(usageMinus(c.tokens(), c.carriedTokens()).Metered(), c.priceOf(*c.route))
	if c.Carried != nil && c.Carried.Lines != nil {
		lines = append(append([]store.CostLine{}, c.Carried.Lines...), lines...)
		total += c.Carried.Nanos
	}
	return lines, total
}

// meter sets the call's usage by dimension, which settle prices, and records in the
// generation's fields of its dimensions (store.Generation.RecordDimensions). Its tokens
// are the record's token counts, audio and image tokens with the text's.
func (c *call) meter(u pricing.Usage) {
	c.Usage, c.Metered, c.UsageKnown = u, true, true
}

// reportTokens sets the token counts an upstream reported. The other dimensions of a
// metered usage stay (a moderation's checks, counted before the call, are what it is
// priced by); audio and image tokens are in a text surface's counts, so they go.
func (c *call) reportTokens(u providers.Usage) {
	c.Usage.Input, c.Usage.CachedInput, c.Usage.CacheWrite, c.Usage.Output, c.Usage.Reasoning = u.Input, u.CacheRead, u.CacheWrite, u.Output, u.Reasoning
	c.Usage.InputAudioTokens, c.Usage.OutputAudioTokens, c.Usage.ImageInputTokens, c.Usage.ImageOutputTokens = 0, 0, 0, 0
	c.UsageKnown = true
}

// tokens is the call's usage as a text surface reports it, in tokens.
func (c *call) tokens() providers.Usage { return tokenCounts(&c.Usage) }

// tokenCounts is u in a text surface's token counts: audio and image tokens with the
// text's. A text call's usage (providers.Usage's Metered) comes back as it was.
func tokenCounts(u *meter.Usage) providers.Usage {
	return providers.Usage{Input: u.Input + u.InputAudioTokens + u.ImageInputTokens, CacheRead: u.CachedInput, CacheWrite: u.CacheWrite,
		Output: u.Output + u.OutputAudioTokens + u.ImageOutputTokens, Reasoning: u.Reasoning}
}

// meteredCost prices the metered usage. A usage the route cannot price after all (the
// upstream made an image of a size the route has no price for) is charged the worst case
// the call was admitted for, never nothing.
func (c *call) meteredCost() ([]store.CostLine, int64) {
	p := c.priceOf(*c.route)
	lines, total, err := p.Cost(c.Usage)
	if err == nil {
		// A media call meters every dimension its answer may be billed by (seconds and
		// tokens of a transcription): the lines are those its route prices.
		lines = slices.DeleteFunc(lines, func(l store.CostLine) bool { return l.UnitPriceNanos == 0 })
		c.overHold = 0
		if c.capAtHold && total > c.Most {
			c.overHold, total = total-c.Most, c.Most
		}
		return lines, total
	}
	if !c.unpricedLogged {
		c.unpricedLogged = true
		c.g.Logger.Error("the answer's usage has no price on its route; charged the worst case admitted",
			zap.String("generation_id", c.GenerationID), zap.String("provider", c.route.ProviderName), zapErr(err))
	}
	dim := pricing.DimRequest
	var ue *pricing.UnpricedError
	if errors.As(err, &ue) {
		dim = ue.Dimension
	}
	line := store.CostLine{Dimension: dim, Quantity: 1, UnitPriceNanos: c.Most, Nanos: c.Most}
	if ue != nil {
		line.Key = ue.LineKey
	}
	return []store.CostLine{line}, c.Most
}

// estimateUsage fills usage from what was seen when the upstream never reported it
// (a cut stream, a client that left): the prompt by its text, or its size, the output by
// its chunks.
func (c *call) estimateUsage() {
	if c.UsageKnown || c.route == nil {
		return
	}
	in := (int64(c.promptBytes) + 3) / 4
	if c.prompt != nil {
		in = estimatePromptTokens(c.prompt)
	}
	c.Usage = meter.Usage{Input: in, Output: c.chunks}
}

// charge is the call's charge as it leaves the request (into a job row, a batch's record):
// its Routes named from the routes the call holds, which no request needs named while it
// runs.
func (c *call) charge() billing.Charge {
	ch := c.Charge
	ch.Routes = make([]billing.RouteName, len(c.routes))
	for i, rt := range c.routes {
		ch.Routes[i] = billing.RouteName{Provider: rt.ProviderName, UpstreamModel: rt.UpstreamModel}
	}
	return ch
}

// generation is the call's record as it stands: what settle charges and records.
func (c *call) generation() *store.Generation {
	lines, total := c.cost()
	if c.route != nil {
		c.Provider, c.UpstreamModel = c.route.ProviderName, c.route.UpstreamModel
	}
	gen := c.Record(c.g.Now(), lines, total)
	t := c.tokens()
	gen.InputTokens, gen.CacheReadTokens, gen.CacheWriteTokens = t.Input, t.CacheRead, t.CacheWrite
	gen.OutputTokens, gen.ReasoningTokens = t.Output, t.Reasoning
	if c.Metered {
		gen.RecordDimensions(&c.Usage)
	}
	return gen
}

// settle charges the wallet and records the generation, exactly once, even when the client
// has gone: the hold settles on a context of its own. Its callers are the outcomes'
// (settleAnswer, chargeDelivered); settle itself decides nothing about delivery.
func (c *call) settle(ctx context.Context) error {
	if c.settled {
		return nil
	}
	c.settled = true
	c.estimateUsage()
	if c.failedOver && c.ErrorMessage == "" {
		c.ErrorMessage = c.failoverNote()
	}
	gen := c.generation()
	lines, total := gen.CostLines, gen.CostNanos
	// The settlement outlives the client: the hold settles without the request's
	// cancellation, until SettleTimeout.
	if c.Hold == nil {
		c.Hold = c.g.ledger.Unheld()
	}
	stored, err := c.Hold.Settle(ctx, gen)
	c.g.Metrics.settled(c, lines, err)
	if err == nil {
		c.costNanos = total
	}
	if c.g.Observer != nil {
		c.g.Observer.Finished(c.reqCtx, Outcome{c})
	}
	if err != nil {
		c.g.Logger.Error("settling a generation failed", zap.String("generation_id", c.GenerationID), zapErr(err))
		return err
	}
	if stored.UnbilledNanos > 0 {
		c.g.Logger.Warn("usage exceeded the wallet balance", zap.String("generation_id", c.GenerationID), zap.Int64("unbilled_nanos", stored.UnbilledNanos))
	}
	if c.overHold > 0 {
		c.g.Logger.Warn("usage exceeded what the request held; charged what it held", zap.String("generation_id", c.GenerationID),
			zap.Int64("held_nanos", c.Most), zap.Int64("unbilled_nanos", c.overHold))
	}
	c.g.Metrics.unbilled(c, stored.UnbilledNanos+c.overHold)
	return nil
}

// The rule for charge and delivery, one function an outcome:
//
//   - settleAnswer: an answer not yet delivered (a JSON body, a transcript) is delivered
//     only once its charge is recorded; otherwise it is withheld (503 store_unavailable)
//     and the hold released, as the client never gets what the upstream made.
//   - chargeDelivered: an answer the client has, whole or in part (a stream at its end, a
//     binary answer's last bytes, a stream that broke), is billed whatever the store says
//     now: a settlement the store cannot take is journaled and applied later.
//   - settleOutcome: chargeDelivered for an outcome that has nothing more to tell the
//     client (an error answered, a client gone); deferred by every family as the one
//     settlement of whatever outcome did not settle itself.

// settleAnswer settles an answer about to be delivered; a non-nil result is the answer to
// give instead.
func (c *call) settleAnswer(ctx context.Context) *APIError {
	err := c.settle(ctx)
	if err == nil {
		return nil
	}
	if rerr := c.Hold.Release(ctx); rerr != nil {
		c.g.Logger.Warn("releasing the hold of a withheld answer failed; it is released later or expires",
			zap.String("generation_id", c.GenerationID), zapErr(rerr))
	}
	return notRecorded(c.g.storeUnavailable("recording an answer's charge", err))
}

// chargeDelivered settles a call whose answer the client has. settled reports whether the
// charge was recorded now; kept, whether it is recorded or journaled to be. A charge
// neither recorded nor journaled is logged with its amount: the caller must not let an
// answer look whole then.
func (c *call) chargeDelivered(ctx context.Context) (settled, kept bool) {
	err := c.settle(ctx)
	if err == nil {
		return true, true
	}
	gen := c.generation()
	if jerr := c.Hold.SettleLater(gen); jerr != nil {
		c.g.Logger.Error("journaling a settlement failed; the charge of an answer delivered is not recorded",
			zap.String("generation_id", c.GenerationID), zap.Int64("cost_nanos", gen.CostNanos), zapErr(jerr))
		return false, false
	}
	c.g.Logger.Warn("the settlement of an answer delivered is journaled, to be applied once the store takes it",
		zap.String("generation_id", c.GenerationID), zap.Int64("cost_nanos", gen.CostNanos))
	return false, true
}

// settleOutcome is chargeDelivered for an outcome with nothing more to tell the client.
func (c *call) settleOutcome(ctx context.Context) {
	c.chargeDelivered(ctx)
}

// notRecorded is the answer withheld because its charge could not be recorded, from the
// store's 503 unavailable: an answer delivered is an answer billed, so none is delivered
// unbilled.
func notRecorded(e *APIError) *APIError {
	e.Message = "the gateway could not record this answer's charge, so it was not delivered; retry the request"
	return e
}

// notRecordedStream is the in-band error that ends a stream whose charge could not be
// recorded at its end (it is journaled and applied later).
var notRecordedStream = &providers.UpstreamError{Provider: "gateway", Category: providers.CategoryServerError,
	Message: "the gateway could not record this answer's charge, so its end was not delivered"}

// costNumber is the exact decimal dollar amount as a JSON number.
type costNumber int64

func (n costNumber) MarshalJSON() ([]byte, error) { return []byte(pricing.FormatUSD(int64(n))), nil }

// failed notes that the request ended in an error the client received.
func (c *call) failed(e *APIError) *APIError {
	c.Status, c.ErrorCode, c.ErrorMessage, c.ErrorOrigin = e.Status, e.Code, e.Message, e.origin()
	return e
}

// upstreamFailure answers a failure that no other route can fix (the caller's request was
// refused by the upstream as invalid).
func (c *call) upstreamFailure(ue *providers.UpstreamError) *APIError {
	e := upstreamAPIError(ue)
	e.Extra = c.diagnostics()
	return c.failed(e)
}

// upstreamAPIError is the answer to an upstream's refusal: its status when it is the
// caller's (4xx), else 502; its code when it tells the caller what to change.
func upstreamAPIError(ue *providers.UpstreamError) *APIError {
	status := ue.Status
	switch {
	case status == 0 && ue.Category == providers.CategoryInvalidRequest:
		// Refused by the adapter before any call: the request cannot be expressed upstream.
		status = http.StatusBadRequest
	case status < 400 || status >= 500:
		status = http.StatusBadGateway
	}
	msg := ue.Message
	if msg == "" {
		msg = "the provider refused the request"
	}
	// The upstream's own code (content_policy_violation, context_length_exceeded...) tells the
	// caller what to change.
	code := CodeUpstream
	if ue.Code != "" && ue.Category == providers.CategoryInvalidRequest {
		code = ue.Code
	}
	e := newError(status, code, fmt.Sprintf("provider %s: %s", ue.Provider, msg))
	e.Origin = "upstream"
	e.Param = ue.Param
	return e
}

// allFailed answers when every route failed, with the spec's diagnostics.
func (c *call) allFailed() *APIError {
	if len(c.Attempts) == 0 {
		e := newError(http.StatusServiceUnavailable, CodeUpstream, fmt.Sprintf("every route of model %q is unavailable right now (circuit open after repeated failures); retry shortly", c.model.Name))
		e.Origin, e.Type = "gateway", "system"
		e.Extra = c.diagnostics()
		e.Extra["retry_after_seconds"] = int64(1)
		return c.failed(e)
	}
	status, code := http.StatusBadGateway, CodeUpstream
	allLimited := len(c.Failures) > 0
	for _, f := range c.Failures {
		if f.Category != string(providers.CategoryRateLimited) {
			allLimited = false
		}
	}
	var retryAfter time.Duration
	if allLimited {
		status, code = http.StatusTooManyRequests, CodeRateLimited
		for _, f := range c.Failures {
			retryAfter = max(retryAfter, f.RetryAfter)
		}
	}
	names := make([]string, 0, len(c.Failures))
	for _, f := range c.Failures {
		names = append(names, f.Provider)
	}
	e := newError(status, code, fmt.Sprintf("all %d provider attempt(s) for model %q failed (%s)", len(c.Attempts), c.model.Name, strings.Join(names, ", ")))
	e.Origin = "upstream"
	e.Type = "system"
	e.Extra = c.diagnostics()
	if retryAfter > 0 {
		e.Extra["retry_after_seconds"] = int64((retryAfter + time.Second - 1) / time.Second)
	}
	return c.failed(e)
}

// diagnostics builds the spec's failure fields from the attempts made.
func (c *call) diagnostics() map[string]any {
	providersFailed := make([]string, 0, len(c.Failures))
	statuses := make([]int, 0, len(c.Failures))
	sample := make([]map[string]any, 0, len(c.Failures))
	for _, f := range c.Failures {
		providersFailed = append(providersFailed, f.Provider)
		statuses = append(statuses, f.Status)
		var status any
		if f.Status != 0 {
			status = f.Status
		}
		sample = append(sample, map[string]any{
			"provider": f.Provider, "type": f.Category,
			"upstream_error_code": nullable(f.Code), "upstream_error_message": nullable(f.Message),
			"upstream_error_description": nil, "upstream_error_param": nullable(f.Param),
			"upstream_payload_preview": nullable(f.PayloadPreview), "status": status, "retryable": f.Retryable,
		})
	}
	d := map[string]any{
		"attempt_count":    len(c.Attempts),
		"failed_providers": providersFailed,
		"failed_statuses":  statuses,
		"failure_sample":   sample,
	}
	if n := len(c.Failures); n > 0 {
		last := c.Failures[n-1]
		d["upstream_error"] = map[string]any{
			"code": nullable(last.Code), "message": nullable(last.Message),
			"description": nil, "param": nullable(last.Param),
		}
		// The spec's categories describe provider-side failures; a request the provider refused
		// as invalid is the caller's to fix and carries no category.
		if last.Category != string(providers.CategoryInvalidRequest) {
			d["provider_failure_diagnostics"] = map[string]any{
				"category": last.Category, "hint": categoryHints[providers.Category(last.Category)], "provider": last.Provider,
			}
		}
	}
	maps.Copy(d, routingDiagnostics(c.model, c.skipped))
	return d
}

func upstreamMessage(ue *providers.UpstreamError) string {
	if ue.Message != "" {
		return ue.Message
	}
	if ue.Err != nil {
		return ue.Err.Error()
	}
	if ue.Status != 0 {
		return "status " + strconv.Itoa(ue.Status)
	}
	return ""
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}
