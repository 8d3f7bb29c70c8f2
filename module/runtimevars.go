//go:build gatewaybench

// Package-level hooks for cmd/gatewaybench, compiled in only with the gatewaybench build tag
// (its own builds of Caddy use it): production builds publish nothing of the kind.

package module

import (
	"expvar"
	"math"
	"runtime"
	"runtime/metrics"

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
