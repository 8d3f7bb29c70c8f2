package bufs

import "sync"

// Pool reuses byte buffers across requests: what a request builds and drops once the
// client has it. Every KiB a request allocates brings the next garbage collection closer;
// the collections were most of the gateway's p99 over plain Caddy (gatewaybench with
// GOGC=400 against the default, in one run).
type Pool struct {
	pool sync.Pool
	// Size is a new buffer's capacity; a buffer grown past Max is left to the collector
	// rather than held for the small ones.
	Size, Max int
}

// Get returns an empty buffer with room for at least Size bytes.
func (p *Pool) Get() *[]byte {
	if b, ok := p.pool.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, p.Size)
	return &b
}

// Put returns b, whose contents used now holds (it may have grown; nil when nothing was
// built in it), to the pool. Nothing may hold used or a slice of it afterwards.
func (p *Pool) Put(b *[]byte, used []byte) {
	if used == nil {
		used = *b
	}
	if cap(used) > p.Max {
		return
	}
	*b = used[:0]
	p.pool.Put(b)
}
