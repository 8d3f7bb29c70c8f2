package handlers

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// Policy is how persistently the gateway works a route. Zero fields take the defaults below;
// negative numbers and durations turn a mechanism off.
type Policy struct {
	// Retries is how many more times a route is tried after a 429, a 5xx or a connection
	// failure before anything reached the client. A timeout is not retried: a route that
	// kept the client waiting that long most likely would again, so the next one is tried.
	Retries int
	// BackoffBase and BackoffMax bound the exponential backoff (with full jitter) between tries.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// RetryAfterCap is the longest Retry-After honoured; a longer one moves on to the next route.
	RetryAfterCap time.Duration
	// HeaderTimeout bounds the wait for a streamed answer's response headers. A route that
	// stays silent that long is not retried: the next route is tried at once. (Non-streamed
	// answers send their headers only when complete; the provider's total timeout bounds them.)
	HeaderTimeout time.Duration
	// FirstTokenTimeout bounds the wait from the headers to the first piece of a streamed
	// answer; like every timeout, it moves on to the next route at once.
	FirstTokenTimeout time.Duration
	// BreakerThreshold consecutive failures open the route's circuit for BreakerCooldown;
	// then one probe is let through, and a success closes it.
	BreakerThreshold int
	BreakerCooldown  time.Duration
}

// Defaults of Policy.
const (
	DefaultRetries           = 2
	DefaultBackoffBase       = 200 * time.Millisecond
	DefaultBackoffMax        = 5 * time.Second
	DefaultRetryAfterCap     = 20 * time.Second
	DefaultHeaderTimeout     = 30 * time.Second
	DefaultFirstTokenTimeout = 60 * time.Second
	DefaultBreakerThreshold  = 5
	DefaultBreakerCooldown   = 15 * time.Second
)

// WithDefaults fills unset fields.
func (p Policy) WithDefaults() Policy {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if p.Retries == 0 {
		p.Retries = DefaultRetries
	}
	if p.BreakerThreshold == 0 {
		p.BreakerThreshold = DefaultBreakerThreshold
	}
	def(&p.BackoffBase, DefaultBackoffBase)
	def(&p.BackoffMax, DefaultBackoffMax)
	def(&p.RetryAfterCap, DefaultRetryAfterCap)
	def(&p.HeaderTimeout, DefaultHeaderTimeout)
	def(&p.FirstTokenTimeout, DefaultFirstTokenTimeout)
	def(&p.BreakerCooldown, DefaultBreakerCooldown)
	return p
}

// backoff is the wait before try number n (from 1): full jitter over an exponential bound,
// or the upstream's Retry-After when it asked for longer.
func (p Policy) backoff(n int, retryAfter time.Duration) time.Duration {
	bound := p.BackoffBase << min(n-1, 20)
	if bound <= 0 || bound > p.BackoffMax {
		bound = p.BackoffMax
	}
	d := time.Duration(rand.Int64N(int64(bound) + 1))
	if retryAfter > d {
		d = retryAfter
	}
	return d
}

// breaker is a route's circuit breaker: closed, open (skipped) until a cooldown ends, then
// half-open with one probe in flight.
type breaker struct {
	mu        sync.Mutex
	failures  int
	openUntil time.Time
	probing   bool
	// gauge, when set, counts the circuit while it is open (reported): metrics.go.
	gauge    gauge
	reported bool
}

// allow tells whether the route may be tried now; a half-open circuit lets one probe through.
func (b *breaker) allow(now time.Time, p Policy) bool {
	if p.BreakerThreshold < 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failures < p.BreakerThreshold {
		return true
	}
	if now.Before(b.openUntil) || b.probing {
		return false
	}
	b.probing = true
	return true
}

// record notes an attempt's outcome.
func (b *breaker) record(now time.Time, p Policy, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.report(p)
	b.probing = false
	if ok {
		b.failures = 0
		return
	}
	b.failures++
	if b.failures >= p.BreakerThreshold {
		b.openUntil = now.Add(p.BreakerCooldown)
	}
}

// fail notes a failed attempt: a fault of the route counts toward opening its circuit;
// any other failure (the request's own, the gateway's) says nothing about the route, and
// only ends a probe, so that the next request probes again.
func (b *breaker) fail(now time.Time, p Policy, err error) {
	if ue, ok := providers.AsUpstreamError(err); ok && routeFault(ue) {
		b.record(now, p, false)
		return
	}
	b.release()
}

// release ends a probe without a verdict.
func (b *breaker) release() {
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

// routeFault tells whether a failure is the route's own, one every request on it would
// meet: no answer (a connection error, a timeout), an answer the gateway could not use, a
// 5xx, or a 4xx that speaks of the route and not of the request: its credentials or account
// (401, 402, 403), its capacity (429: a circuit opened by one tenant's flood spares the
// upstream and sends everyone to the fallbacks, as a rate limit asks) or an upstream that
// timed out waiting for the gateway (408; a client too slow to send its body is cut by the
// gateway before any call). Every other 4xx, 404 and 409 included, answers the request: a
// missing previous_response_id or file, a conflict with the caller's own state. Counting
// them would let one tenant's bad input open a circuit for everyone.
func routeFault(ue *providers.UpstreamError) bool {
	switch {
	case ue.Status < 400:
		return ue.Category != providers.CategoryInvalidRequest
	case ue.Status >= 500:
		return true
	}
	switch ue.Status {
	case http.StatusUnauthorized, http.StatusPaymentRequired, http.StatusForbidden, http.StatusRequestTimeout, http.StatusTooManyRequests:
		return true
	}
	return false
}

// Causes of an attempt cancelled by the gateway's own timers.
var (
	errHeaderTimeout     = errors.New("header timeout")
	errFirstTokenTimeout = errors.New("first token timeout")
)

// attemptState is the timers of the attempt in progress.
type attemptState struct {
	cancel     context.CancelCauseFunc
	header     *time.Timer
	firstToken *time.Timer
	// tokenSeen is set once the first piece of the answer arrived.
	tokenSeen bool
	policy    Policy
	stream    bool
}

// headersArrived is called by an attempt once the upstream answered: the header timer stops
// and, for streams, the first-token timer starts.
func (c *call) headersArrived() {
	a := c.att
	if a == nil {
		return
	}
	if a.header != nil {
		a.header.Stop()
	}
	if a.stream && a.policy.FirstTokenTimeout > 0 && a.firstToken == nil {
		a.firstToken = time.AfterFunc(a.policy.FirstTokenTimeout, func() { a.cancel(errFirstTokenTimeout) })
	}
}

// awaitingToken reports whether the attempt's first-token timer still waits, so that a
// relay looks for the first piece of the answer only until it found it.
func (c *call) awaitingToken() bool {
	a := c.att
	return a != nil && a.firstToken != nil && !a.tokenSeen
}

// gotToken is called by an attempt when the first piece of the answer arrived.
func (c *call) gotToken() {
	if a := c.att; a != nil && a.firstToken != nil && !a.tokenSeen {
		a.tokenSeen = true
		a.firstToken.Stop()
	}
}

// gone tells whether the client left.
func (c *call) gone() bool { return c.reqCtx.Err() != nil }

// timeoutCause turns an attempt cancelled by one of the gateway's timers into the upstream
// failure it stands for; nil when the context was not cancelled by a timer.
func (c *call) timeoutCause(ctx context.Context, rt Route) *providers.UpstreamError {
	cause := context.Cause(ctx)
	var msg string
	switch {
	case errors.Is(cause, errHeaderTimeout):
		msg = fmt.Sprintf("the provider sent no response headers within %s", c.att.policy.HeaderTimeout)
	case errors.Is(cause, errFirstTokenTimeout):
		msg = fmt.Sprintf("the provider sent no answer within %s of its headers", c.att.policy.FirstTokenTimeout)
	default:
		return nil
	}
	return &providers.UpstreamError{Provider: rt.ProviderName, Category: providers.CategoryServerError, Retryable: true, Timeout: true, Message: msg, Err: cause}
}

// attempt runs one try of a route under the policy's timers. When a timer applies, fn gets
// a context that ends with the attempt; otherwise it gets ctx itself.
func (c *call) attempt(ctx context.Context, rt Route, stream bool, fn func(ctx context.Context) error) error {
	p := rt.Policy
	if !stream || (p.HeaderTimeout <= 0 && p.FirstTokenTimeout <= 0) {
		// No timer can cut this attempt short: it runs on the caller's context as it is,
		// without a context and timers of its own.
		return fn(ctx)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	a := &attemptState{cancel: cancel, policy: p, stream: stream}
	if stream && p.HeaderTimeout > 0 {
		a.header = time.AfterFunc(p.HeaderTimeout, func() { cancel(errHeaderTimeout) })
	}
	c.att = a
	defer func() {
		if a.header != nil {
			a.header.Stop()
		}
		if a.firstToken != nil {
			a.firstToken.Stop()
		}
		c.att = nil
	}()
	err := fn(ctx)
	if err != nil && !c.gone() {
		if ue := c.timeoutCause(ctx, rt); ue != nil {
			c.replaceLastAttempt(rt, ue)
			return ue
		}
	}
	return err
}

// replaceLastAttempt corrects the record of an attempt whose error was the gateway's own
// timer rather than what the adapter reported.
func (c *call) replaceLastAttempt(rt Route, ue *providers.UpstreamError) {
	if n := len(c.Attempts); n > 0 && c.Attempts[n-1].Provider == rt.ProviderName {
		c.Attempts[n-1].Status, c.Attempts[n-1].Error, c.Attempts[n-1].Category = 0, ue.Error(), string(ue.Category)
		if m := len(c.Failures); m > 0 && c.Failures[m-1].Provider == rt.ProviderName {
			c.Failures[m-1], c.lastFailure = failureOf(rt, ue), ue
			return
		}
		c.addFailure(rt, ue)
		return
	}
	c.recordAttempt(rt, c.g.Now(), ue)
}

// retrySame tells whether the same route may be tried again after this failure.
func retrySame(ue *providers.UpstreamError, p Policy) bool {
	if !ue.Retryable || ue.Timeout || ue.Category == providers.CategoryInvalidRequest {
		return false
	}
	if ue.RetryAfter > p.RetryAfterCap {
		return false
	}
	return ue.Status == 0 || ue.Status == http.StatusTooManyRequests || ue.Status >= 500
}

// sleep waits d unless the client leaves first.
func (c *call) sleep(d time.Duration) bool {
	if d <= 0 {
		return !c.gone()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.reqCtx.Done():
		return false
	case <-t.C:
		return true
	}
}

// requestIn is r to be sent within ctx: r itself when ctx is r's (no copy on the path
// without timers), else a copy of r on ctx.
func requestIn(r *http.Request, ctx context.Context) *http.Request {
	if ctx == r.Context() {
		return r
	}
	return r.WithContext(ctx)
}
