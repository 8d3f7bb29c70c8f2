package module

import (
	"context"
	"sync"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// worker is background work of the gateway (job polling, webhook deliveries): it runs once
// per process and store, from the first Start of an app on the store's handle until the
// handle ends, so that a reload, where two configurations overlap, neither stops it nor
// starts it twice. run returns when ctx ends; work that several instances share takes its
// items with the store's claims (store.Claims), which no two instances hold at once.
type worker struct {
	name string
	run  func(ctx context.Context, s store.Store, log *zap.Logger)
}

// backgroundWorkers are the workers every gateway runs. The job families add theirs here.
var backgroundWorkers []worker

// workerSet runs the workers of one store handle.
type workerSet struct {
	mu      sync.Mutex
	ctx     context.Context
	cancel  context.CancelFunc
	running map[string]bool
	wg      sync.WaitGroup
}

func newWorkerSet() *workerSet {
	ctx, cancel := context.WithCancel(context.Background())
	return &workerSet{ctx: ctx, cancel: cancel, running: map[string]bool{}}
}

// start runs w unless it runs already (or the set was stopped).
func (ws *workerSet) start(w worker, s store.Store, log *zap.Logger) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.running[w.name] || ws.ctx.Err() != nil {
		return
	}
	ws.running[w.name] = true
	ws.wg.Add(1)
	go func() {
		defer ws.wg.Done()
		w.run(ws.ctx, s, log.With(zap.String("worker", w.name)))
	}()
}

// stop ends every worker and waits for them, or for ctx.
func (ws *workerSet) stop(ctx context.Context) error {
	ws.cancel()
	done := make(chan struct{})
	go func() {
		ws.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
