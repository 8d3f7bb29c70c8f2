package module

import (
	"encoding/json"
	"expvar"
	"runtime"
	"sync"
	"testing"
)

// TestSchedLatenciesPublished: /debug/vars carries the scheduling latency histogram, as
// valid JSON (the runtime's last bucket is infinite), and it counts goroutines scheduled.
func TestSchedLatenciesPublished(t *testing.T) {
	read := func() schedHistogram {
		v := expvar.Get("sched_latencies")
		if v == nil {
			t.Fatal("sched_latencies is not published")
		}
		var h schedHistogram
		if err := json.Unmarshal([]byte(v.String()), &h); err != nil {
			t.Fatalf("sched_latencies is not JSON: %v: %.200s", err, v.String())
		}
		if len(h.UpperUs) == 0 || len(h.UpperUs) != len(h.Counts) {
			t.Fatalf("%d bounds for %d counts", len(h.UpperUs), len(h.Counts))
		}
		for i := 1; i < len(h.UpperUs); i++ {
			if h.UpperUs[i] <= h.UpperUs[i-1] {
				t.Fatalf("bounds not increasing at %d: %v, %v", i, h.UpperUs[i-1], h.UpperUs[i])
			}
		}
		return h
	}
	total := func(h schedHistogram) (n uint64) {
		for _, c := range h.Counts {
			n += c
		}
		return n
	}
	before := total(read())
	var wg sync.WaitGroup
	for range 1000 {
		wg.Go(runtime.Gosched)
	}
	wg.Wait()
	// The runtime samples the waits it records (about one in eight here).
	if after := total(read()); after < before+50 {
		t.Fatalf("%d waits recorded for 2,000 goroutine schedulings between the reads, want at least 50", after-before)
	}
}

// TestGoroutinesPublished: /debug/vars carries the process's goroutine count, and it
// follows goroutines started and ended.
func TestGoroutinesPublished(t *testing.T) {
	read := func() int {
		v := expvar.Get("goroutines")
		if v == nil {
			t.Fatal("goroutines is not published")
		}
		var n int
		if err := json.Unmarshal([]byte(v.String()), &n); err != nil {
			t.Fatalf("goroutines is not a number: %v: %q", err, v.String())
		}
		return n
	}
	before := read()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() { <-stop })
	}
	if during := read(); during < before+100 {
		t.Fatalf("%d goroutines with 100 more parked, %d before", during, before)
	}
	close(stop)
	wg.Wait()
}
