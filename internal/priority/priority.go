// Package priority lets background work (the rows of gateway-run batches) run on the CPU
// that interactive requests leave over. Go schedules goroutines without priorities: a
// request's goroutine, woken by its client or its upstream, waits in the run queue behind
// every runnable goroutine of the process, and a batch sends rows as fast as its bounds
// let it. So background work runs its CPU-bound stretches only while holding a turn of the
// process's Lane, which has half the CPUs' turns, and takes a turn only while no
// interactive request is running (at most MaxDelay later, so that it always moves); both
// kinds of work count as not running while they wait for their upstream (Wait), since
// that wait uses no CPU.
package priority

import (
	"context"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// MaxDelay is the longest the Background lane's work waits at one point for interactive
// requests to stop running: under constant interactive traffic the background still
// moves, a turn at least every MaxDelay.
const MaxDelay = 2 * time.Millisecond

// Lane is the background's CPU: at most its size of background goroutines run their
// CPU-bound stretches at once.
type Lane struct {
	turns chan struct{}
	// fg is where the lane's holders look whether interactive requests are running, and
	// maxDelay the longest they wait for none to be.
	fg       *Foreground
	maxDelay time.Duration
}

// NewLane returns a lane of n turns (at least 1) that gives way to fg's requests, for at
// most maxDelay at a time.
func NewLane(n int, fg *Foreground, maxDelay time.Duration) *Lane {
	return &Lane{turns: make(chan struct{}, max(n, 1)), fg: fg, maxDelay: maxDelay}
}

// Background is the process's lane: half of GOMAXPROCS turns (at least one), giving way to
// Interactive's requests. The CPU is the process's, not a configuration's, so a reload
// keeps the lane.
var Background = NewLane(runtime.GOMAXPROCS(0)/2, Interactive, MaxDelay)

// Size is the lane's turns.
func (l *Lane) Size() int { return cap(l.turns) }

// Turn is one background goroutine's claim on a turn of its lane. Goroutines the holder
// starts (an attempt's own) may yield it too, so whether it is held is kept under a lock.
type Turn struct {
	lane *Lane
	mu   sync.Mutex
	held bool
}

// Enter waits for a turn of the lane and for no interactive request to be running (at
// most MaxDelay), and returns the turn with ctx carrying it (for Wait). ctx ending first
// is its error.
func (l *Lane) Enter(ctx context.Context) (context.Context, *Turn, error) {
	select {
	case l.turns <- struct{}{}:
	case <-ctx.Done():
		return ctx, nil, ctx.Err()
	}
	l.fg.await(ctx, l.maxDelay)
	t := &Turn{lane: l, held: true}
	return context.WithValue(ctx, classKey{}, t), t, nil
}

// Leave gives the turn back; a turn not held (waiting, or left) is not given twice.
func (t *Turn) Leave() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held {
		t.held = false
		<-t.lane.turns
	}
}

// yield gives the turn back for a wait and reports whether it was held.
func (t *Turn) yield() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.held {
		return false
	}
	t.held = false
	<-t.lane.turns
	return true
}

// resume takes the turn again after a wait, as Enter does, unless ctx ends first: work
// whose context ended runs to its end without one rather than waiting behind the lane.
func (t *Turn) resume(ctx context.Context) {
	select {
	case t.lane.turns <- struct{}{}:
	case <-ctx.Done():
		return
	}
	t.lane.fg.await(ctx, t.lane.maxDelay)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held {
		// Taken meanwhile by another goroutine of the holder: one turn is enough.
		<-t.lane.turns
		return
	}
	t.held = true
}

// classKey keys a context's class: a *Turn for background work holding a lane's turn,
// other for background work outside any lane (a job's poll); a context without it is an
// interactive request's.
type classKey struct{}

type other struct{}

// Detached marks ctx as background work outside any lane, whose waits for its upstream
// are not an interactive request's.
func Detached(ctx context.Context) context.Context {
	return context.WithValue(ctx, classKey{}, other{})
}

// Wait marks the start of a wait for an upstream (its answer, a stream's next bytes) that
// uses no CPU, and returns the function marking its end. Background work gives its turn
// back meanwhile; an interactive request stops counting as running in Interactive.
func Wait(ctx context.Context) (done func()) {
	switch c := ctx.Value(classKey{}).(type) {
	case nil:
		Interactive.Stop()
		return startInteractive // a method value would be allocated on every call
	case *Turn:
		if !c.yield() {
			return noop
		}
		return func() { c.resume(ctx) }
	default:
		return noop
	}
}

func noop() {}

func startInteractive() { Interactive.Start() }

// Foreground counts the interactive requests that are running (not waiting for their
// upstream) and wakes the background waiting for none to be.
type Foreground struct {
	running atomic.Int64
	waiters atomic.Int64
	mu      sync.Mutex
	idle    chan struct{}
}

// Interactive is the process's count of running interactive requests.
var Interactive = &Foreground{}

// Start counts a request as running, from its arrival or the end of a wait.
func (f *Foreground) Start() { f.running.Add(1) }

// Stop counts a request as no longer running, at its end or the start of a wait. The
// count may go below zero for a moment (a context not marked Detached that is not a
// request's); below one is none running.
func (f *Foreground) Stop() {
	if f.running.Add(-1) <= 0 && f.waiters.Load() > 0 {
		f.mu.Lock()
		if f.idle != nil {
			close(f.idle)
			f.idle = nil
		}
		f.mu.Unlock()
	}
}

// Running is how many interactive requests are running.
func (f *Foreground) Running() int64 { return max(f.running.Load(), 0) }

// await waits, at most maxDelay, until no interactive request is running.
func (f *Foreground) await(ctx context.Context, maxDelay time.Duration) {
	if f == nil || f.running.Load() <= 0 {
		return
	}
	f.waiters.Add(1)
	defer f.waiters.Add(-1)
	deadline := time.NewTimer(maxDelay)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		if f.idle == nil {
			f.idle = make(chan struct{})
		}
		idle := f.idle
		f.mu.Unlock()
		// Looked again after the channel is set: a Stop before this closed none.
		if f.running.Load() <= 0 {
			return
		}
		select {
		case <-idle:
			if f.running.Load() <= 0 {
				return
			}
		case <-deadline.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// WaitingBody is body whose reads are waits (Wait): a stream's, whose reads wait for the
// upstream's next bytes. Background work's bodies are returned as they are: its stream
// reads are rare, and its turn is not given back between them.
func WaitingBody(ctx context.Context, body io.ReadCloser) io.ReadCloser {
	if ctx.Value(classKey{}) != nil {
		return body
	}
	return waitingBody{body}
}

type waitingBody struct{ io.ReadCloser }

func (b waitingBody) Read(p []byte) (int, error) {
	Interactive.Stop()
	defer Interactive.Start()
	return b.ReadCloser.Read(p)
}
