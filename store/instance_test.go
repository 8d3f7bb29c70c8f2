package store_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/background"
	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/sqlite"
)

const usd = store.NanosPerUSD

func openSQLite(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func waitUntil(t *testing.T, what string, within time.Duration, cond func() bool) time.Duration {
	t.Helper()
	began := time.Now()
	for !cond() {
		if time.Since(began) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(began)
}

func reserved(t *testing.T, s store.Store, ws string) int64 {
	t.Helper()
	b, err := s.GetBalance(context.Background(), ws)
	if err != nil {
		t.Fatal(err)
	}
	return b.ReservedNanos
}

// An instance frees the holds of a registered instance that stopped beating within its
// timeout and a heartbeat; it keeps its own; a clean stop leaves nothing held.
func TestInstanceReleasesSilentInstances(t *testing.T) {
	ctx := context.Background()
	s := openSQLite(t, filepath.Join(t.TempDir(), "gateway.db"))
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: "ws_1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddCredits(ctx, "ws_1", 100*usd, "test"); err != nil {
		t.Fatal(err)
	}
	// A registered instance that never beats again, as a process hung or cut off.
	if err := s.RegisterInstance(ctx, "inst_silent"); err != nil {
		t.Fatal(err)
	}
	var released atomic.Int64
	// Intervals wide enough that a loaded machine does not make the live instance miss its
	// own heartbeats for a timeout.
	opts := store.InstanceOptions{Heartbeat: 50 * time.Millisecond, Timeout: 600 * time.Millisecond,
		OnError:   func(err error) { t.Logf("instance: %v", err) },
		OnRelease: func(n int, why string) { released.Add(int64(n)) }}
	live := store.NewInstance(s, "inst_live", opts)
	if _, ok := live.Holds(); ok {
		t.Fatal("an instance not started holds")
	}
	began := time.Now()
	if err := live.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Stop(context.Background()) })
	if gen, ok := live.Holds(); !ok || gen != 0 {
		t.Fatalf("a started instance: generation %d, holds %v", gen, ok)
	}
	for _, owner := range []string{"inst_silent", "inst_live"} {
		if _, err := s.Reserve(ctx, store.ReserveParams{WorkspaceID: "ws_1", Owner: owner, AmountNanos: 10 * usd, ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	// The release is reported after the store call returns: wait for both.
	waitUntil(t, "the silent instance's hold released", 5*time.Second, func() bool {
		return reserved(t, s, "ws_1") == 10*usd && released.Load() > 0
	})
	if d := time.Since(began); d < 600*time.Millisecond {
		t.Fatalf("released after %v, before the instance had been silent for the timeout", d)
	}
	if released.Load() != 1 {
		t.Fatalf("%d reservations reported released, want 1", released.Load())
	}
	time.Sleep(100 * time.Millisecond)
	if got := reserved(t, s, "ws_1"); got != 10*usd {
		t.Fatalf("the live instance's own hold went: %d reserved", got)
	}
	if err := live.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if got := reserved(t, s, "ws_1"); got != 0 {
		t.Fatalf("%d reserved after a clean stop", got)
	}
	if _, ok := live.Holds(); ok {
		t.Fatal("a stopped instance holds")
	}
}

// An instance taken for dead (unregistered by another's sweep) notices at its next
// heartbeat: its generation changes and it registers again. One that cannot beat stops
// holding one heartbeat before the others may take it for dead.
func TestInstanceKnowsWhenItsHoldsAreGone(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gateway.db")
	s := openSQLite(t, path)
	opts := store.InstanceOptions{Heartbeat: 20 * time.Millisecond, Timeout: 200 * time.Millisecond}
	inst := store.NewInstance(s, "inst_1", opts)
	if err := inst.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.Stop(context.Background()) })
	// What another instance's sweep does to one it finds dead.
	if _, err := s.RetireInstance(ctx, "inst_1"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a new generation", time.Second, func() bool {
		gen, ok := inst.Holds()
		return gen == 1 && ok
	})
	if err := s.Heartbeat(ctx, "inst_1"); err != nil {
		t.Fatalf("the instance did not register again: %v", err)
	}

	other := openSQLite(t, path)
	cut := store.NewInstance(other, "inst_2", opts)
	if err := cut.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := cut.Holds(); !ok {
		t.Fatal("a started instance does not hold")
	}
	closed := time.Now()
	_ = other.Close() // every heartbeat fails from now on
	// The last heartbeat that succeeded began before the close, so others may take the
	// instance for dead from a timeout after it: by then it must hold nothing. Checked at
	// that moment rather than timed by polling, which a loaded machine delays.
	time.Sleep(opts.Timeout - time.Since(closed))
	if _, ok := cut.Holds(); ok {
		t.Fatalf("still held %v after the heartbeats stopped: others may take it for dead from %v", time.Since(closed), opts.Timeout)
	}
	_ = cut.Stop(ctx)
}

func TestValidateIntervals(t *testing.T) {
	for _, tc := range []struct {
		heartbeat, timeout time.Duration
		ok                 bool
	}{
		{0, 0, true},
		{time.Second, 2 * time.Second, true},
		{time.Second, 0, true},
		{30 * time.Second, 0, false}, // the default timeout, 45s, is not twice 30s
		{time.Second, 1500 * time.Millisecond, false},
		{-time.Second, 0, false},
	} {
		if err := store.ValidateIntervals(tc.heartbeat, tc.timeout); (err == nil) != tc.ok {
			t.Errorf("ValidateIntervals(%v, %v) = %v", tc.heartbeat, tc.timeout, err)
		}
	}
}

// panickyInstances is a backend whose first heartbeats panic.
type panickyInstances struct {
	store.Instances
	panics, beats atomic.Int32
}

func (p *panickyInstances) Heartbeat(ctx context.Context, id string) error {
	if p.panics.Add(-1) >= 0 {
		panic("heartbeat bug")
	}
	p.beats.Add(1)
	return p.Instances.Heartbeat(ctx, id)
}

// A panic in the heartbeat is reported with its stack and the heartbeat goes on: an
// instance whose heartbeat died would be taken for dead, its holds freed while it serves.
func TestInstanceHeartbeatSurvivesAPanic(t *testing.T) {
	ctx := context.Background()
	backend := &panickyInstances{Instances: openSQLite(t, filepath.Join(t.TempDir(), "gateway.db"))}
	backend.panics.Store(2)
	reported := make(chan error, 4)
	inst := store.NewInstance(backend, "inst_1", store.InstanceOptions{Heartbeat: 20 * time.Millisecond, Timeout: time.Second,
		OnError: func(err error) { reported <- err }})
	if err := inst.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.Stop(context.Background()) })
	for range 2 {
		select {
		case err := <-reported:
			p := background.AsPanic(err)
			if p == nil || p.Value != "heartbeat bug" || !strings.Contains(fmt.Sprintf("%+v", err), "panickyInstances).Heartbeat") {
				t.Fatalf("reported %+v, want the panic with its stack", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the heartbeat's panic was not reported")
		}
	}
	waitUntil(t, "the heartbeat beats again after its panics", 10*time.Second, func() bool { return backend.beats.Load() > 0 })
	if _, ok := inst.Holds(); !ok {
		t.Fatal("the instance does not hold after its heartbeat recovered")
	}
	if err := inst.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}
