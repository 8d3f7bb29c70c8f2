package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/background"
)

// Instances is the store's role for gateway processes as the owners of reservations, and
// for freeing what dead ones held: an instance registers, records heartbeats, and any
// instance releases the reservations of those that went silent (Instance runs it all).
type Instances interface {
	// RegisterInstance records the gateway instance id as alive, heartbeat now; registering
	// an instance again refreshes its heartbeat. Register before reserving with it as Owner.
	// Ids are letters, digits, _ and - (ValidateInstanceID).
	RegisterInstance(ctx context.Context, id string) error
	// Heartbeat records that instance id is still alive. ErrNotFound means the instance is
	// no longer registered: another instance found it dead and released its reservations,
	// and it must register again.
	Heartbeat(ctx context.Context, id string) error
	// ReleaseOrphaned releases the reservations of dead instances and unregisters them: of
	// every registered instance but self whose last heartbeat is older than timeout (or, on
	// a backend that can tell, whose process is gone), and of owners that are not
	// registered, for reservations older than timeout. It returns the number released.
	ReleaseOrphaned(ctx context.Context, self string, timeout time.Duration) (int, error)
	// RetireInstance releases the reservations instance id still holds and unregisters it:
	// what a clean stop leaves. It returns the number released.
	RetireInstance(ctx context.Context, id string) (int, error)
	// ReleaseExpired drops reservations whose ExpiresAt is before now (requests lost to a
	// crash, of owners no heartbeat speaks for) and returns the number released.
	ReleaseExpired(ctx context.Context, now time.Time) (int, error)
}

// ValidateInstanceID checks an instance id: letters, digits, _ and -, at most 128 bytes,
// so that a backend may name a file after it.
func ValidateInstanceID(id string) error {
	if id == "" || len(id) > 128 || strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
		return fmt.Errorf("invalid instance id %q (letters, digits, _ and -)", id)
	}
	return nil
}

// Defaults of an Instance's intervals.
const (
	// DefaultInstanceHeartbeat is how often an instance records that it is alive.
	DefaultInstanceHeartbeat = 10 * time.Second
	// DefaultInstanceTimeout is how long an instance may stay silent before any other
	// instance releases its reservations: a few heartbeats, so that a slow one is not
	// taken for dead, and short enough that a crashed instance's credit comes back within
	// about a minute.
	DefaultInstanceTimeout = 45 * time.Second
)

// expiredSweepInterval is how often an Instance also releases expired reservations
// (ReleaseExpired): those of owners that were never registered, whose ExpiresAt is all
// that frees them.
const expiredSweepInterval = time.Minute

// Instance is one gateway process as the owner of reservations: it registers in the
// store, records a heartbeat every Heartbeat, and releases the reservations of instances
// silent for longer than Timeout (ReleaseOrphaned), so that credit held by a process that
// crashed comes back within Timeout plus a heartbeat instead of at the reservations'
// expiry. Every instance sweeps: any survivor, or the same gateway restarted, frees a dead
// one's holds.
//
// Holds tells the instance's own users whether its reservations can be relied on: an
// instance that could not record a heartbeat for Timeout minus Heartbeat may be taken for
// dead by the others at any moment, and one that was (Heartbeat answered ErrNotFound) has
// lost every reservation it held then.
//
// An Instance is safe for concurrent use. Start and Stop bound its background work; the
// methods that only read (ID, Holds) work on a nil Instance, which owns nothing and is
// always trusted.
type Instance struct {
	s  Instances
	id string
	// heartbeat and timeout are time.Durations, changed by SetIntervals.
	heartbeat, timeout atomic.Int64
	// onError is told about background failures, onRelease about reservations released;
	// both may be nil.
	onError   func(error)
	onRelease func(n int, why string)
	// base anchors lastBeat to the monotonic clock.
	base time.Time
	// lastBeat is when the last heartbeat that succeeded began, in nanoseconds since base
	// (0: none yet); generation counts the times the instance found itself unregistered.
	lastBeat   atomic.Int64
	generation atomic.Uint64

	mu      sync.Mutex
	started bool
	stop    context.CancelFunc
	done    chan struct{}
}

// InstanceOptions are an Instance's settings; zero fields take the defaults.
type InstanceOptions struct {
	// Heartbeat is how often the instance records that it is alive and sweeps. Default:
	// DefaultInstanceHeartbeat.
	Heartbeat time.Duration
	// Timeout is how long an instance may stay silent before it counts as dead. At least
	// twice Heartbeat. Default: DefaultInstanceTimeout.
	Timeout time.Duration
	// OnError is told about failures of the background work, which goes on, and about a
	// panic in it (a *background.Panic, whose %+v shows its stack), after which it goes on
	// too.
	OnError func(error)
	// OnRelease is told how many reservations a sweep released, and why ("orphaned",
	// "expired", "retired").
	OnRelease func(n int, why string)
}

// NewInstance returns the instance id of store s, not yet registered: Start registers it.
func NewInstance(s Instances, id string, o InstanceOptions) *Instance {
	i := &Instance{s: s, id: id, onError: o.OnError, onRelease: o.OnRelease, base: time.Now()}
	i.SetIntervals(o.Heartbeat, o.Timeout)
	return i
}

// ValidateIntervals checks an instance's heartbeat and timeout (zero: the default).
func ValidateIntervals(heartbeat, timeout time.Duration) error {
	heartbeat, timeout = intervals(heartbeat, timeout)
	switch {
	case heartbeat < 0 || timeout < 0:
		return errors.New("negative instance interval")
	case timeout < 2*heartbeat:
		return fmt.Errorf("instance timeout %v must be at least twice the heartbeat %v, so that one late heartbeat does not make an instance dead", timeout, heartbeat)
	}
	return nil
}

func intervals(heartbeat, timeout time.Duration) (time.Duration, time.Duration) {
	if heartbeat == 0 {
		heartbeat = DefaultInstanceHeartbeat
	}
	if timeout == 0 {
		timeout = DefaultInstanceTimeout
	}
	return heartbeat, timeout
}

// SetIntervals changes the heartbeat and the timeout (zero: the default) from the next
// heartbeat on. Invalid intervals (ValidateIntervals) are ignored.
func (i *Instance) SetIntervals(heartbeat, timeout time.Duration) {
	if ValidateIntervals(heartbeat, timeout) != nil {
		return
	}
	heartbeat, timeout = intervals(heartbeat, timeout)
	i.heartbeat.Store(int64(heartbeat))
	i.timeout.Store(int64(timeout))
}

// ID is the instance's id, the Owner of its reservations; "" for a nil Instance.
func (i *Instance) ID() string {
	if i == nil {
		return ""
	}
	return i.id
}

// Holds reports whether the reservations the instance took can be relied on now, and the
// generation they belong to: false from Timeout minus Heartbeat after the start of the
// last heartbeat that succeeded (one interval before another instance may take this one
// for dead), and before the first. The generation changes whenever the instance found
// that it had been taken for dead: what it reserved before then was released.
func (i *Instance) Holds() (generation uint64, ok bool) {
	if i == nil {
		return 0, true
	}
	// beat clears the heartbeat before it counts a new generation, and records the next
	// heartbeat once registered again: the generation read before and after the heartbeat
	// is the same when that heartbeat belongs to it.
	gen := i.generation.Load()
	last := i.lastBeat.Load()
	if last == 0 || i.generation.Load() != gen {
		return i.generation.Load(), false
	}
	trust := time.Duration(i.timeout.Load() - i.heartbeat.Load())
	return gen, time.Since(i.base)-time.Duration(last) < trust
}

// Start registers the instance, releases what dead instances hold (at once: a restarted
// gateway frees its previous run's holds before it serves), and starts the heartbeat. A
// failure is reported and retried at the next heartbeat; Start returns it too. Starting
// an instance again does nothing.
func (i *Instance) Start(ctx context.Context) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.started {
		return nil
	}
	i.started = true
	err := i.beat(ctx, true)
	if err == nil {
		err = i.sweep(ctx)
	}
	i.expire(ctx)
	bg, stop := context.WithCancel(context.Background())
	i.stop, i.done = stop, make(chan struct{})
	// A panic in a heartbeat (a backend's bug) must not end the heartbeat: the others would
	// take this instance for dead and free every hold it has while it serves on. run holds
	// no lock and keeps its state in atomics, so running it again is sound.
	background.Loop{Name: "instance heartbeat", Report: i.onError, Stop: bg.Done(), Done: i.done}.Go(func() { i.run(bg) })
	return err
}

// Stop ends the heartbeat and retires the instance: the reservations it still holds are
// released and it is unregistered, within ctx.
func (i *Instance) Stop(ctx context.Context) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if !i.started {
		return nil
	}
	i.started = false
	i.stop()
	<-i.done
	i.lastBeat.Store(0)
	n, err := i.s.RetireInstance(ctx, i.id)
	if err != nil {
		return fmt.Errorf("retiring instance %q: %w", i.id, err)
	}
	i.released(n, "retired")
	return nil
}

func (i *Instance) run(ctx context.Context) {
	lastExpire := time.Now()
	t := time.NewTimer(time.Duration(i.heartbeat.Load()))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if i.beat(ctx, false) == nil {
			_ = i.sweep(ctx)
		}
		if time.Since(lastExpire) >= expiredSweepInterval {
			lastExpire = time.Now()
			i.expire(ctx)
		}
		t.Reset(time.Duration(i.heartbeat.Load()))
	}
}

// callTimeout bounds each of the background work's store calls: a heartbeat that takes
// longer than an interval has failed anyway.
func (i *Instance) callTimeout() time.Duration {
	return max(time.Duration(i.heartbeat.Load()), time.Second)
}

// beat records the heartbeat (registering the instance first when register is set, or
// again when it had been taken for dead).
func (i *Instance) beat(ctx context.Context, register bool) error {
	began := time.Since(i.base)
	cctx, cancel := context.WithTimeout(ctx, i.callTimeout())
	defer cancel()
	var err error
	if !register {
		err = i.s.Heartbeat(cctx, i.id)
		if errors.Is(err, ErrNotFound) {
			// Taken for dead: what it held is gone. Holds says so from now on, and holds
			// nothing until the instance is registered again.
			i.lastBeat.Store(0)
			i.generation.Add(1)
			i.report(fmt.Errorf("instance %q was taken for dead by another instance, which released its reservations; registering again", i.id))
			register = true
		}
	}
	if register {
		err = i.s.RegisterInstance(cctx, i.id)
	}
	if err != nil {
		if ctx.Err() == nil {
			i.report(fmt.Errorf("recording the heartbeat of instance %q: %w", i.id, err))
		}
		return err
	}
	i.lastBeat.Store(int64(max(began, 1)))
	return nil
}

func (i *Instance) sweep(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, i.callTimeout())
	defer cancel()
	n, err := i.s.ReleaseOrphaned(cctx, i.id, time.Duration(i.timeout.Load()))
	if err != nil {
		if ctx.Err() == nil {
			i.report(fmt.Errorf("releasing the reservations of dead instances: %w", err))
		}
		return err
	}
	i.released(n, "orphaned")
	return nil
}

func (i *Instance) expire(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, i.callTimeout())
	defer cancel()
	n, err := i.s.ReleaseExpired(cctx, time.Now())
	if err != nil {
		if ctx.Err() == nil {
			i.report(fmt.Errorf("releasing expired reservations: %w", err))
		}
		return
	}
	i.released(n, "expired")
}

func (i *Instance) report(err error) {
	if i.onError != nil {
		i.onError(err)
	}
}

func (i *Instance) released(n int, why string) {
	if n > 0 && i.onRelease != nil {
		i.onRelease(n, why)
	}
}
