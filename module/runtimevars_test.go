//go:build gatewaybench

package module

import (
	"encoding/json"
	"expvar"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestSchedLatenciesPublished: /debug/vars carries the scheduling latency histogram, as
// valid JSON (the runtime's last bucket is infinite), and it counts goroutines scheduled.
func TestSchedLatenciesPublished(t *testing.T) {
	read := func() schedHistogram {
		var h schedHistogram
		readVar(t, "sched_latencies", &h)
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
// follows goroutines started and ended. Other tests' goroutines may start or end between
// two reads (a CI run once saw 30 start: 102 with 100 parked, then 32), so each read is held
// to the count the runtime gives next to it, give or take a few, never to the other read.
func TestGoroutinesPublished(t *testing.T) {
	const slack = 10
	read := func() (published, runtimes int) {
		readVar(t, "goroutines", &published)
		return published, runtime.NumGoroutine()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() { <-stop })
	}
	during, n := read()
	if during < 100 || during < n-slack || during > n+slack {
		t.Fatalf("%d goroutines published with 100 parked, the runtime counts %d", during, n)
	}
	close(stop)
	wg.Wait()
	after, n := read()
	if after < n-slack || after > n+slack {
		t.Fatalf("%d goroutines published once the 100 parked ended (%d before, the runtime counts %d)", after, during, n)
	}
}

// readVar decodes the published variable name into v, failing the test if it is missing or
// not JSON.
func readVar(t *testing.T, name string, v any) {
	t.Helper()
	ev := expvar.Get(name)
	if ev == nil {
		t.Fatalf("%s is not published", name)
	}
	if err := json.Unmarshal([]byte(ev.String()), v); err != nil {
		t.Fatalf("%s is not what it should be: %v: %.200s", name, err, ev.String())
	}
}

// TestWriterSpansPublished: /debug/vars carries the SQLite writer's recent transactions as
// pairs of Unix nanoseconds (none in a process whose store has written nothing yet is an
// empty list, not null).
func TestWriterSpansPublished(t *testing.T) {
	var spans [][2]int64
	readVar(t, "model_gateway_writer_spans", &spans)
	if spans == nil {
		t.Fatal("model_gateway_writer_spans is null, want a list")
	}
	for _, sp := range spans {
		if sp[0] > sp[1] {
			t.Fatalf("span %v ends before it starts", sp)
		}
	}
}

// TestHeapPeakPublished: with the sampler on, "heap_peak" holds the most the heap reached
// since the last read, a large buffer held for a few samples included, and a read resets
// it to the heap of the moment.
func TestHeapPeakPublished(t *testing.T) {
	startHeapSampler(time.Millisecond)
	runtime.GC()
	var idle heapPeakVar
	readVar(t, "heap_peak", &idle)
	const big = 16 << 20
	buf := make([]byte, big)
	for i := range buf {
		buf[i] = byte(i)
	}
	time.Sleep(20 * time.Millisecond) // several samples while buf is held
	runtime.KeepAlive(buf)
	buf = nil
	runtime.GC()
	var after heapPeakVar
	readVar(t, "heap_peak", &after)
	if after.Samples == 0 {
		t.Fatal("no sample taken in 20 ms at an interval of 1 ms")
	}
	if after.PeakObjectsBytes < idle.ObjectsBytes+big {
		t.Fatalf("peak %d bytes with a %d-byte buffer held over an idle heap of %d", after.PeakObjectsBytes, big, idle.ObjectsBytes)
	}
	if after.ObjectsBytes >= after.PeakObjectsBytes-big/2 {
		t.Fatalf("heap of %d bytes after the buffer was collected, peak %d", after.ObjectsBytes, after.PeakObjectsBytes)
	}
	var again heapPeakVar
	readVar(t, "heap_peak", &again)
	if again.PeakObjectsBytes >= after.PeakObjectsBytes-big/2 {
		t.Fatalf("peak %d bytes after a read, before it %d: the read did not reset it", again.PeakObjectsBytes, after.PeakObjectsBytes)
	}
}
