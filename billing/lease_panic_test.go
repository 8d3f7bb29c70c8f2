package billing

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

	"github.com/modelgateway/caddy-modelgateway/store"
)

// A panic in the lease janitor is logged with its stack and the janitor runs again: it
// alone drops idle leases, and Close waits for it.
func TestLeaseJanitorSurvivesAPanic(t *testing.T) {
	f := newFixture(t, 100*usd)
	core, logs := observer.New(zapcore.ErrorLevel)
	f.cfg.Logger = zap.New(core)
	var armed atomic.Bool
	f.cfg.Now = func() time.Time {
		if armed.CompareAndSwap(true, false) {
			panic("clock bug")
		}
		return time.Now()
	}
	if _, err := f.lg.KeyLease().Admit(context.Background(), f.request("gen_janitor", 10_000_000)); err != nil {
		t.Fatal(err)
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
	go func() { closed <- f.lg.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waits for a janitor that died")
	}
	if f.lg.LeaseStats().JanitorRunning {
		t.Fatal("the janitor still counts as running after Close")
	}
}

// panickyRelease is a store whose next release panics and whose lease settlements fail
// while failSettle is set.
type panickyRelease struct {
	store.Store
	armed, failSettle atomic.Bool
}

func (s *panickyRelease) ReleaseReservation(ctx context.Context, id string) (int64, error) {
	if s.armed.CompareAndSwap(true, false) {
		panic("release bug")
	}
	return s.Store.ReleaseReservation(ctx, id)
}

func (s *panickyRelease) SettleLease(ctx context.Context, p store.SettleLeaseParams) (store.Generation, error) {
	if s.failSettle.Load() {
		return store.Generation{}, errors.New("settlement refused")
	}
	return s.Store.SettleLease(ctx, p)
}

// A lease whose release panicked is released again by the janitor, as after a store
// error: it does not stay held until the process stops.
func TestLeaseReleaseThatPanicsIsRetried(t *testing.T) {
	f := newFixture(t, 100*usd)
	ps := &panickyRelease{Store: f.s}
	f.cfg.Store = ps
	ctx := context.Background()
	h, err := f.lg.KeyLease().Admit(ctx, f.request("gen_release", 10_000_000))
	if err != nil {
		t.Fatal(err)
	}
	// A settlement that fails drops the lease with a release of its own.
	ps.failSettle.Store(true)
	ps.armed.Store(true)
	if _, err := h.Settle(ctx, f.gen("gen_release", 10_000_000)); err == nil {
		t.Fatal("the failing settlement succeeded")
	}
	ps.failSettle.Store(false)
	if ps.armed.Load() {
		t.Fatal("the lease's release was not tried")
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.balance(t).ReservedNanos != 0 || f.lg.LeaseStats().JanitorRunning {
		if time.Now().After(deadline) {
			t.Fatalf("lease not dropped: held %+v, janitor running %v", f.balance(t), f.lg.LeaseStats().JanitorRunning)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
