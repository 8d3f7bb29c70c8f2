//go:build gatewaybench

// Package-level hooks for cmd/gatewaybench, compiled in only with the gatewaybench build tag
// (its own builds of Caddy use it): production builds publish nothing of the kind.

package module

import (
	"expvar"
	"math"
	"os"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store/sqlite"
)

// The process's scheduling latencies are published next to the Go runtime's memstats on
// the admin endpoint's /debug/vars, as "sched_latencies": how long goroutines waited,
// runnable, for a processor (the runtime's /sched/latencies histogram, counted since the
// process started). gatewaybench reads them before and after each slot of its latency test
// for plain Caddy and the gateway alike (the same binary): a processor held away from the
// requests, by a cgo call or the garbage collector, shows there directly, where the
// latency figures of a shared machine drown it in noise.
//
// Next to it, "goroutines": how many the process has. Each one's stack is scanned by every
// garbage collection (an idle keep-alive connection is one on the server side and two on
// the client side), so gatewaybench reports it beside the latencies. Another plugin may
// have published either name first; then it is left to that one.
func init() {
	if expvar.Get("sched_latencies") == nil {
		expvar.Publish("sched_latencies", expvar.Func(schedLatencies))
	}
	if expvar.Get("goroutines") == nil {
		expvar.Publish("goroutines", expvar.Func(func() any { return runtime.NumGoroutine() }))
	}
	// And the SQLite writer's last transactions, [start, end] in Unix ns each (see
	// sqlite.TxSpans): gatewaybench tells the requests that ran during one from the others.
	if expvar.Get("model_gateway_writer_spans") == nil {
		expvar.Publish("model_gateway_writer_spans", expvar.Func(func() any { return sqlite.TxSpans() }))
	}
	if d, err := time.ParseDuration(os.Getenv(heapSampleEnv)); err == nil && d > 0 {
		startHeapSampler(d)
	}
}

// heapSampleEnv, set to an interval ("1ms"), has the process sample the bytes of its Go
// heap's objects at that interval and publish the most it saw as "heap_peak". gatewaybench
// sets it for its transcription-heap test only: a sampler waking a thousand times a second is
// not what its latency figures should measure.
const heapSampleEnv = "GATEWAYBENCH_HEAP_SAMPLE"

// heapPeakVar is "heap_peak": the bytes of the heap's objects (live and not yet swept, the
// runtime's /memory/classes/heap/objects, memstats' HeapAlloc) now, and the most sampled
// since the last read of it (of /debug/vars, which reads every variable). A read resets the
// peak to the figure of the moment: a benchmark reads it once when idle and once after its
// load, and the second read tells the peak of the load.
type heapPeakVar struct {
	ObjectsBytes     uint64 `json:"objects_bytes"`
	PeakObjectsBytes uint64 `json:"peak_objects_bytes"`
	// Samples is how many samples were taken since the last read.
	Samples uint64 `json:"samples"`
}

var heapPeak struct {
	once    sync.Once
	peak    atomic.Uint64
	samples atomic.Uint64
}

// heapObjectsMetric is the runtime metric sampled: HeapAlloc without memstats' stop of the world.
const heapObjectsMetric = "/memory/classes/heap/objects:bytes"

// startHeapSampler samples the heap every d and publishes "heap_peak", once per process.
func startHeapSampler(d time.Duration) {
	heapPeak.once.Do(func() {
		if expvar.Get("heap_peak") != nil {
			return
		}
		// The sampler allocates nothing, so that it does not raise the figure it reads.
		go func() {
			s := []metrics.Sample{{Name: heapObjectsMetric}}
			t := time.NewTicker(d)
			for range t.C {
				metrics.Read(s)
				notePeak(s[0].Value.Uint64())
				heapPeak.samples.Add(1)
			}
		}()
		expvar.Publish("heap_peak", expvar.Func(readHeapPeak))
	})
}

// notePeak raises the peak to v.
func notePeak(v uint64) {
	for {
		p := heapPeak.peak.Load()
		if v <= p || heapPeak.peak.CompareAndSwap(p, v) {
			return
		}
	}
}

func readHeapPeak() any {
	s := []metrics.Sample{{Name: heapObjectsMetric}}
	metrics.Read(s)
	now := s[0].Value.Uint64()
	return heapPeakVar{ObjectsBytes: now, PeakObjectsBytes: max(heapPeak.peak.Swap(now), now), Samples: heapPeak.samples.Swap(0)}
}

// schedHistogram is a histogram with finite bucket bounds, so that it encodes as JSON:
// Counts[i] goroutines waited at most UpperUs[i] microseconds (and more than the bound
// before); the last bound, infinite in the runtime's histogram, is the largest float.
type schedHistogram struct {
	UpperUs []float64 `json:"upper_us"`
	Counts  []uint64  `json:"counts"`
}

func schedLatencies() any {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	h := s[0].Value.Float64Histogram()
	out := schedHistogram{UpperUs: make([]float64, len(h.Counts)), Counts: h.Counts}
	for i := range h.Counts {
		up := h.Buckets[i+1] * 1e6
		if math.IsInf(up, 1) {
			up = math.MaxFloat64
		}
		out.UpperUs[i] = up
	}
	return out
}
