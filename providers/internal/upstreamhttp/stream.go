package upstreamhttp

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/sse"
)

// StreamConn is the upstream end of a stream an adapter decodes: the caller's context, the
// attempt and the watched body, and what ending and closing the stream does to them. The
// adapter's stream reads Body (through an sse.Reader), calls MarkDone when it reads the
// terminal event, ReadEnd when the reader stops, Body.Stop when the stream ends and Close
// when it is closed.
type StreamConn struct {
	Provider string
	// Ctx is the caller's context: its cancellation is not an upstream failure.
	Ctx  context.Context
	At   *Attempt
	Body *IdleBody

	done      atomic.Bool // the terminal event was read: the body may be drained on Close
	closed    atomic.Bool
	closeOnce sync.Once
}

// NewStreamConn returns the end of a stream that reads body within the attempt at.
func NewStreamConn(ctx context.Context, provider string, at *Attempt, body *IdleBody) *StreamConn {
	return &StreamConn{Provider: provider, Ctx: ctx, At: at, Body: body}
}

// MarkDone records that the terminal event was read: Close may drain the rest of the body,
// which lets the connection go back to the pool. It may be called from any goroutine.
func (c *StreamConn) MarkDone() { c.done.Store(true) }

// Done tells whether MarkDone was called.
func (c *StreamConn) Done() bool { return c.done.Load() }

// Closed tells whether Close was called. It may be called from any goroutine.
func (c *StreamConn) Closed() bool { return c.closed.Load() }

// Close drains the body for at most drain when the terminal event was read, closes it and
// ends the attempt. It may be called at any time, from any goroutine, and more than once.
func (c *StreamConn) Close(drain time.Duration) {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		if c.done.Load() {
			c.Body.Drain(drain)
		}
		_ = c.Body.Close()
		c.At.Cancel()
	})
}

// ReadEnd classifies the end of the body, err being the SSE reader's error: ErrClosed after
// Close, nil for a clean end (which the stream completes or fails as its format says), a
// failure wrapping malformedFrame (the adapter's ErrMalformedFrame) for an event larger
// than the reader's limit, which the reader cannot go on after, and TransportError for
// anything else.
func (c *StreamConn) ReadEnd(err, malformedFrame error) error {
	if c.closed.Load() {
		return ErrClosed
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sse.ErrEventTooLarge):
		return Failure(c.Provider, malformedFrame, err, nil)
	}
	return TransportError(c.Provider, c.Ctx, c.At, err)
}

// EventStream replays events already in memory: the answer of a server that ignored stream.
type EventStream struct {
	events []providers.Event
	pos    int
	cur    providers.Event
}

// NewEventStream returns a stream of events.
func NewEventStream(events []providers.Event) *EventStream {
	return &EventStream{events: events}
}

// Next implements providers.Stream.
func (s *EventStream) Next() bool {
	if s.pos >= len(s.events) {
		return false
	}
	s.cur = s.events[s.pos]
	s.pos++
	return true
}

// Current implements providers.Stream.
func (s *EventStream) Current() providers.Event { return s.cur }

// Err implements providers.Stream: a replay does not fail.
func (s *EventStream) Err() error { return nil }

// Close implements providers.Stream: the events left are dropped.
func (s *EventStream) Close() error { s.pos = len(s.events); return nil }

// Interface guard.
var _ providers.Stream = (*EventStream)(nil)
