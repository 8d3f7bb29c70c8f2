package batch

import "sync"

// chunksQueued tells the process's Runners that chunks were queued, so that a batch's
// first rows are not left to a Runner's idle wait. It is the process's, not a store's: a
// Runner of another store (tests run several) woken for nothing looks at its queue once.
var chunksQueued broadcast

// broadcast wakes every waiter at once: Wait's channel closes at the next Wake.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

// Wait returns a channel that closes at the next Wake.
func (b *broadcast) Wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// Wake closes the channel of every Wait so far.
func (b *broadcast) Wake() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}
