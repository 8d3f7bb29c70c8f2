//go:build gatewaybench

package sqlite

import (
	"sync"
	"time"
)

// The writer's recent transactions, when each began and ended, for every store of the
// process. gatewaybench reads them (the module publishes them on the admin endpoint's
// /debug/vars) to tell which requests of its latency test ran while a transaction held a
// core: the requests slowed by the writer, next to those slowed by a garbage collection.

// txSpanCount is how many transactions are kept: 25 s of them at the gathering's pace.
const txSpanCount = 256

var txSpans struct {
	mu   sync.Mutex
	ring [txSpanCount][2]int64
	n    uint64 // transactions recorded
}

// recordTxSpan notes a transaction from start to end.
func recordTxSpan(start, end time.Time) {
	txSpans.mu.Lock()
	txSpans.ring[txSpans.n%txSpanCount] = [2]int64{start.UnixNano(), end.UnixNano()}
	txSpans.n++
	txSpans.mu.Unlock()
}

// TxSpans returns the last transactions of the process's SQLite writers, in the order they
// ended (roughly: each is noted as it ends), each its start and end in Unix nanoseconds.
func TxSpans() [][2]int64 {
	txSpans.mu.Lock()
	defer txSpans.mu.Unlock()
	n := min(txSpans.n, txSpanCount)
	out := make([][2]int64, 0, n)
	for i := txSpans.n - n; i < txSpans.n; i++ {
		out = append(out, txSpans.ring[i%txSpanCount])
	}
	return out
}
