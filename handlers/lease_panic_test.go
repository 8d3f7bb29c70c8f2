package handlers

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// A panic in the lease janitor is logged with its stack and the janitor runs again: it
// alone drops idle leases, and Close waits for it.
func TestLeaseJanitorSurvivesAPanic(t *testing.T) {
	a, _ := leaseGateway(t)
	core, logs := observer.New(zapcore.ErrorLevel)
	a.g.Logger = zap.New(core)
	var armed atomic.Bool
	clock := a.g.Now
	a.g.Now = func() time.Time {
		if armed.CompareAndSwap(true, false) {
			panic("clock bug")
		}
		return clock()
	}
	ws, std, _ := a.workspace(100 * usdNanos)
	if a.g.admitLease(context.Background(), ws, kidOf(t, std), 10_000_000) == nil {
		t.Fatal("no lease was taken")
	}
	// The next reader of the clock is the janitor's sweep.
	armed.Store(true)
	deadline := time.Now().Add(10 * time.Second)
	for logs.FilterMessage("background goroutine panicked").Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the janitor's panic was not logged")
		}
		time.Sleep(5 * time.Millisecond)
	}
	entry := logs.FilterMessage("background goroutine panicked").All()[0]
	if stack, _ := entry.ContextMap()["errorVerbose"].(string); !strings.Contains(stack, "clock bug") || !strings.Contains(stack, "leaseJanitor") {
		t.Fatalf("the log has no stack down to the janitor: %v", entry.ContextMap())
	}
	closed := make(chan error, 1)
	go func() { closed <- a.g.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waits for a janitor that died")
	}
	a.g.leases.mu.Lock()
	running := a.g.leases.janitor
	a.g.leases.mu.Unlock()
	if running {
		t.Fatal("the janitor still counts as running after Close")
	}
}

// panickyRelease is a store whose next release panics.
type panickyRelease struct {
	store.Store
	armed atomic.Bool
}

func (s *panickyRelease) ReleaseReservation(ctx context.Context, id string) (int64, error) {
	if s.armed.CompareAndSwap(true, false) {
		panic("release bug")
	}
	return s.Store.ReleaseReservation(ctx, id)
}

// A lease whose release panicked is released again by the janitor, as after a store
// error: it does not stay held until the process stops.
func TestLeaseReleaseThatPanicsIsRetried(t *testing.T) {
	a, cs := leaseGateway(t)
	ps := &panickyRelease{Store: cs}
	a.g.Store = ps
	ws, std, _ := a.workspace(100 * usdNanos)
	kid := kidOf(t, std)
	ctx := context.Background()
	l := a.g.admitLease(ctx, ws, kid, 10_000_000)
	// A settlement that fails drops the lease with a release of its own.
	cs.failLeaseSettle.Store(true)
	ps.armed.Store(true)
	_, _ = a.g.settleLease(ctx, time.Now().Add(a.g.SettleTimeout), l, 10_000_000, &store.Generation{WorkspaceID: ws, KeyID: kid, Status: 200})
	cs.failLeaseSettle.Store(false)
	if ps.armed.Load() {
		t.Fatal("the lease's release was not tried")
	}
	waitLeasesDropped(t, a, ws)
}
