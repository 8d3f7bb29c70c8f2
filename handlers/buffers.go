package handlers

import "sync"

// bufPool reuses byte buffers across requests: what a request builds and drops once the
// client has it. Every KiB a request allocates brings the next garbage collection closer;
// the collections were most of the gateway's p99 over plain Caddy (gatewaybench with
// GOGC=400 against the default, in one run).
type bufPool struct {
	pool sync.Pool
	// size is a new buffer's capacity; a buffer grown past max is left to the collector
	// rather than held for the small ones.
	size, max int
}

func (p *bufPool) get() *[]byte {
	if b, ok := p.pool.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, p.size)
	return &b
}

// put returns b, whose contents used now holds (it may have grown; nil when nothing was
// built in it), to the pool. Nothing may hold used or a slice of it afterwards.
func (p *bufPool) put(b *[]byte, used []byte) {
	if used == nil {
		used = *b
	}
	if cap(used) > p.max {
		return
	}
	*b = used[:0]
	p.pool.Put(b)
}

// answerBufs hold what a complete answer is read into and built in: the upstream's answer,
// the encoded and the decorated answer.
var answerBufs = &bufPool{size: 4096, max: 64 << 10}

// decorationBufs hold the values decoration sets in an answer (costed usage, id, meta), a
// few hundred bytes. A pool of their own: sharing answerBufs, their small buffers would
// take the place of answers' large ones (and, under the race detector's pool drops, make
// answers' buffers grow again: TestForwardedAnswerBytesDoNotGrowWithIt).
var decorationBufs = &bufPool{size: 1024, max: 16 << 10}
