package upstreamhttp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// Attempt is one upstream call's context, bounded by the adapter's timeout.
type Attempt struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// NewAttempt starts an attempt under ctx that times out, with the cause ErrAttemptTimeout,
// after timeout; zero or less means no limit of its own.
func NewAttempt(ctx context.Context, timeout time.Duration) *Attempt {
	at := &Attempt{ctx: ctx, cancel: func() {}}
	if timeout > 0 {
		at.ctx, at.cancel = context.WithTimeoutCause(ctx, timeout, ErrAttemptTimeout)
	}
	return at
}

// Context is the attempt's context, which the request and its body live in.
func (at *Attempt) Context() context.Context { return at.ctx }

// Cancel ends the attempt. It may be called more than once.
func (at *Attempt) Cancel() { at.cancel() }

// TransportError classifies a failure of the attempt at that left no response (or broke a
// body off): the caller's own cancellation of ctx is returned as the context's error, so
// that a client disconnect is not mistaken for an upstream failure; an *UpstreamError is
// returned as it is; anything else is a retryable *UpstreamError with Status 0, a timeout
// when the attempt ran out of time (err then wraps ErrAttemptTimeout) or err is one.
func TransportError(provider string, ctx context.Context, at *Attempt, err error) error {
	if ue, ok := providers.AsUpstreamError(err); ok {
		return ue
	}
	if ctx.Err() != nil {
		return fmt.Errorf("provider %s: %w", provider, ctx.Err())
	}
	timedOut := errors.Is(context.Cause(at.ctx), ErrAttemptTimeout)
	if timedOut && !errors.Is(err, ErrAttemptTimeout) {
		err = fmt.Errorf("%w: %w", ErrAttemptTimeout, err)
	}
	var ne net.Error
	timeout := timedOut || errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
	return &providers.UpstreamError{
		Provider:  provider,
		Category:  providers.CategoryServerError,
		Retryable: true,
		Timeout:   timeout,
		Err:       err,
	}
}

// Failure is a failure that has no status and no response: cause is one of the sentinels
// (ErrMalformedFrame, an adapter's ErrStreamTruncated...), err what it wraps if anything,
// payload the frame that caused it, already redacted, if any.
func Failure(provider string, cause, err error, payload []byte) *providers.UpstreamError {
	e := &providers.UpstreamError{
		Provider:  provider,
		Category:  providers.CategoryServerError,
		Retryable: true,
		Message:   cause.Error(),
		Err:       cause,
	}
	if err != nil {
		e.Err = fmt.Errorf("%w: %w", cause, err)
	}
	if len(payload) > 0 {
		e.Payload = providers.Preview(payload)
	}
	return e
}
