package background

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func panicsWith(v any) { panic(v) }

func TestCallRecoversWithStack(t *testing.T) {
	p := Call("probe", func() { panicsWith("boom") })
	if p == nil {
		t.Fatal("the panic was not recovered")
	}
	if p.Name != "probe" || p.Value != "boom" {
		t.Fatalf("recovered %q %v", p.Name, p.Value)
	}
	// The stack is the panicking goroutine's, down to the function that panicked.
	if !strings.Contains(string(p.Stack), "background.panicsWith") {
		t.Fatalf("the stack does not show where it panicked:\n%s", p.Stack)
	}
	if s := fmt.Sprintf("%+v", p); !strings.Contains(s, "probe panicked: boom") || !strings.Contains(s, "background.panicsWith") {
		t.Fatalf("%%+v is %q, want the message and the stack", s)
	}
	if s := fmt.Sprint(p); strings.Contains(s, "\n") {
		t.Fatalf("%%v carries the stack: %q", s)
	}
	if Call("calm", func() {}) != nil {
		t.Fatal("a function that returned was reported as a panic")
	}
}

func TestPanicUnwrapsAnErrorValue(t *testing.T) {
	err := Call("probe", func() { panic(io.ErrUnexpectedEOF) })
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatal("errors.Is does not see the panicked error")
	}
	if AsPanic(fmt.Errorf("wrapped: %w", err)) != err {
		t.Fatal("AsPanic does not find the panic in the chain")
	}
}

func TestLoopRunsAgainAfterAPanicUntilItReturns(t *testing.T) {
	var runs, reports atomic.Int32
	done := make(chan struct{})
	l := Loop{Name: "probe", Report: func(error) { reports.Add(1) }, Done: done, Backoff: Backoff{Min: time.Millisecond, Max: 10 * time.Millisecond}}
	l.Go(func() {
		if runs.Add(1) < 3 {
			panicsWith("boom")
		}
	})
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the loop did not end once its function returned")
	}
	if runs.Load() != 3 || reports.Load() != 2 {
		t.Fatalf("ran %d times with %d reports, want 3 and 2", runs.Load(), reports.Load())
	}
}

func TestLoopStopEndsThePause(t *testing.T) {
	stop, done := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	Loop{Name: "probe", Report: func(error) {}, Stop: stop, Done: done, Backoff: Backoff{Min: time.Hour, Max: time.Hour}}.Go(func() {
		runs.Add(1)
		panicsWith("boom")
	})
	for runs.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the loop waited out its pause after Stop")
	}
	if runs.Load() != 1 {
		t.Fatalf("ran %d times after Stop", runs.Load())
	}
}

func TestBackoffDelayIsCappedAndJittered(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: time.Second}
	for n, want := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second, time.Second} {
		seen := map[time.Duration]bool{}
		for range 50 {
			d := b.Delay(n)
			if d > want || d < want/2 {
				t.Fatalf("delay %d is %v, want within [%v, %v]", n, d, want/2, want)
			}
			seen[d] = true
		}
		if len(seen) < 2 {
			t.Fatalf("delay %d is always %v: no jitter", n, b.Delay(n))
		}
	}
	if d := b.Delay(1000); d > time.Second {
		t.Fatalf("delay 1000 is %v, past the cap", d)
	}
}
