package notify

import (
	"context"
	"errors"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/delivery"
	"github.com/modelgateway/caddy-modelgateway/internal/background"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// DefaultPace is the Sender's pace: a webhook event's, with fewer sends at once. A
// notification is retried as a webhook event is (delivery.DefaultSchedule: at once, then
// +1 m, +5 m, +30 m, +2 h).
var DefaultPace = delivery.Pace{Lease: 2 * time.Minute, Idle: time.Second, Concurrency: 4, GroupCap: 2}

// RetryPolicy is implemented by a kind whose statuses are not HTTP's (an SMTP reply code):
// it tells whether a refusal with status may pass if tried again.
type RetryPolicy interface {
	Retryable(status int) bool
}

// Sender delivers the items of Queue: it claims due ones, reads the destination (a deleted
// or disabled one is not sent to), delivers through its kind and, when the attempt
// failed in a way worth retrying, retries the claim later; at the end it records the
// outcome on the destination. Delivery is at least once: a sender that dies leaves its
// claim to run out, and another sends again (Notification.ID is the same, for a receiver
// to deduplicate).
type Sender struct {
	Store  Store
	Sealer *delivery.Sealer
	Client *delivery.Client
	// Kinds returns the kinds of the newest configuration, by name.
	Kinds  func() map[string]Kind
	Logger *zap.Logger
	// Owner names this process's claims (its instance id).
	Owner string
	Now   func() time.Time

	// Schedule is the wait before each retry; delivery.DefaultSchedule when nil.
	Schedule []time.Duration
	// Jitter is the random part of a retry's wait, as a fraction; negative for none,
	// delivery.DefaultJitter when zero.
	Jitter float64
	// Pace paces the claims; zero fields take DefaultPace's.
	delivery.Pace
}

func (s *Sender) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Sender) schedule() []time.Duration {
	if s.Schedule == nil {
		return delivery.DefaultSchedule
	}
	return s.Schedule
}

// Run sends due notifications until ctx ends. Its error (the store cannot be reached to
// claim) is for the worker runtime, which runs it again after a backoff.
func (s *Sender) Run(ctx context.Context) error {
	return s.Pace.Drain(ctx, s.Store, Queue, s.Owner, DefaultPace, s.Logger, s.Send)
}

// Send makes one attempt at a claimed notification and records what follows it.
func (s *Sender) Send(ctx context.Context, it store.ClaimedItem) {
	log := s.Logger.With(zap.String("notification_item", it.ID), zap.Int("attempt", it.Attempt))
	x, err := ItemOf(it)
	if err != nil {
		log.Error("a queued notification carries none; dropped", zap.Error(err))
		s.complete(ctx, log, it.Claim)
		return
	}
	log = log.With(zap.String("notification_id", x.Notification.ID), zap.String("event", x.Notification.Event),
		zap.String("destination_id", x.DestinationID))
	d, err := s.Store.GetNotificationDestination(ctx, x.WorkspaceID, x.DestinationID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		// Deleted since it was queued: a deleted destination is never sent to.
		log.Info("the notification's destination was deleted; not sent")
		s.complete(ctx, log, it.Claim)
		return
	case err != nil:
		s.retry(ctx, log, it, s.now().Add(background.Backoff{Min: time.Second, Max: time.Minute}.Delay(it.Attempt-1)),
			"reading the destination: "+err.Error())
		return
	case d.Status != store.DestinationActive:
		log.Info("the notification's destination is disabled; not sent")
		s.complete(ctx, log, it.Claim)
		return
	}
	var kinds map[string]Kind
	if s.Kinds != nil {
		kinds = s.Kinds()
	}
	start := s.now()
	status, err := Deliver(ctx, kinds, s.Sealer, s.Client, d, x.Notification)
	if err != nil && ctx.Err() != nil {
		// Shutting down mid-call: the claim's lease runs out and another sender tries again.
		return
	}
	log = log.With(zap.Int("status", status), zap.Duration("duration", s.now().Sub(start)))
	if err == nil {
		log.Debug("notification delivered")
		s.finish(ctx, log, it, x, store.NotificationOutcome{Delivered: true, Status: status})
		return
	}
	reason := SafeError(err)
	if s.retryable(kinds[d.Kind], err) && it.Attempt <= len(s.schedule()) {
		log.Info("a notification failed; retried later", zap.String("error", reason))
		s.retry(ctx, log, it, s.now().Add(delivery.Jitter(s.schedule()[it.Attempt-1], s.Jitter)), reason)
		return
	}
	log.Warn("a notification failed for good", zap.String("error", reason))
	s.finish(ctx, log, it, x, store.NotificationOutcome{Status: status})
}

// retryable tells whether a failed delivery may pass if tried again: a service's refusal
// as its kind judges it (HTTP: 429 and 5xx; an email's SMTP reply: 4xx, transient), an address or scheme the guard refused never,
// a target that cannot be opened or a kind that is not configured (or set up) never, anything else
// (network, timeout, panic) always.
func (s *Sender) retryable(kind Kind, err error) bool {
	var se *SendError
	var te *TargetError
	var uk *UnknownKindError
	switch {
	case errors.As(err, &se):
		if p, ok := kind.(RetryPolicy); ok {
			return p.Retryable(se.Status)
		}
		return se.Status == http.StatusTooManyRequests || se.Status >= 500
	case errors.As(err, &te), errors.As(err, &uk), errors.Is(err, ErrKindNotConfigured),
		errors.Is(err, delivery.ErrForbiddenAddress), errors.Is(err, delivery.ErrSchemeNotAllowed):
		return false
	case s.Sealer == nil:
		return false
	}
	var oe *openError
	return !errors.As(err, &oe)
}

// finish ends the item and records its outcome on the destination.
func (s *Sender) finish(ctx context.Context, log *zap.Logger, it store.ClaimedItem, x Item, o store.NotificationOutcome) {
	ctx = context.WithoutCancel(ctx)
	o.At = s.now()
	if err := s.Store.Complete(ctx, it.Claim); err != nil {
		if errors.Is(err, store.ErrClaimLost) {
			log.Info("a notification's attempt lost its claim; the new claim sends it", zap.Error(err))
		} else {
			log.Error("completing a notification failed; its lease running out sends it again", zap.Error(err))
		}
		return
	}
	if err := s.Store.RecordNotificationOutcome(ctx, x.WorkspaceID, x.DestinationID, o); err != nil && !errors.Is(err, store.ErrNotFound) {
		log.Error("recording a notification's outcome on its destination failed", zap.Error(err))
	}
}

func (s *Sender) retry(ctx context.Context, log *zap.Logger, it store.ClaimedItem, at time.Time, reason string) {
	if err := s.Store.Retry(context.WithoutCancel(ctx), it.Claim, at, reason); err != nil && !errors.Is(err, store.ErrClaimLost) {
		log.Error("rescheduling a notification failed; its lease running out makes it due again", zap.Error(err))
	}
}

func (s *Sender) complete(ctx context.Context, log *zap.Logger, c store.Claim) {
	if err := s.Store.Complete(context.WithoutCancel(ctx), c); err != nil && !errors.Is(err, store.ErrClaimLost) {
		log.Error("completing a notification failed", zap.Error(err))
	}
}
