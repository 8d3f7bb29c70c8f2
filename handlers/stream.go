package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/bufs"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/sse"
)

// sseWriter writes server-sent events to the client, committing the 200 status with the
// first event and flushing after every event so nothing waits in a buffer.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	// failed is set once a write to the client failed (the client left).
	failed bool
	// buf is where events are built, from eventBufs (pooled) until release.
	buf    []byte
	pooled *[]byte
	// hold, set by holdFor, keeps writes unflushed until the upstream reader waits for
	// more (unflushed says a write is waiting for that flush).
	hold      bool
	unflushed bool
}

// eventBufs hold what a stream's events are built in before each write.
var eventBufs = &bufs.Pool{Size: 2048, Max: 64 << 10}

// newSSEWriter returns a writer to w; release it once the stream is over.
func newSSEWriter(w http.ResponseWriter) *sseWriter {
	p := eventBufs.Get()
	return &sseWriter{w: w, rc: http.NewResponseController(w), buf: *p, pooled: p}
}

// release flushes what is held and gives the writer's buffer back; nothing may be written
// after it.
func (s *sseWriter) release() {
	s.flushHeld()
	if s.pooled != nil {
		eventBufs.Put(s.pooled, s.buf)
		s.pooled, s.buf = nil, nil
	}
}

func (s *sseWriter) commit() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	h.Del("Content-Length")
	s.w.WriteHeader(http.StatusOK)
}

// data writes "data: <payload>\n\n" and flushes.
func (s *sseWriter) data(payload []byte) {
	s.event("", payload)
}

// dataReplacing writes payload with payload[start:end] replaced by value, as data does.
func (s *sseWriter) dataReplacing(payload []byte, start, end int, value []byte) {
	s.commit()
	if s.failed {
		return
	}
	s.write(sse.AppendSplicedData(s.buf[:0], payload, start, end, value))
}

// event writes an event with an optional name and flushes.
func (s *sseWriter) event(name string, payload []byte) {
	s.commit()
	if s.failed {
		return
	}
	s.write(appendEvent(s.buf[:0], name, payload))
}

// frames writes events that are ready together (those one upstream event became) with a
// single write and flush: the client reads the same bytes, at the moment it would have read
// the last of them, for one system call instead of one per event.
func (s *sseWriter) frames(frames []frame) {
	if len(frames) == 0 {
		return
	}
	s.commit()
	if s.failed {
		return
	}
	b := s.buf[:0]
	for _, f := range frames {
		b = appendEvent(b, f.event, f.data)
	}
	s.write(b)
}

// appendEvent is sse.AppendEvent for names the gateway controls or read from an SSE line,
// which hold no line break.
func appendEvent(b []byte, name string, payload []byte) []byte {
	b, _ = sse.AppendEvent(b, name, payload)
	return b
}

// write sends a complete event and flushes, unless flushes are held.
func (s *sseWriter) write(b []byte) {
	s.buf = b
	if _, err := s.w.Write(b); err != nil {
		s.failed = true
		return
	}
	if s.hold {
		s.unflushed = true
		return
	}
	if err := s.rc.Flush(); err != nil {
		s.failed = true
	}
}

// holdFor holds the writer's flushes until rd is about to wait for the upstream: the
// events that one read brought (a chunk with the finish and usage chunks and [DONE] after
// it, an Anthropic message_start with its first delta) reach the client in one write, as
// a proxy that copies bytes sends them, for one system call and one wake-up of the client
// instead of one per event. Nothing is held while the reader waits. What is written after
// the reader's last read (the stream's final frames) is flushed by release, or by endHold
// before anything else that may wait (a failover to another route).
func (s *sseWriter) holdFor(rd providers.Waiter) {
	s.hold = true
	rd.OnWait(s.flushHeld)
}

// flushHeld flushes the writes that hold kept.
func (s *sseWriter) flushHeld() {
	if !s.unflushed {
		return
	}
	s.unflushed = false
	if s.failed {
		return
	}
	if err := s.rc.Flush(); err != nil {
		s.failed = true
	}
}

// endHold flushes what is held and every write after it.
func (s *sseWriter) endHold() {
	s.flushHeld()
	s.hold = false
}

// idleTimer calls stop when no event arrived for d; kick restarts the wait. It spares a
// goroutine per stream: the timer fires on the runtime's timer heap.
type idleTimer struct {
	t     *time.Timer
	d     time.Duration
	fired atomic.Bool
}

func newIdleTimer(d time.Duration, stop func()) *idleTimer {
	it := &idleTimer{d: d}
	it.t = time.AfterFunc(d, func() {
		it.fired.Store(true)
		stop()
	})
	return it
}

func (it *idleTimer) kick() { it.t.Reset(it.d) }

func (it *idleTimer) Stop() { it.t.Stop() }

// errClientLeft ends a relay whose client left; the caller returns what relayEnd gives.
var errClientLeft = errors.New("client left")

// relayEnd classifies how a relay's read loop ended: the client left (result is what the
// attempt returns), or the upstream failed (a timer of the attempt, the idle timer, a read
// error), or it ended cleanly (nil). streamErr is a failure the loop itself found.
func (c *call) relayEnd(r *http.Request, rt Route, out *sseWriter, idle *idleTimer, readErr error, streamErr *providers.UpstreamError, complete bool) (*providers.UpstreamError, error) {
	c.streamDone()
	if c.gone() || out.failed {
		if !out.started {
			return nil, context.Canceled
		}
		c.clientGone()
		return nil, errClientLeft
	}
	if ue := c.timeoutCause(r.Context(), rt); ue != nil {
		return ue, nil
	}
	if streamErr != nil || complete {
		return streamErr, nil
	}
	switch {
	case idle.fired.Load():
		return &providers.UpstreamError{Provider: rt.ProviderName, Category: providers.CategoryServerError, Retryable: true, Timeout: true,
			Message: fmt.Sprintf("the provider sent nothing for %s", c.g.StreamIdleTimeout)}, nil
	case readErr != nil:
		ue := c.providerFault(rt, "the provider's stream broke: "+readErr.Error(), nil)
		if re, ok := providers.AsUpstreamError(readErr); ok {
			ue.Timeout = re.Timeout // the provider's own idle timer
		}
		return ue, nil
	}
	return nil, nil
}

// relayResult is what an attempt returns after relayEnd reported the client left.
func relayResult(err error) error {
	if errors.Is(err, errClientLeft) {
		return nil
	}
	return err
}

// relayCommit makes rt the route that answers, once, as the first frame is written: from
// then on a failure can no longer fall back silently.
//
// rt is a pointer: relayCommit is called for every frame, and a Route passed by value
// whose address is kept was copied to the heap on every call (once per chunk of every
// stream), even though only the first call keeps it.
func (c *call) relayCommit(out *sseWriter, rt *Route, began time.Time) {
	if !out.started {
		c.recordAttempt(*rt, began, nil)
		c.route = rt
		c.Status = http.StatusOK
		c.streaming = c.g.Now()
	}
}

// streamDone ends the upstream's part of a relayed stream: from its first frame written to
// its last read, the time is the provider's (generating), not the gateway's.
func (c *call) streamDone() {
	if !c.streaming.IsZero() {
		c.upstreamTime += c.g.Now().Sub(c.streaming)
		c.streaming = time.Time{}
	}
}

// relayFailed handles a relay's upstream failure: before any output it is the attempt's
// error (the next try or route may still answer); after, the stream is continued elsewhere
// or ends with the surface's in-band error through sink.
func (c *call) relayFailed(out *sseWriter, rt Route, began time.Time, ue *providers.UpstreamError, sink streamSink) error {
	// What the broken stream brought reaches the client before another route is asked.
	out.endHold()
	if !out.started {
		c.recordAttempt(rt, began, ue)
		return ue
	}
	c.midStreamFailure(out, rt, ue, sink)
	return nil
}
