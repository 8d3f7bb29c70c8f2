// Package background runs the gateway's background goroutines (the lease janitor, the
// instance heartbeat, the store's flush and writer loops, the workers) so that a panic in
// one is recovered and reported with the stack where it was raised, instead of ending the
// process and every request in flight with it.
//
// It imports neither zap nor the store: the store packages, which log nothing themselves,
// report through the error hooks their owner gives them, and a *Panic formats its stack
// with %+v, which zap.Error logs as the field errorVerbose. So any hook that logs the
// error keeps the stack, whoever wrote it.
//
// Call is for a goroutine that others wait on (a lease renewal, a journal segment being
// prepared): its panic becomes its failure, which it answers as it answers any other.
// Loop is for a loop that holds a role (the heartbeat, a janitor): it runs again. Backoff
// spaces retries; the worker pool (internal/workers) uses it too.
package background

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"time"
)

// Panic is a panic recovered from a background goroutine.
type Panic struct {
	// Name is the goroutine's ("lease janitor").
	Name string
	// Value is what was passed to panic.
	Value any
	// Stack is the goroutine's stack where it panicked.
	Stack []byte
}

func (p *Panic) Error() string { return fmt.Sprintf("%s panicked: %v", p.Name, p.Value) }

// Format writes the message, and with %+v the stack after it.
func (p *Panic) Format(f fmt.State, verb rune) {
	_, _ = io.WriteString(f, p.Error())
	if verb == 'v' && f.Flag('+') {
		_, _ = fmt.Fprintf(f, "\n%s", p.Stack)
	}
}

// Unwrap returns the panic's value when it is an error, so that errors.Is sees through a
// panic(err).
func (p *Panic) Unwrap() error {
	err, _ := p.Value.(error)
	return err
}

// AsPanic returns the *Panic in err's chain, or nil.
func AsPanic(err error) *Panic {
	var p *Panic
	if errors.As(err, &p) {
		return p
	}
	return nil
}

// Call runs fn and returns its panic, recovered, or nil when fn returned.
func Call(name string, fn func()) (recovered *Panic) {
	defer func() {
		if v := recover(); v != nil {
			recovered = &Panic{Name: name, Value: v, Stack: debug.Stack()}
		}
	}()
	fn()
	return nil
}

// Report hands err to report, or, when the owner gave no hook (report is nil), writes it
// with its stack to the standard error, where Go itself would have written an unrecovered
// panic: a panic is never dropped unseen.
func Report(report func(error), err error) {
	if report != nil {
		report(err)
		return
	}
	_, _ = fmt.Fprintf(os.Stderr, "%+v\n", err)
}

// Loop is a goroutine that runs until its function returns, and again after a panic: the
// panic is recovered and reported, and the function runs again after a pause, so that a
// loop that holds a role (the heartbeat, a janitor others rely on) keeps it. The function
// must leave shared state consistent when it panics (release its locks in defers, or hold
// none across what may panic): it runs again on the same state.
type Loop struct {
	// Name names the loop in the report.
	Name string
	// Report is told of each panic (nil: the standard error, see Report).
	Report func(error)
	// Stop, when closed, ends a pause before a restart, and the loop with it: its owner is
	// stopping it, and the function would only return. Nil: pauses run their course.
	Stop <-chan struct{}
	// Done, when not nil, is closed once the loop ended for good. The function itself must
	// not close what its owner waits for: it may run again.
	Done chan struct{}
	// Backoff spaces the restarts. Zero: LoopBackoff.
	Backoff Backoff
}

// LoopBackoff spaces the restarts of a Loop: short enough that the owner's Stop is not
// held up long, long enough that a loop that panics at once every time does not spin.
var LoopBackoff = Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}

// Go starts the loop.
func (l Loop) Go(fn func()) {
	go l.Run(fn)
}

// Run runs the loop on the calling goroutine and returns when it ended.
func (l Loop) Run(fn func()) {
	if l.Done != nil {
		defer close(l.Done)
	}
	b := l.Backoff
	if b.Max == 0 {
		b = LoopBackoff
	}
	var restarts int
	for {
		began := time.Now()
		p := Call(l.Name, fn)
		if p == nil {
			return
		}
		Report(l.Report, p)
		if time.Since(began) > b.Max {
			// It ran well for a while: this panic is not one of a series.
			restarts = 0
		}
		if !Sleep(b.Delay(restarts), l.Stop) {
			return
		}
		restarts++
	}
}

// Backoff is a capped exponential backoff with jitter.
type Backoff struct {
	// Min is the pause before the first retry, Max the longest.
	Min, Max time.Duration
}

// Delay is the pause before retry n (0 for the first): Min doubled n times, at most Max,
// of which a random part (up to half) is taken off, so that loops that failed together do
// not retry together.
func (b Backoff) Delay(n int) time.Duration {
	d := b.Min
	for range n {
		if d >= b.Max/2 {
			d = b.Max
			break
		}
		d *= 2
	}
	d = min(d, b.Max)
	if d <= 1 {
		return d
	}
	return d - rand.N(d/2)
}

// Sleep pauses for d and reports true, or returns false as soon as stop is closed.
func Sleep(d time.Duration, stop <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	}
}
