// Package workers runs the gateway's background workers (job polling, webhook deliveries,
// batch rows): work that outlives any request and any one configuration.
//
// A Pool belongs to one store handle, which Caddy keeps across reloads: its workers start
// with the first configuration started on the handle and run, once each, until the handle
// ends, however many configurations overlap meanwhile. A worker that returns an error or
// panics runs again after a capped, jittered backoff; a panic is logged with its stack.
//
// A worker reads the configuration it works with from its Runtime at each step
// (Runtime.Current): the newest started one. Caddy starts a new configuration before it
// stops the old one, so Current moves to the new one as it starts, and never back to one
// that stopped. The configuration's type is the Pool's parameter C, chosen by whoever wires
// the pool (the Caddy module): this package needs neither net/http nor the handlers, so it
// can run under anything that has a store.
package workers

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/internal/background"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Worker is one background worker. Run works until ctx ends (the store handle's end) and
// then returns; work that several instances share takes its items with the store's claims
// (store.Claims), which no two instances hold at once. An error or a panic runs it again
// after a backoff; returning nil before ctx ended means it has nothing more to do, and it
// is not run again on this handle.
type Worker[C any] struct {
	Name string
	Run  func(ctx context.Context, rt Runtime[C]) error
}

// Runtime is what a worker works with.
type Runtime[C any] interface {
	// Store is the store handle the worker runs on.
	Store() store.Store
	// Current is the newest started configuration. Read it again for each piece of work:
	// a reload replaces it.
	Current() C
	// Logger is the current configuration's logger, naming the worker.
	Logger() *zap.Logger
}

// Options are a Pool's settings; zero fields take the defaults.
type Options struct {
	// Backoff spaces the runs of a worker that keeps failing. Default: DefaultBackoff.
	Backoff background.Backoff
}

// DefaultBackoff spaces a failing worker's runs: it fails fast when the store or an
// upstream is away, and a minute is as long as a job may wait for a poll it was due.
var DefaultBackoff = background.Backoff{Min: time.Second, Max: time.Minute}

// Pool runs the workers of one store handle and tracks its started configurations.
type Pool[C any] struct {
	store   store.Store
	backoff background.Backoff
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu      sync.Mutex
	running map[string]bool
	// started are the configurations started and not yet stopped, oldest first; newest is
	// the last one started, kept when every configuration has stopped (until the handle
	// ends) so that a worker finishing its step still has one.
	started []*config[C]
	newest  *config[C]
}

type config[C any] struct {
	c   C
	log *zap.Logger
}

// NewPool returns the pool of store s, with no configuration and no worker yet.
func NewPool[C any](s store.Store, o Options) *Pool[C] {
	if o.Backoff.Max == 0 {
		o.Backoff = DefaultBackoff
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Pool[C]{store: s, backoff: o.Backoff, ctx: ctx, cancel: cancel, running: map[string]bool{}}
}

// Started makes c, whose logger is log, the current configuration, and returns the
// function that records it stopped: Current then goes to the newest configuration still
// started, never to one that stopped (a new configuration that fails to start after this
// one leaves the old one current).
func (p *Pool[C]) Started(c C, log *zap.Logger) (stopped func()) {
	if log == nil {
		log = zap.NewNop()
	}
	cfg := &config[C]{c: c, log: log}
	p.mu.Lock()
	p.started = append(p.started, cfg)
	p.newest = cfg
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			for i, s := range p.started {
				if s == cfg {
					p.started = append(p.started[:i], p.started[i+1:]...)
					break
				}
			}
			if n := len(p.started); n > 0 {
				p.newest = p.started[n-1]
			}
		})
	}
}

func (p *Pool[C]) current() *config[C] {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.newest
}

// Current is the newest started configuration; C's zero value before the first.
func (p *Pool[C]) Current() C {
	if cfg := p.current(); cfg != nil {
		return cfg.c
	}
	var zero C
	return zero
}

// Logger is the current configuration's logger; a no-op one before the first.
func (p *Pool[C]) Logger() *zap.Logger {
	if cfg := p.current(); cfg != nil {
		return cfg.log
	}
	return zap.NewNop()
}

// Run starts each of ws that has not run on this handle yet, unless the pool is closed.
// Start a configuration (Started) first: a worker reads it at once.
func (p *Pool[C]) Run(ws ...Worker[C]) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil {
		return
	}
	for _, w := range ws {
		if p.running[w.Name] {
			continue
		}
		p.running[w.Name] = true
		p.wg.Add(1)
		go p.supervise(w)
	}
}

// Close ends every worker and waits for them to return, or for ctx.
func (p *Pool[C]) Close(ctx context.Context) error {
	p.mu.Lock()
	p.cancel()
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// supervise runs w until the pool closes, again after each failure.
func (p *Pool[C]) supervise(w Worker[C]) {
	defer p.wg.Done()
	rt := runtime[C]{p: p, name: w.Name}
	var failures int
	for {
		began := time.Now()
		var err error
		if pn := background.Call("worker "+w.Name, func() { err = w.Run(p.ctx, rt) }); pn != nil {
			err = pn
		}
		if p.ctx.Err() != nil {
			return
		}
		log := rt.Logger()
		if err == nil {
			log.Info("background worker finished")
			return
		}
		if time.Since(began) > p.backoff.Max {
			// It worked for a while: this failure is not one of a series.
			failures = 0
		}
		delay := p.backoff.Delay(failures)
		failures++
		if pn := background.AsPanic(err); pn != nil {
			log.Error("background worker panicked; restarting", zap.Any("panic", pn.Value), zap.ByteString("stack", pn.Stack), zap.Duration("retry_in", delay))
		} else {
			log.Error("background worker failed; restarting", zap.Error(err), zap.Duration("retry_in", delay))
		}
		if !background.Sleep(delay, p.ctx.Done()) {
			return
		}
	}
}

// runtime is a worker's view of its pool.
type runtime[C any] struct {
	p    *Pool[C]
	name string
}

func (r runtime[C]) Store() store.Store  { return r.p.store }
func (r runtime[C]) Current() C          { return r.p.Current() }
func (r runtime[C]) Logger() *zap.Logger { return r.p.Logger().With(zap.String("worker", r.name)) }
