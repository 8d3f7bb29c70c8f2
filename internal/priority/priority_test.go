package priority

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// entered runs Enter in a goroutine and returns a channel that gets its turn.
func entered(t *testing.T, ctx context.Context, l *Lane) <-chan *Turn {
	t.Helper()
	got := make(chan *Turn, 1)
	go func() {
		_, turn, err := l.Enter(ctx)
		if err != nil {
			close(got)
			return
		}
		got <- turn
	}()
	return got
}

// notYet fails if ch delivers within d: what it waits for must not have happened.
func notYet[T any](t *testing.T, ch <-chan T, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s: did not wait", what)
	case <-time.After(d):
	}
}

func soon[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: still waiting after 5 s", what)
	}
	panic("unreachable")
}

func TestLaneHoldsItsTurns(t *testing.T) {
	l := NewLane(1, &Foreground{}, time.Hour)
	_, first, err := l.Enter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	second := entered(t, context.Background(), l)
	notYet(t, second, 20*time.Millisecond, "a second turn of a lane of one")
	first.Leave()
	first.Leave() // a turn left twice gives back one turn, not two
	turn := soon(t, second, "the second turn after the first left")
	third := entered(t, context.Background(), l)
	notYet(t, third, 20*time.Millisecond, "a third turn while the second holds the only one")
	turn.Leave()
	soon(t, third, "the third turn").Leave()
}

func TestEnterEndsWithItsContext(t *testing.T) {
	l := NewLane(1, &Foreground{}, time.Hour)
	_, turn, _ := l.Enter(context.Background())
	defer turn.Leave()
	ctx, cancel := context.WithCancel(context.Background())
	got := entered(t, ctx, l)
	cancel()
	if turn, ok := <-got; ok {
		t.Fatalf("Enter on an ended context got a turn %v", turn)
	}
}

// A holder waiting for its upstream gives its turn back, and takes it again after.
func TestWaitGivesTheTurnBack(t *testing.T) {
	l := NewLane(1, &Foreground{}, time.Hour)
	ctx, turn, _ := l.Enter(context.Background())
	done := Wait(ctx)
	other := soon(t, entered(t, context.Background(), l), "a turn while the holder waits")
	back := make(chan struct{})
	go func() { done(); close(back) }()
	notYet(t, back, 20*time.Millisecond, "the holder's return while another holds the turn")
	other.Leave()
	soon(t, back, "the holder's return")
	// Held again: a third waits until the holder leaves.
	third := entered(t, context.Background(), l)
	notYet(t, third, 20*time.Millisecond, "a turn while the holder holds it again")
	turn.Leave()
	soon(t, third, "a turn after the holder left").Leave()
}

// Background work waits for interactive requests to stop running, and their waits for
// their upstream do not count as running.
func TestBackgroundGivesWayToInteractive(t *testing.T) {
	fg := &Foreground{}
	l := NewLane(2, fg, time.Hour)
	fg.Start()
	got := entered(t, context.Background(), l)
	notYet(t, got, 20*time.Millisecond, "a turn while an interactive request runs")
	fg.Stop()
	soon(t, got, "a turn once no interactive request runs").Leave()

	// A holder coming back from its wait waits for the interactive requests too.
	ctx, turn, _ := l.Enter(context.Background())
	done := Wait(ctx)
	fg.Start()
	back := make(chan struct{})
	go func() { done(); close(back) }()
	notYet(t, back, 20*time.Millisecond, "the holder's return while an interactive request runs")
	fg.Stop()
	soon(t, back, "the holder's return once none runs")
	turn.Leave()
}

func TestBackgroundWaitsAtMostMaxDelay(t *testing.T) {
	fg := &Foreground{}
	l := NewLane(1, fg, 10*time.Millisecond)
	fg.Start() // never stops: the background still moves
	defer fg.Stop()
	for range 3 {
		begun := time.Now()
		_, turn, err := l.Enter(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		turn.Leave()
		if d := time.Since(begun); d < 10*time.Millisecond {
			t.Fatalf("Enter returned after %s while an interactive request ran: it did not wait", d)
		}
	}
}

// An interactive request's waits (its answer, its stream's reads) take it out of the
// running count; background work's do not touch the count.
func TestInteractiveWaitsAreNotRunning(t *testing.T) {
	before := Interactive.running.Load()
	Interactive.Start()
	done := Wait(context.Background())
	if got := Interactive.running.Load(); got != before {
		t.Fatalf("running %d during an interactive request's wait, want %d", got, before)
	}
	done()
	body := WaitingBody(context.Background(), readerFunc(func(p []byte) (int, error) {
		if got := Interactive.running.Load(); got != before {
			t.Errorf("running %d during a stream's read, want %d", got, before)
		}
		return 0, io.EOF
	}))
	_, _ = body.Read(make([]byte, 8))
	if got := Interactive.running.Load(); got != before+1 {
		t.Fatalf("running %d after the waits, want %d", got, before+1)
	}
	Interactive.Stop()

	detached := Detached(context.Background())
	Wait(detached)()
	plain := io.NopCloser(strings.NewReader("x"))
	if WaitingBody(detached, plain) != plain {
		t.Fatal("a background stream's body was wrapped")
	}
	if got := Interactive.running.Load(); got != before {
		t.Fatalf("running %d after background waits, want %d", got, before)
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
func (f readerFunc) Close() error               { return nil }

// A goroutine of the holder's (an attempt's own) may wait with the holder's context: the
// turn is given back once and taken back once.
func TestTurnSharedByTheHoldersGoroutines(t *testing.T) {
	l := NewLane(1, &Foreground{}, time.Hour)
	ctx, turn, _ := l.Enter(context.Background())
	d1 := Wait(ctx)
	d2 := Wait(ctx) // already given back: nothing to give
	d2()
	d1()
	turn.Leave()
	// One turn in all: the lane has its one turn free again.
	_, again, err := l.Enter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	again.Leave()
	if n := len(l.turns); n != 0 {
		t.Fatalf("%d turns taken after every holder left", n)
	}
}

// The marks on an interactive request's path allocate nothing.
func TestInteractiveMarksAllocateNothing(t *testing.T) {
	ctx := context.WithValue(context.Background(), struct{ k int }{1}, 2)
	if n := testing.AllocsPerRun(100, func() {
		Interactive.Start()
		Wait(ctx)()
		Interactive.Stop()
	}); n != 0 {
		t.Fatalf("%.0f allocations a request, want 0", n)
	}
}
