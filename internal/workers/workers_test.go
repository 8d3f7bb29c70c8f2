package workers

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/modelgateway/caddy-modelgateway/internal/background"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// fakeStore stands for the handle: the pool only hands it on.
type fakeStore struct{ store.Store }

var quick = Options{Backoff: background.Backoff{Min: 20 * time.Millisecond, Max: 40 * time.Millisecond}}

func newTestPool(t *testing.T, o Options) *Pool[string] {
	p := NewPool[string](&fakeStore{}, o)
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func crash() { panic("worker bug") }

func TestWorkerPanicIsRecoveredLoggedWithStackAndRestartedWithBackoff(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	p := newTestPool(t, quick)
	p.Started("config", zap.New(core))
	var runs []time.Time
	runsCh := make(chan time.Time, 16)
	var n atomic.Int32
	p.Run(Worker[string]{Name: "crasher", Run: func(ctx context.Context, rt Runtime[string]) error {
		runsCh <- time.Now()
		if n.Add(1) < 3 {
			crash()
		}
		<-ctx.Done()
		return nil
	}})
	for len(runs) < 3 {
		select {
		case r := <-runsCh:
			runs = append(runs, r)
		case <-time.After(10 * time.Second):
			t.Fatalf("the worker ran %d times, want a restart after each panic", len(runs))
		}
	}
	// Each restart waited for the backoff: at least half its delay (the jitter).
	for i := 1; i < len(runs); i++ {
		if gap := runs[i].Sub(runs[i-1]); gap < quick.Backoff.Min/2 {
			t.Fatalf("restart %d came %v after the panic, sooner than the backoff", i, gap)
		}
	}
	panics := logs.FilterMessage("background worker panicked; restarting").All()
	if len(panics) != 2 {
		t.Fatalf("%d panics logged, want 2: %v", len(panics), logs.All())
	}
	fields := panics[0].ContextMap()
	if fields["worker"] != "crasher" || fields["panic"] != "worker bug" {
		t.Fatalf("the log does not name the worker and the panic: %v", fields)
	}
	if stack, _ := fields["stack"].(string); !strings.Contains(stack, "workers.crash") {
		t.Fatalf("the log has no stack down to the panic: %v", fields["stack"])
	}
	if panics[0].Level != zapcore.ErrorLevel {
		t.Fatalf("logged at %v", panics[0].Level)
	}
}

func TestWorkerErrorIsRestarted(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	p := newTestPool(t, quick)
	p.Started("config", zap.New(core))
	var runs atomic.Int32
	p.Run(Worker[string]{Name: "flaky", Run: func(ctx context.Context, rt Runtime[string]) error {
		if runs.Add(1) < 3 {
			return errors.New("upstream away")
		}
		<-ctx.Done()
		return nil
	}})
	waitFor(t, "the worker ran a third time", func() bool { return runs.Load() == 3 })
	failed := logs.FilterMessage("background worker failed; restarting").All()
	if len(failed) != 2 || failed[0].ContextMap()["error"] != "upstream away" {
		t.Fatalf("failures logged: %v", logs.All())
	}
}

func TestWorkerThatFinishesIsNotRestarted(t *testing.T) {
	p := newTestPool(t, quick)
	p.Started("config", nil)
	var runs atomic.Int32
	w := Worker[string]{Name: "once", Run: func(context.Context, Runtime[string]) error {
		runs.Add(1)
		return nil
	}}
	p.Run(w)
	time.Sleep(5 * quick.Backoff.Max)
	p.Run(w)
	time.Sleep(5 * quick.Backoff.Max)
	if n := runs.Load(); n != 1 {
		t.Fatalf("a worker with nothing more to do ran %d times", n)
	}
}

func TestRuntimeCurrentIsTheNewestStartedConfig(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	p := newTestPool(t, quick)
	seen := make(chan Runtime[string], 1)
	stopOld := p.Started("old", zap.New(core).Named("old"))
	p.Run(Worker[string]{Name: "reader", Run: func(ctx context.Context, rt Runtime[string]) error {
		seen <- rt
		<-ctx.Done()
		return nil
	}})
	rt := <-seen
	if rt.Current() != "old" {
		t.Fatalf("current is %q before the reload", rt.Current())
	}
	// A reload: the new configuration starts, then the old one stops.
	stopNew := p.Started("new", zap.New(core).Named("new"))
	if rt.Current() != "new" {
		t.Fatalf("current is %q once the new configuration started", rt.Current())
	}
	stopOld()
	if rt.Current() != "new" {
		t.Fatalf("current is %q once the old configuration stopped", rt.Current())
	}
	rt.Logger().Info("probe")
	if l := logs.FilterMessage("probe").All(); len(l) != 1 || l[0].LoggerName != "new" || l[0].ContextMap()["worker"] != "reader" {
		t.Fatalf("the worker's logger is not the new configuration's, naming it: %v", l)
	}
	// The last configuration stopping (shutdown) leaves it current until the handle ends.
	stopNew()
	if rt.Current() != "new" {
		t.Fatalf("current is %q once every configuration stopped", rt.Current())
	}
	if rt.Store() != p.store {
		t.Fatal("the runtime's store is not the pool's")
	}
}

func TestRuntimeCurrentNeverGoesToAStoppedConfig(t *testing.T) {
	p := newTestPool(t, quick)
	p.Started("old", nil)
	// A new configuration started and stopped again (another app of it failed to start):
	// the old one, still running, is current again.
	stopFailed := p.Started("failed", nil)
	stopFailed()
	if c := p.Current(); c != "old" {
		t.Fatalf("current is %q, want the configuration still running", c)
	}
	stopFailed()
	if c := p.Current(); c != "old" {
		t.Fatalf("current is %q after a second stop of the failed configuration", c)
	}
}

func TestWorkersRunOncePerPoolAndStopWithIt(t *testing.T) {
	p := NewPool[string](&fakeStore{}, quick)
	var starts, stops atomic.Int32
	w := Worker[string]{Name: "probe", Run: func(ctx context.Context, rt Runtime[string]) error {
		starts.Add(1)
		<-ctx.Done()
		stops.Add(1)
		return ctx.Err()
	}}
	for _, c := range []string{"a", "b", "c"} {
		p.Started(c, nil)
		p.Run(w)
	}
	waitFor(t, "the worker started", func() bool { return starts.Load() == 1 })
	time.Sleep(5 * quick.Backoff.Max)
	if n := starts.Load(); n != 1 {
		t.Fatalf("started %d times over three configurations", n)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := stops.Load(); n != 1 {
		t.Fatalf("stopped %d times when the pool closed", n)
	}
	time.Sleep(5 * quick.Backoff.Max)
	p.Run(w)
	time.Sleep(5 * quick.Backoff.Max)
	if n := starts.Load(); n != 1 {
		t.Fatalf("the worker ran again after the pool closed (%d starts)", n)
	}
}

func TestCloseEndsTheBackoff(t *testing.T) {
	p := NewPool[string](&fakeStore{}, Options{Backoff: background.Backoff{Min: time.Hour, Max: time.Hour}})
	p.Started("config", nil)
	var runs atomic.Int32
	p.Run(Worker[string]{Name: "failing", Run: func(context.Context, Runtime[string]) error {
		runs.Add(1)
		return errors.New("no")
	}})
	waitFor(t, "the worker ran", func() bool { return runs.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatalf("closing waited out the worker's backoff: %v", err)
	}
}
