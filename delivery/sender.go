package delivery

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/internal/background"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// DefaultPace is the Sender's: a claimed delivery is held longer than a call's timeout, so
// that a sender records its attempt while it still holds the claim, and at most two
// deliveries to one endpoint are in flight at once, across every sender, so that one slow
// endpoint never takes every sender.
var DefaultPace = Pace{Lease: 2 * time.Minute, Idle: time.Second, Concurrency: 8, GroupCap: 2}

// DefaultSchedule is the wait before each retry of a delivery that failed in a way worth
// retrying (DESIGN.md): the first attempt is at once, then +1 m, +5 m, +30 m and +2 h,
// five attempts in all.
var DefaultSchedule = []time.Duration{time.Minute, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour}

// Defaults of the Sender's settings.
const (
	// DefaultDisableAfter is how many deliveries in a row that failed for good disable an
	// endpoint: with the default schedule, about a day of an endpoint failing every event.
	DefaultDisableAfter = 5
	// DefaultMaxRetryAfter bounds how long a receiver's Retry-After may put a retry off: no
	// longer than the schedule's longest wait, so that a receiver cannot park an event for days.
	DefaultMaxRetryAfter = 2 * time.Hour
	// DefaultJitter is the part of a retry's wait that is random (up to a fifth either way),
	// so that the deliveries that failed together, when an endpoint went down, do not all
	// come back together.
	DefaultJitter = 0.2
)

// Reasons recorded when an endpoint is disabled.
const (
	ReasonConsecutiveFailures = "consecutive_failures"
	ReasonGone                = "endpoint_gone"
)

// Sender delivers the events of the outbox (store.DeliveryQueue) to the webhook endpoints
// they name: it claims due deliveries, signs each with the endpoint's secrets, posts it
// through the guarded Client and records the attempt with its retry, at least once and
// across restarts (a sender that dies leaves its claims to run out, and another takes them).
type Sender struct {
	Store  store.Store
	Sealer *Sealer
	Client *Client
	Logger *zap.Logger
	// Owner names this process's claims (its instance id).
	Owner string
	Now   func() time.Time

	// Schedule is the wait before each retry; DefaultSchedule when nil. A delivery gets
	// len(Schedule)+1 attempts.
	Schedule []time.Duration
	// Jitter is the random part of a retry's wait, as a fraction (0.2: up to 20% either
	// way); negative for none, DefaultJitter when zero.
	Jitter float64
	// MaxRetryAfter bounds a receiver's Retry-After; DefaultMaxRetryAfter when zero.
	MaxRetryAfter time.Duration
	// DisableAfter is how many deliveries to an endpoint failing in a row disable it;
	// DefaultDisableAfter when zero.
	DisableAfter int
	// Pace paces the claims; zero fields take DefaultPace's.
	Pace

	// Disabled, when set, is told of an endpoint the gateway disabled (its deliveries
	// failed DisableAfter times in a row, or it answered 410), with the endpoint as
	// disabled: the workspace is notified (webhook_endpoint.disabled). It must not block.
	Disabled func(ep store.WebhookEndpoint)
}

func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

func (s *Sender) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Sender) schedule() []time.Duration {
	if s.Schedule == nil {
		return DefaultSchedule
	}
	return s.Schedule
}

// DefaultMaxAttempts is how many attempts a delivery gets with DefaultSchedule.
func DefaultMaxAttempts() int { return len(DefaultSchedule) + 1 }

// MaxAttempts is how many attempts a delivery gets before it is given up.
func (s *Sender) MaxAttempts() int { return len(s.schedule()) + 1 }

// Run sends due deliveries until ctx ends. Its error (the store cannot be reached to
// claim) is for the worker runtime, which runs it again after a backoff.
func (s *Sender) Run(ctx context.Context) error {
	return s.Pace.Drain(ctx, s.Store, store.DeliveryQueue, s.Owner, DefaultPace, s.Logger, s.Send)
}

// outcome is how one attempt ended, as Send decides what follows it.
type outcome struct {
	attempt store.DeliveryAttempt
	// retry is set when the failure is worth another attempt; retryAfter is the receiver's
	// Retry-After, zero when it gave none.
	retry      bool
	retryAfter time.Duration
	// gone is set when the receiver said the endpoint is gone for good (410).
	gone bool
}

// Send makes one attempt at a claimed delivery and records it with what follows:
// delivered, retried later, or given up.
func (s *Sender) Send(ctx context.Context, it store.ClaimedItem) {
	log := s.Logger.With(zap.String("delivery_id", it.ID), zap.Int("attempt", it.Attempt))
	d, err := store.DeliveryOf(it)
	if err != nil {
		log.Error("a queued delivery carries no delivery; dropped", zap.Error(err))
		s.complete(ctx, log, it.Claim)
		return
	}
	log = log.With(zap.String("target", d.Target), zap.String("event_type", d.EventType))
	var url string
	var signer *Signer
	var ok bool
	if IsInlineTarget(d.Target) {
		url, signer, ok = s.inlineTarget(ctx, log, it, d)
	} else {
		url, signer, ok = s.endpointTarget(ctx, log, it, d)
	}
	if !ok {
		return
	}
	o := s.attempt(ctx, d, url, signer)
	if ctx.Err() != nil && !o.attempt.Delivered {
		// Shutting down mid-call: the claim's lease runs out and another sender tries again.
		return
	}
	s.record(ctx, log, it, d, o)
}

// endpointTarget returns the URL and signer of the webhook endpoint delivery d goes to;
// false when there is nothing to send, the delivery then ended or put off.
func (s *Sender) endpointTarget(ctx context.Context, log *zap.Logger, it store.ClaimedItem, d store.Delivery) (string, *Signer, bool) {
	ep, err := s.Store.GetWebhookEndpoint(ctx, d.WorkspaceID, d.Target)
	switch {
	case errors.Is(err, store.ErrNotFound):
		s.giveUp(ctx, log, it, "webhook endpoint "+d.Target+" no longer exists")
		return "", nil, false
	case err != nil:
		s.retryClaim(ctx, log, it, fmt.Errorf("reading the webhook endpoint: %w", err))
		return "", nil, false
	case ep.Status == store.WebhookDisabled:
		reason := "webhook endpoint " + ep.ID + " is disabled"
		if ep.DisabledReason != "" {
			reason += " (" + ep.DisabledReason + ")"
		}
		s.giveUp(ctx, log, it, reason)
		return "", nil, false
	case len(ep.Events) > 0 && !slices.Contains(ep.Events, "*") && !slices.Contains(ep.Events, d.EventType):
		// The endpoint is not subscribed to this type: nothing to send, and nothing failed.
		log.Debug("webhook endpoint not subscribed to the event's type; skipped")
		if err := s.Store.SkipDelivery(context.WithoutCancel(ctx), it.Claim); err != nil && !errors.Is(err, store.ErrClaimLost) {
			log.Error("skipping a delivery failed; its lease running out tries again", zap.Error(err))
		}
		return "", nil, false
	}
	signer, err := s.signer(ep)
	if err != nil {
		// The operator's key changed, or the row was altered: no attempt could sign, so
		// retrying would only delay the failure the endpoint's owner must see.
		s.giveUp(ctx, log, it, err.Error())
		return "", nil, false
	}
	return ep.URL, signer, true
}

// inlineTarget returns the URL and signer of the job's own receiver that delivery d goes
// to, read from the job's webhook configuration; false when there is nothing to send, the
// delivery then ended or put off.
func (s *Sender) inlineTarget(ctx context.Context, log *zap.Logger, it store.ClaimedItem, d store.Delivery) (string, *Signer, bool) {
	j, err := s.Store.GetJob(ctx, d.WorkspaceID, d.JobID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		s.giveUp(ctx, log, it, "job "+d.JobID+" no longer exists")
		return "", nil, false
	case err != nil:
		s.retryClaim(ctx, log, it, fmt.Errorf("reading the job: %w", err))
		return "", nil, false
	}
	w, ok, err := ReadJobWebhook(j.Webhook)
	if err != nil || !ok || w.Target != d.Target || w.URL == "" {
		s.giveUp(ctx, log, it, "job "+d.JobID+" no longer names this webhook receiver")
		return "", nil, false
	}
	if s.Sealer == nil {
		s.giveUp(ctx, log, it, "webhook signing secrets cannot be opened: no secret key is configured")
		return "", nil, false
	}
	secret, err := s.Sealer.Open(w.Secret, []byte(w.Target))
	var signer *Signer
	if err == nil {
		signer, err = NewSigner(string(secret))
	}
	if err != nil {
		s.giveUp(ctx, log, it, fmt.Sprintf("opening the signing secret of job %s's webhook: %v", d.JobID, err))
		return "", nil, false
	}
	return w.URL, signer, true
}

// signer opens the endpoint's secrets and returns the signer of those that sign now.
func (s *Sender) signer(ep store.WebhookEndpoint) (*Signer, error) {
	if s.Sealer == nil {
		return nil, errors.New("webhook signing secrets cannot be opened: no secret key is configured")
	}
	current, err := s.Sealer.Open(ep.Secret, []byte(ep.ID))
	if err != nil {
		return nil, fmt.Errorf("opening the signing secret of webhook endpoint %s: %w", ep.ID, err)
	}
	var previous []byte
	if len(ep.PreviousSecret) > 0 {
		if previous, err = s.Sealer.Open(ep.PreviousSecret, []byte(ep.ID)); err != nil {
			return nil, fmt.Errorf("opening the previous signing secret of webhook endpoint %s: %w", ep.ID, err)
		}
	}
	return NewSigner(SigningSecrets(string(current), string(previous), ep.PreviousUntil, s.now())...)
}

// attempt posts the delivery once and classifies what came of it. A panic on the way (in
// the client, in a transport) is a failed attempt like a network error.
func (s *Sender) attempt(ctx context.Context, d store.Delivery, url string, signer *Signer) outcome {
	start := s.now()
	var o outcome
	o.attempt.At = start
	var resp Response
	var perr error
	if p := background.Call("posting delivery "+d.ID, func() {
		h := http.Header{"Content-Type": {"application/json"}, "User-Agent": {"modelgateway-webhooks/1"}}
		if perr = signer.SetHeaders(h, d.ID, start, d.Payload); perr != nil {
			return
		}
		resp, perr = s.Client.Post(ctx, url, h, d.Payload)
	}); p != nil {
		s.Logger.Error("posting a delivery panicked; retried", zap.String("delivery_id", d.ID), zap.Error(p))
		perr = p
	}
	o.attempt.Duration = max(s.now().Sub(start), 0)
	o.attempt.StatusCode = resp.StatusCode
	o.attempt.ResponsePreview = string(resp.Preview)
	switch {
	case perr != nil && resp.StatusCode == 0:
		o.attempt.Error = perr.Error()
		// A refused address or scheme stays refused; anything else (network, timeout,
		// panic) may pass next time.
		o.retry = !errors.Is(perr, ErrForbiddenAddress) && !errors.Is(perr, ErrSchemeNotAllowed)
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		o.attempt.Delivered = true
	default:
		o.attempt.Error = "HTTP " + strconv.Itoa(resp.StatusCode)
		if perr != nil {
			o.attempt.Error += ": " + perr.Error()
		}
		switch code := resp.StatusCode; {
		case code == http.StatusTooManyRequests || code >= 500:
			o.retry = true
			o.retryAfter = retryAfter(resp.Header, s.now())
		case code == http.StatusGone:
			o.gone = true
		}
	}
	return o
}

// retryAfter reads a Retry-After header, in seconds or as an HTTP date; zero when absent
// or unreadable.
func retryAfter(h http.Header, now time.Time) time.Duration {
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil {
		return max(time.Duration(secs)*time.Second, 0)
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

// next is when to try again after attempt n failed with o, or zero to give up.
func (s *Sender) next(n int, o outcome) time.Time {
	sched := s.schedule()
	if !o.retry || n > len(sched) {
		return time.Time{}
	}
	wait := Jitter(sched[n-1], s.Jitter)
	if o.retryAfter > 0 {
		// The receiver knows best when it can take the event again, within bounds.
		wait = min(o.retryAfter, orDefault(s.MaxRetryAfter, DefaultMaxRetryAfter))
	}
	return s.now().Add(wait)
}

// Jitter spreads a retry's wait d by fraction of it either way, at random, so that the
// retries of many deliveries that failed together do not arrive together: DefaultJitter
// when fraction is zero, none when it is negative.
func Jitter(d time.Duration, fraction float64) time.Duration {
	if fraction == 0 {
		fraction = DefaultJitter
	}
	span := time.Duration(float64(d) * fraction)
	if fraction < 0 || span <= 0 {
		return d
	}
	return d - span + rand.N(2*span+1)
}

// record writes the attempt with what follows it and, when the delivery ended, counts its
// outcome on the endpoint.
func (s *Sender) record(ctx context.Context, log *zap.Logger, it store.ClaimedItem, d store.Delivery, o outcome) {
	next := s.next(it.Attempt, o)
	ctx = context.WithoutCancel(ctx)
	if err := s.Store.RecordAttempt(ctx, it.Claim, o.attempt, next); err != nil {
		if errors.Is(err, store.ErrClaimLost) {
			log.Info("a delivery's attempt lost its claim; the new claim sends it", zap.Error(err))
			return
		}
		// The receiver may have the event already: the lease running out sends it again,
		// and the event's id lets the receiver tell.
		log.Error("recording a delivery's attempt failed; its lease running out sends it again", zap.Error(err))
		return
	}
	if !next.IsZero() {
		log.Info("a delivery failed; retried later", zap.String("error", o.attempt.Error), zap.Time("next_at", next))
		return
	}
	if !o.attempt.Delivered {
		log.Warn("a delivery failed for good", zap.String("error", o.attempt.Error))
	}
	if IsInlineTarget(d.Target) {
		// A job's own URL is no endpoint: there is no count of failures to keep.
		return
	}
	outcome := store.WebhookOutcome{Delivered: o.attempt.Delivered,
		DisableAfter: orDefault(s.DisableAfter, DefaultDisableAfter), Reason: ReasonConsecutiveFailures}
	if o.gone {
		// 410: the receiver says the endpoint is gone (Standard Webhooks), so stop at once.
		outcome.DisableAfter, outcome.Reason = 1, ReasonGone
	}
	ep, err := s.Store.RecordWebhookOutcome(ctx, d.WorkspaceID, d.Target, outcome)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		log.Error("counting a delivery's outcome on its endpoint failed", zap.Error(err))
	case !o.attempt.Delivered && ep.Status == store.WebhookDisabled:
		// Send found it active: this outcome disabled it (or a user did meanwhile, which the
		// reason tells).
		log.Warn("webhook endpoint disabled", zap.String("reason", ep.DisabledReason),
			zap.Int("consecutive_failures", ep.ConsecutiveFailures))
		if s.Disabled != nil && (ep.DisabledReason == ReasonConsecutiveFailures || ep.DisabledReason == ReasonGone) {
			s.Disabled(ep)
		}
	}
}

// giveUp ends a delivery that cannot be made (its endpoint is gone or disabled, its secret
// cannot be opened) as failed, with reason as its attempt's error.
func (s *Sender) giveUp(ctx context.Context, log *zap.Logger, it store.ClaimedItem, reason string) {
	log.Warn("a delivery cannot be made; given up", zap.String("reason", reason))
	a := store.DeliveryAttempt{Error: reason, At: s.now()}
	if err := s.Store.RecordAttempt(context.WithoutCancel(ctx), it.Claim, a, time.Time{}); err != nil && !errors.Is(err, store.ErrClaimLost) {
		log.Error("recording a delivery given up failed; its lease running out tries again", zap.Error(err))
	}
}

// retryClaim puts a delivery off when the sender could not attempt it (the store did not
// answer): no attempt is recorded, but the claim's attempt rises.
func (s *Sender) retryClaim(ctx context.Context, log *zap.Logger, it store.ClaimedItem, cause error) {
	log.Warn("a delivery could not be attempted; retried later", zap.Error(cause))
	wait := background.Backoff{Min: time.Second, Max: time.Minute}.Delay(it.Attempt - 1)
	if err := s.Store.Retry(context.WithoutCancel(ctx), it.Claim, s.now().Add(wait), cause.Error()); err != nil {
		log.Error("rescheduling a delivery failed; its lease running out makes it due again", zap.Error(err))
	}
}

func (s *Sender) complete(ctx context.Context, log *zap.Logger, c store.Claim) {
	if err := s.Store.Complete(context.WithoutCancel(ctx), c); err != nil && !errors.Is(err, store.ErrClaimLost) {
		log.Error("completing a delivery failed", zap.Error(err))
	}
}
