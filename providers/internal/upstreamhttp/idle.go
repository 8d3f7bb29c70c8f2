package upstreamhttp

import (
	"io"
	"sync/atomic"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// IdleTimeoutError is the failure of a stream that stayed silent longer than its idle
// timeout: a retryable timeout wrapping ErrIdleTimeout.
func IdleTimeoutError(provider string) *providers.UpstreamError {
	return &providers.UpstreamError{
		Provider:  provider,
		Category:  providers.CategoryServerError,
		Retryable: true,
		Timeout:   true,
		Message:   ErrIdleTimeout.Error(),
		Err:       ErrIdleTimeout,
	}
}

// IdleBody fails reads once the body has been silent for longer than idle: a timer, reset
// by every read that returns data, closes the body, and the read that notices fails with
// IdleTimeoutError.
type IdleBody struct {
	rc       io.ReadCloser
	provider string
	idle     time.Duration
	timer    *time.Timer
	fired    atomic.Bool
	stopped  atomic.Bool
}

// NewIdleBody watches rc; idle zero or less disables the watchdog.
func NewIdleBody(rc io.ReadCloser, idle time.Duration, provider string) *IdleBody {
	b := &IdleBody{rc: rc, idle: idle, provider: provider}
	if idle > 0 {
		b.timer = time.AfterFunc(idle, func() {
			b.fired.Store(true)
			_ = rc.Close()
		})
	}
	return b
}

func (b *IdleBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if b.fired.Load() {
		return n, IdleTimeoutError(b.provider)
	}
	if n > 0 && b.timer != nil && !b.stopped.Load() {
		b.timer.Reset(b.idle)
	}
	return n, err
}

// Stop disarms the watchdog.
func (b *IdleBody) Stop() {
	b.stopped.Store(true)
	if b.timer != nil {
		b.timer.Stop()
	}
}

// Drain reads what is left of a finished body for at most d, so that the connection can be
// reused.
func (b *IdleBody) Drain(d time.Duration) {
	b.Stop()
	t := time.AfterFunc(d, func() { _ = b.rc.Close() })
	_, _ = io.CopyN(io.Discard, b.rc, 64<<10)
	t.Stop()
}

// Close disarms the watchdog and closes the body.
func (b *IdleBody) Close() error {
	b.Stop()
	return b.rc.Close()
}
