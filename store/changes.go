package store

import (
	"context"
	"sync"
)

// ChangeBuffer is how many changes a watcher of the change feed may fall behind before it
// loses its oldest.
const ChangeBuffer = 256

// ChangeHub fans job changes out to the watchers of one store (Jobs.Watch): the whole feed
// on SQLite, and on PostgreSQL the in-process half of it, fed by the listening
// connection. Publish never waits for a watcher: a watcher whose buffer (ChangeBuffer) is
// full loses its oldest change to make room for the newest, which is the one that tells
// where a job stands. The zero ChangeHub is ready to use.
type ChangeHub struct {
	mu       sync.Mutex
	closed   bool
	watchers map[*watcher]struct{}
}

type watcher struct {
	ch chan JobChange
}

// Watch adds a watcher until ctx ends or the hub closes, when its channel is closed.
func (h *ChangeHub) Watch(ctx context.Context) (<-chan JobChange, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	if h.watchers == nil {
		h.watchers = map[*watcher]struct{}{}
	}
	w := &watcher{ch: make(chan JobChange, ChangeBuffer)}
	h.watchers[w] = struct{}{}
	context.AfterFunc(ctx, func() { h.drop(w) })
	return w.ch, nil
}

func (h *ChangeHub) drop(w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.watchers[w]; ok {
		delete(h.watchers, w)
		close(w.ch)
	}
}

// Publish hands c to every watcher, without waiting for any.
func (h *ChangeHub) Publish(c JobChange) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.watchers {
		for {
			select {
			case w.ch <- c:
			default:
				// Full: the oldest goes (unless the watcher just took it), and we try again.
				select {
				case <-w.ch:
				default:
				}
				continue
			}
			break
		}
	}
}

// Close closes every watcher's channel; later Watches fail with ErrClosed.
func (h *ChangeHub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for w := range h.watchers {
		close(w.ch)
	}
	h.watchers = nil
}
