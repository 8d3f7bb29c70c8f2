package gemini

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
	"github.com/modelgateway/caddy-modelgateway/providers/sse"
)

// errSkipFrame is what handle returns for a malformed frame: Next counts it and drops the
// frame whole. It never leaves the stream.
var errSkipFrame = errors.New("malformed frame skipped")

// stream turns streamGenerateContent's SSE body (one GenerateContentResponse per data
// event, no [DONE]: the stream ends when the connection closes) into neutral events. No
// goroutine is involved: Next reads the body; the idle watchdog is a timer, armed only while
// Next waits for the upstream, that closes the body.
//
// Content events go out as they arrive. The finish and the usage wait for the end of the
// body: Gemini may send its finishReason in a chunk before the one with the last function
// call or the last usageMetadata, and only the end tells which finish (stop or tool_calls)
// and which usage (the last one) hold.
//
// A frame that is not a GenerateContentResponse (not JSON, or JSON of the wrong shape) is
// skipped and counted (SkippedFrames); an error frame ends the stream with an error. A body
// that ends cleanly without a finish reason ends the stream cleanly all the same, with the
// finish (stop, or tool_calls after function calls) and the last usage known, zero when
// none came; a body that breaks off (transport error, idle timeout) is an error.
type stream struct {
	provider string
	ctx      context.Context // the caller's: its cancellation is not an upstream failure
	at       *upstreamhttp.Attempt
	body     io.ReadCloser
	rd       *sse.Reader
	redact   func([]byte) []byte

	// frames is the answer of a server that sent one JSON body, replayed; rd is nil then.
	frames []json.RawMessage
	whole  bool

	idle  time.Duration
	timer *time.Timer
	fired atomic.Bool

	turn    *turn
	pending []providers.Event
	pos     int
	cur     providers.Event
	err     error
	ended   bool

	sawAnswer    bool // a candidate or a block was seen
	finishRaw    string
	sawFinish    bool
	blocked      bool
	usage        providers.Usage
	sawUsage     bool
	emittedUsage bool
	skipped      atomic.Int64 // frames skipped as malformed

	releaseOnce sync.Once
	closed      atomic.Bool
}

func newStream(ctx context.Context, provider string, at *upstreamhttp.Attempt, body io.ReadCloser, idle time.Duration, names *toolNames, redact func([]byte) []byte) *stream {
	s := &stream{
		provider: provider, ctx: ctx, at: at, body: body, rd: sse.NewReader(body, 0),
		idle: idle, turn: newTurn(names), redact: redact,
	}
	if idle > 0 {
		s.timer = time.AfterFunc(idle, func() {
			s.fired.Store(true)
			_ = body.Close()
		})
		s.timer.Stop()
	}
	return s
}

func newReplayStream(ctx context.Context, provider string, frames []json.RawMessage, names *toolNames, redact func([]byte) []byte) *stream {
	return &stream{
		provider: provider, ctx: ctx, at: upstreamhttp.NewAttempt(ctx, 0),
		frames: frames, whole: true, turn: newTurn(names), redact: redact,
	}
}

var _ providers.Waiter = (*stream)(nil)

// OnWait implements providers.Waiter. A stream read from a whole JSON array (no reader)
// never waits.
func (s *stream) OnWait(f func()) {
	if s.rd != nil {
		s.rd.OnWait(f)
	}
}

// Next implements providers.Stream.
func (s *stream) Next() bool {
	for {
		if s.pos < len(s.pending) {
			s.cur = s.pending[s.pos]
			s.pos++
			return true
		}
		if s.ended {
			return false
		}
		s.pending, s.pos = s.pending[:0], 0
		data, ok := s.read()
		if !ok {
			s.finish()
			continue
		}
		if err := s.handle(data); err != nil {
			s.pending = s.pending[:0]
			if err == errSkipFrame {
				s.skipped.Add(1)
				continue
			}
			s.fail(err)
		}
	}
}

// SkippedFrames is the number of frames skipped as malformed so far. It may be called from
// any goroutine.
func (s *stream) SkippedFrames() int { return int(s.skipped.Load()) }

// Current implements providers.Stream.
func (s *stream) Current() providers.Event { return s.cur }

// Err implements providers.Stream.
func (s *stream) Err() error { return s.err }

// Close implements providers.Stream. It may be called at any time, from any goroutine, and
// more than once.
func (s *stream) Close() error {
	s.closed.Store(true)
	s.release()
	return nil
}

// release stops the watchdog, closes the body and ends the attempt.
func (s *stream) release() {
	s.releaseOnce.Do(func() {
		if s.timer != nil {
			s.timer.Stop()
		}
		if s.body != nil {
			_ = s.body.Close()
		}
		s.at.Cancel()
	})
}

// read returns the data of the next event, false at the end of the body or on an error.
func (s *stream) read() ([]byte, bool) {
	if s.rd == nil {
		if len(s.frames) == 0 || s.closed.Load() {
			return nil, false
		}
		f := s.frames[0]
		s.frames = s.frames[1:]
		return f, true
	}
	for {
		if s.closed.Load() {
			return nil, false
		}
		if s.timer != nil {
			s.timer.Reset(s.idle)
		}
		ok := s.rd.Next()
		if s.timer != nil {
			s.timer.Stop()
		}
		if !ok {
			return nil, false
		}
		ev := s.rd.Event()
		switch ev.Name {
		case "", "message", "error":
			return ev.Data, true
		}
		// Gemini names no events; others are not part of its format.
	}
}

// finish ends the stream at the end of the body: the finish and the usage after a clean
// end, a failure after a broken one.
func (s *stream) finish() {
	switch {
	case s.closed.Load():
		s.end(upstreamhttp.ErrClosed)
		return
	case s.fired.Load():
		s.fail(upstreamhttp.IdleTimeoutError(s.provider))
		return
	}
	if s.rd != nil {
		if err := s.rd.Err(); err != nil {
			if errors.Is(err, sse.ErrEventTooLarge) {
				// The reader cannot go on after an oversized event: it is not a frame to skip.
				s.fail(upstreamhttp.Failure(s.provider, ErrMalformedFrame, err, nil))
				return
			}
			s.fail(upstreamhttp.TransportError(s.provider, s.ctx, s.at, err))
			return
		}
	}
	if !s.sawFinish && s.whole && s.sawAnswer {
		// A whole JSON answer is complete by definition, finish reason or not.
		s.sawFinish = true
	}
	if !s.sawFinish {
		// A clean end without a finish reason: finished all the same, with the usage even
		// when none came. finishRaw is empty: stop, or tool_calls after function calls.
		s.sawUsage = true
	}
	reason := providers.FinishContentFilter
	if !s.blocked {
		reason, _ = finishReason(s.finishRaw, s.turn.calls > 0)
	}
	s.pending = append(s.pending, providers.Event{Type: providers.EventFinish, FinishReason: reason})
	s.appendUsage()
	s.end(nil)
}

// fail ends the stream with err, after the usage seen so far: it is what the upstream
// bills for the partial answer.
func (s *stream) fail(err error) {
	s.appendUsage()
	s.end(err)
}

func (s *stream) appendUsage() {
	if s.sawUsage && !s.emittedUsage {
		s.emittedUsage = true
		s.pending = append(s.pending, providers.Event{Type: providers.EventUsage, Usage: s.usage})
	}
}

func (s *stream) end(err error) {
	s.ended = true
	s.err = err
	s.release()
	if s.rd != nil {
		s.rd.Release()
	}
}

// handle turns one GenerateContentResponse frame into pending events. A frame that is not
// one returns errSkipFrame, before it changes anything.
func (s *stream) handle(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || string(data) == "[DONE]" {
		return nil
	}
	var r GenerateContentResponse
	if err := json.Unmarshal(data, &r); err != nil {
		var probe struct {
			Error json.RawMessage `json:"error"`
		}
		if json.Unmarshal(data, &probe) == nil && !isFalsy(probe.Error) {
			return streamError(s.provider, s.redact(data))
		}
		return errSkipFrame
	}
	if !isFalsy(r.Error) {
		return streamError(s.provider, s.redact(data))
	}
	if r.UsageMetadata != nil {
		// Running totals: the last one wins, and a chunk without usage changes nothing.
		s.usage, s.sawUsage = usageFrom(r.UsageMetadata), true
	}
	c := firstCandidate(r.Candidates)
	if c == nil {
		if r.PromptFeedback != nil && r.PromptFeedback.BlockReason != "" {
			s.sawFinish, s.blocked, s.sawAnswer = true, true, true
		}
		return nil
	}
	s.sawAnswer = true
	if c.Content != nil {
		for _, p := range c.Content.Parts {
			s.turn.part(p, s.emit)
		}
	}
	if c.FinishReason != "" {
		if _, ok := finishReason(c.FinishReason, false); !ok {
			return finishFailure(s.provider, c.FinishReason, c.FinishMessage)
		}
		s.finishRaw, s.sawFinish = c.FinishReason, true
	}
	return nil
}

func (s *stream) emit(ev providers.Event) { s.pending = append(s.pending, ev) }

// Interface guard.
var _ providers.Stream = (*stream)(nil)
