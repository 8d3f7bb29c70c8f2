package handlers

import "sync"

// answerBufs hold what a complete answer is built in and read from: the upstream's answer
// as read and the decorated answer written to the client. Both are garbage the moment the
// client has the answer, and every KiB a request allocates brings the next garbage
// collection closer; the collections were most of the gateway's p99 over plain Caddy
// (gatewaybench with GOGC=400 against the default, in one run).
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// maxPooledAnswer bounds the buffers kept: a rare large answer is left to the collector
// rather than held for the small ones.
const maxPooledAnswer = 64 << 10

func getAnswerBuf() *[]byte { return answerBufs.Get().(*[]byte) }

// putAnswerBuf returns b, whose contents used now holds (it may have grown), to the pool.
// Nothing may hold used or a slice of it afterwards.
func putAnswerBuf(b *[]byte, used []byte) {
	if used == nil {
		used = *b // nothing was built in it
	}
	if cap(used) > maxPooledAnswer {
		return
	}
	*b = used[:0]
	answerBufs.Put(b)
}

// decorationBufs hold the values decoration sets in an answer (costed usage, id, meta), a
// few hundred bytes, garbage once copied in. A pool of their own: sharing answerBufs, their
// small buffers would take the place of answers' large ones (and under the race detector's
// pool drops, make answers' buffers grow again).
var decorationBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func getDecorationBuf() *[]byte { return decorationBufs.Get().(*[]byte) }

// putDecorationBuf returns b, whose contents used now holds, to the pool; a rare large one
// (a long meta) is left to the collector.
func putDecorationBuf(b *[]byte, used []byte) {
	if used == nil {
		used = *b
	}
	if cap(used) > 16<<10 {
		return
	}
	*b = used[:0]
	decorationBufs.Put(b)
}
