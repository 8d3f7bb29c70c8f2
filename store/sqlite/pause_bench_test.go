package sqlite

import (
	"context"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// BenchmarkWriterHoldsAProcessor measures what the writer's transactions do to the other
// goroutines of the process: how long a runnable goroutine waits for a processor (the Go
// scheduler's /sched/latencies), while a load of short goroutines (pairs spinning 40 µs,
// about one processor's worth) runs next to a transaction of 100 settlements every 10 ms.
// Three kinds of 10 ms cycles take turns, so that the machine's drift falls on all alike:
// no transaction, a transaction that pauses between its statements (the writer's way), and
// one that does not (64-row INSERTs, no pause: the writer before). It reports the p99 wait
// of each, and the ratio of the last two.
func BenchmarkWriterHoldsAProcessor(b *testing.B) {
	ctx := context.Background()
	s := openBenchStore(b)
	if _, err := s.Reserve(ctx, store.ReserveParams{ID: "res_lease", WorkspaceID: "ws_bench",
		AmountNanos: 100_000 * store.NanosPerUSD, ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		b.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			var pair sync.WaitGroup
			for range 2 {
				pair.Go(func() { spin(40 * time.Microsecond) })
			}
			pair.Wait()
			spin(20 * time.Microsecond)
		}
	})
	defer func() {
		close(stop)
		wg.Wait()
	}()

	sample := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	read := func() []uint64 {
		metrics.Read(sample)
		return append([]uint64(nil), sample[0].Value.Float64Histogram().Counts...)
	}
	metrics.Read(sample)
	buckets := sample[0].Value.Float64Histogram().Buckets
	const (
		none = iota
		paused
		unpaused
	)
	var waits [3][]uint64
	pauseFn := s.wr.raw.pause
	batch := make([]*writeOp, 100)
	b.ResetTimer()
	for range b.N {
		for mode := range 3 {
			now := time.Now()
			fillLeaseSettlements(ctx, batch, now)
			s.wr.raw.pause = pauseFn
			if mode == unpaused {
				s.wr.raw.pause = nil
			}
			before := read()
			if mode != none && !s.commitBatch(batch) {
				b.Fatal("the batch's transaction failed")
			}
			time.Sleep(time.Until(now.Add(10 * time.Millisecond)))
			after := read()
			if waits[mode] == nil {
				waits[mode] = make([]uint64, len(after))
			}
			for i := range after {
				waits[mode][i] += after[i] - before[i]
			}
		}
	}
	b.StopTimer()
	s.wr.raw.pause = pauseFn
	p99 := func(counts []uint64) float64 {
		var total, seen uint64
		for _, n := range counts {
			total += n
		}
		for i, n := range counts {
			if seen += n; seen >= total-total/100 {
				return buckets[i+1] * 1e6
			}
		}
		return 0
	}
	b.ReportMetric(p99(waits[none]), "wait-p99-µs-no-writer")
	b.ReportMetric(p99(waits[paused]), "wait-p99-µs-paused")
	b.ReportMetric(p99(waits[unpaused]), "wait-p99-µs-unpaused")
	b.ReportMetric(p99(waits[paused])/p99(waits[unpaused]), "paused/unpaused")
}

// spin keeps a processor busy for d.
func spin(d time.Duration) {
	for t := time.Now(); time.Since(t) < d; {
	}
}
