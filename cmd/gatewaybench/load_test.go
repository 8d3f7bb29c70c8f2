package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestMemOf reads the runtime counters from an admin endpoint's /debug/vars, and reports
// failure for a proxy without one, an error status or a body without memstats.
func TestMemOf(t *testing.T) {
	body := `{"cmdline":["caddy"],"memstats":{"Alloc":1,"TotalAlloc":123456,"Mallocs":9,"NumGC":42,"PauseNs":[0,1]}}`
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/vars" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	_, portText, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(portText)
	ctx := context.Background()

	m, ok := memOf(ctx, &child{admin: port})
	if !ok || m.TotalAlloc != 123456 || m.NumGC != 42 {
		t.Fatalf("memOf = %+v, %v", m, ok)
	}
	if _, ok := memOf(ctx, &child{}); ok {
		t.Fatal("a proxy without an admin endpoint has counters")
	}
	if _, ok := memOf(ctx, nil); ok {
		t.Fatal("no proxy (direct) has counters")
	}
	body = `{"cmdline":["caddy"]}`
	if _, ok := memOf(ctx, &child{admin: port}); ok {
		t.Fatal("counters read from a body without memstats")
	}
	body, status = `{"memstats":{"TotalAlloc":1}}`, http.StatusInternalServerError
	if _, ok := memOf(ctx, &child{admin: port}); ok {
		t.Fatal("counters read from an error answer")
	}
}

// TestStreamLoad checks how the streaming test opens streams against the fake upstream:
// paced, one every period, so that no two arrive together; back to back, in bursts of conc
// that stay in step. Both record every stream's chunks.
func TestStreamLoad(t *testing.T) {
	d := directive{n: 4, interval: 10 * time.Millisecond, latency: 2 * time.Millisecond}
	paced := streamLoad{conc: 8}
	if got, want := paced.period(d), 4*time.Millisecond; got != want {
		t.Fatalf("period = %v, want %v (32 ms streams, 8 open on average)", got, want)
	}
	if got := (streamLoad{conc: 1 << 30}).period(directive{}); got != time.Microsecond {
		t.Fatalf("period of instant streams = %v, want the 1 µs floor", got)
	}

	u := &fakeUpstream{holds: map[string]chan struct{}{}}
	var mu sync.Mutex
	var arrivals []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
		u.serve("chat")(w, r)
	}))
	defer srv.Close()
	a := &arm{name: "direct", kind: kindDirect, url: srv.URL, model: "m", client: newClient()}

	// taken returns the arrivals so far, in order, and forgets them; close is the share of
	// arrivals less than 1 ms after the one before.
	taken := func() []time.Time {
		mu.Lock()
		defer mu.Unlock()
		out := arrivals
		arrivals = nil
		slices.SortFunc(out, func(x, y time.Time) int { return x.Compare(y) })
		return out
	}
	closeShare := func(ts []time.Time) float64 {
		n := 0
		for i := 1; i < len(ts); i++ {
			if ts[i].Sub(ts[i-1]) < time.Millisecond {
				n++
			}
		}
		return float64(n) / float64(max(len(ts)-1, 1))
	}

	// The streams' timing is checked on a shared machine (tryTiming): a busy moment can
	// bunch a few arrivals, delay a chunk on loopback or put a worker a stream behind, where
	// a broken pacer does so every time.
	pacedRun := func() (fatal string, errs []string) {
		s := new(streamSamples)
		s.sample(context.Background(), a, paced, 200*time.Millisecond, d)
		r := s.result()
		got := taken()
		if r.Errors != 0 || r.Streams != int64(len(got)) || r.Streams < 40 || r.Streams > 50 {
			return fmt.Sprintf("paced: %d streams, %d arrivals, %d errors (%s); want 50 opened, one every 4 ms", r.Streams, len(got), r.Errors, r.FirstError), nil
		}
		if c := closeShare(got); c > 0.2 {
			errs = append(errs, fmt.Sprintf("paced: %.0f%% of the streams arrived within 1 ms of the one before; they are due 4 ms apart", 100*c))
		}
		// Every chunk carries the upstream's stamp: its pacing (10 ms, a timer's lateness on
		// top) and each chunk's way over loopback, which cannot be negative nor take long.
		if g := float64(r.UpstreamGapP50Us); g < 10000 || g > 30000 {
			errs = append(errs, fmt.Sprintf("paced: upstream gap p50 %.0f µs, want about 10 ms", g))
		}
		if p50, p99 := float64(r.RelayP50Us), float64(r.RelayP99Us); !(p50 >= 0 && p50 <= p99 && p99 < 50000) {
			errs = append(errs, fmt.Sprintf("paced: relay p50 %.0f µs, p99 %.0f µs; want 0 <= p50 <= p99 < 50 ms", p50, p99))
		}
		if n := len(s.relays.all); n != 4*int(r.Streams) || len(r.relaySlots) != 1 || len(r.relaySlots[0]) != n {
			errs = append(errs, fmt.Sprintf("paced: %d relay samples of %d streams of 4 chunks, slots %d", n, r.Streams, len(r.relaySlots)))
		}
		if n := len(r.transitSlots[0]); n != 3*int(r.Streams) || len(r.upGapSlots[0]) != n {
			errs = append(errs, fmt.Sprintf("paced: %d transit gaps of %d streams of 4 chunks", n, r.Streams))
		}
		if g := float64(r.TransitGapP99Us); !(g > -10000 && g < 10000) {
			errs = append(errs, fmt.Sprintf("paced: the way over loopback added %.0f µs to a gap at p99", g))
		}
		if a := float64(r.AllocPerStreamKiB); !math.IsNaN(a) {
			errs = append(errs, fmt.Sprintf("paced: %.1f KiB allocated per stream by no proxy at all", a))
		}
		return "", errs
	}
	tryTiming(t, "paced", pacedRun)
	var counted streamSamples
	counted.count.Store(4)
	counted.alloc = 40 << 10
	if a := float64(counted.result().AllocPerStreamKiB); a != 10 {
		t.Errorf("40 KiB over 4 streams: %.1f KiB per stream", a)
	}
	counted.allocMissed = true
	if a := float64(counted.result().AllocPerStreamKiB); !math.IsNaN(a) {
		t.Errorf("a slot's counters unread, yet %.1f KiB per stream", a)
	}

	tryTiming(t, "back to back", func() (fatal string, errs []string) {
		var b streamSamples
		b.sample(context.Background(), a, streamLoad{conc: 8, backToBack: true}, 100*time.Millisecond, d)
		r := b.result()
		got := taken()
		if r.Errors != 0 || r.Streams != int64(len(got)) {
			return fmt.Sprintf("back to back: %d streams, %d arrivals, %d errors (%s)", r.Streams, len(got), r.Errors, r.FirstError), nil
		}
		if r.Streams%8 != 0 || r.Streams < 16 {
			errs = append(errs, fmt.Sprintf("back to back: %d streams, %d arrivals, %d errors (%s); want whole bursts of 8", r.Streams, len(got), r.Errors, r.FirstError))
		}
		if c := closeShare(got); c < 0.5 {
			errs = append(errs, fmt.Sprintf("back to back: only %.0f%% of the streams arrived within 1 ms of the one before; 8 workers open them in step", 100*c))
		}
		if g := float64(r.GapP50Us); g < 5000 || g > 50000 {
			errs = append(errs, fmt.Sprintf("back to back: gap p50 %.0f µs, want about 10 ms", g))
		}
		return "", errs
	})
}

// tryTiming runs a load test's run up to three times while its timing checks fail (errs),
// and fails t with the last run's; a fatal answer (errors, lost streams) fails t at once. A
// busy shared host (7-30% of the CPU stolen) failed such checks now and then under -race,
// where what they catch fails them every time.
func tryTiming(t *testing.T, name string, run func() (fatal string, errs []string)) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		fatal, errs := run()
		if fatal != "" {
			t.Fatal(fatal)
		}
		if len(errs) == 0 {
			return
		}
		if attempt == 3 {
			for _, e := range errs {
				t.Error(e)
			}
			return
		}
		t.Logf("%s, attempt %d: %s; trying again", name, attempt, strings.Join(errs, "; "))
	}
}

// TestSchedule: ticks every period from start, none at or after end, each not before its
// time, and late ones at once rather than skipped; a cancelled context stops it.
func TestSchedule(t *testing.T) {
	start := time.Now().Add(-25 * time.Millisecond) // the first three ticks are already late
	end := start.Add(60 * time.Millisecond)
	var got []time.Time
	for at := range schedule(context.Background(), start, end, 10*time.Millisecond) {
		if now := time.Now(); now.Before(at) {
			t.Fatalf("tick %v came %v early", at.Sub(start), at.Sub(now))
		}
		got = append(got, at)
	}
	if len(got) != 6 || !got[0].Equal(start) || !got[5].Equal(start.Add(50*time.Millisecond)) {
		t.Fatalf("%d ticks, first %v, last %v after start", len(got), got[0].Sub(start), got[len(got)-1].Sub(start))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range schedule(ctx, time.Now(), time.Now().Add(time.Hour), time.Millisecond) {
		t.Fatal("a tick after the context ended")
	}
}

// TestStamps: a stamp written into a rendered chunk is read back from the text a proxy
// passes on, in either wire format; a piece without one, or with a zero or broken one, has
// none.
func TestStamps(t *testing.T) {
	u := &fakeUpstream{holds: map[string]chan struct{}{}}
	when := time.Unix(1795000000, 123456789)
	for _, format := range []string{"chat", "messages"} {
		r := u.frames(answerKey{format: format, stream: true, n: 3})
		var stamped int
		for i, f := range r.frames {
			at := r.stampAt[i]
			if at < 0 {
				if _, ok := readStamp(f); ok {
					t.Errorf("%s frame %d: a stamp read from a frame without one: %s", format, i, f)
				}
				continue
			}
			stamped++
			if _, ok := readStamp(f); ok {
				t.Errorf("%s frame %d: the rendered frame's zero stamp read as a time", format, i)
			}
			b := slices.Clone(f)
			putStamp(b[at:], when)
			got, ok := readStamp(b)
			if !ok || !got.Equal(when) {
				t.Errorf("%s frame %d: read %v, %v from %s; want %v", format, i, got, ok, b, when)
			}
		}
		if stamped != 3 {
			t.Errorf("%s: %d stamped frames, want one per content chunk (3)", format, stamped)
		}
		plain := u.frames(answerKey{format: format, n: 3})
		b := plain.frames[0]
		if _, ok := readStamp(b); ok {
			t.Errorf("%s: a content stamp read from a non-streamed answer: %s", format, b)
		}
		if _, ok := readTagged(b, recvTag); ok {
			t.Errorf("%s: the rendered answer's zero stamp read as a time: %s", format, b)
		}
		b = slices.Clone(b)
		putStamp(b[plain.recvAt:], when)
		putStamp(b[plain.writeAt:], when.Add(time.Millisecond))
		if !json.Valid(b) {
			t.Errorf("%s: the stamped answer is not JSON: %s", format, b)
		}
		if got, ok := readTagged(b, recvTag); !ok || !got.Equal(when) {
			t.Errorf("%s: receipt stamp %v, %v; want %v", format, got, ok, when)
		}
		if got, ok := readTagged(b, writeTag); !ok || !got.Equal(when.Add(time.Millisecond)) {
			t.Errorf("%s: write stamp %v, %v; want %v", format, got, ok, when.Add(time.Millisecond))
		}
	}
	// As the gateway passes a piece on in the other format.
	if got, ok := readStamp([]byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"~t12@1795000000123456789 "}}`)); !ok || !got.Equal(when) {
		t.Errorf("translated: read %v, %v", got, ok)
	}
	for _, bad := range []string{`"~t1 "`, `"~t1 ~r@1795000000123456789 "`, `"~t@1795000000123456789 "`, `"~t1@00000000000000000000 "`, `"~t1@17950000001234 "`, `"~t1@179500000012345678x "`} {
		if got, ok := readStamp([]byte(bad)); ok {
			t.Errorf("readStamp(%s) = %v, want none", bad, got)
		}
	}
}

// TestFixedRateSlots: each measured slot of the fixed-rate test keeps its own samples, in
// order, the warm-up none, and together they are all the arm's samples.
func TestFixedRateSlots(t *testing.T) {
	u := &fakeUpstream{holds: map[string]chan struct{}{}}
	srv := httptest.NewServer(u.serve("chat"))
	defer srv.Close()
	a := &arm{name: "direct", kind: kindDirect, url: srv.URL, model: "m", client: newClient()}
	body := a.body(false, directive{n: 2})

	var s latSamples
	s.sample(context.Background(), a, 200, 50*time.Millisecond, 100*time.Millisecond, body)
	s.sample(context.Background(), a, 200, 0, 100*time.Millisecond, body)
	r := s.result()
	if r.Errors != 0 || len(r.slots) != 2 {
		t.Fatalf("%d slots, %d errors (%s); want 2 slots", len(r.slots), r.Errors, r.FirstError)
	}
	total := 0
	for i, slot := range r.slots {
		if len(slot) < 10 || len(slot) > 21 {
			t.Errorf("slot %d holds %d samples; 100 ms at 200 a second is 20", i, len(slot))
		}
		total += len(slot)
	}
	if total != len(s.lat.all) || int64(total) != r.Sent {
		t.Errorf("slots hold %d samples, the arm %d, sent %d", total, len(s.lat.all), r.Sent)
	}
	// The split: a pair of samples for every latency, each part within it.
	if len(s.to.all) != total || len(s.from.all) != total || len(r.toSlots) != 2 || len(r.fromSlots) != 2 {
		t.Fatalf("split: %d and %d samples in %d and %d slots; want %d in 2", len(s.to.all), len(s.from.all), len(r.toSlots), len(r.fromSlots), total)
	}
	// Per request, there and back add up to the latency less the upstream's own time, so
	// their means do too.
	mean := func(xs []float64) float64 {
		var sum float64
		for _, x := range xs {
			sum += x
		}
		return sum / float64(len(xs))
	}
	to, from, lat := mean(s.to.all), mean(s.from.all), mean(s.lat.all)
	if to <= 0 || from <= 0 || to+from > lat {
		t.Errorf("split: %.0f µs there and %.0f back on average, of a latency of %.0f µs", to, from, lat)
	}
}

// countingClient is a benchmark client that counts the connections it dials.
func countingClient(dials *atomic.Int64) *http.Client {
	c := newClient()
	tr := c.Transport.(*http.Transport)
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return dial(ctx, network, addr)
	}
	return c
}

// TestQuiesce: quiesce closes the load generator's idle connections to a proxy and makes
// the fake upstream close the proxy's idle connections to it, so that each side dials
// anew; connections stay reused without it.
func TestQuiesce(t *testing.T) {
	up := httptest.NewUnstartedServer(nil)
	up.Config = newUpstreamServer(&fakeUpstream{holds: map[string]chan struct{}{}})
	// quiesce closes the upstream's idle connections only, and the server marks one idle a
	// moment after its answer has left: the test waits for that before quiescing.
	var mu sync.Mutex
	states := map[net.Conn]http.ConnState{}
	up.Config.ConnState = func(c net.Conn, st http.ConnState) {
		mu.Lock()
		states[c] = st
		mu.Unlock()
	}
	upIdle := func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, st := range states {
			switch st {
			case http.StateIdle:
				n++
			case http.StateNew, http.StateActive:
				return false
			}
		}
		return n > 0
	}
	up.Start()
	defer up.Close()
	// The "proxy": forwards each request to the upstream on a keep-alive client of its own.
	var upDials, proxyDials atomic.Int64
	proxyClient := countingClient(&upDials)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := proxyClient.Get(up.URL + "/bench/ping")
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}))
	defer proxy.Close()
	a := &arm{name: "caddy", url: proxy.URL, client: countingClient(&proxyDials)}
	b := &bench{arms: []*arm{a}, upstreamURL: up.URL}
	get := func() {
		t.Helper()
		resp, err := a.client.Get(proxy.URL)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	get()
	get()
	if proxyDials.Load() != 1 || upDials.Load() != 1 {
		t.Fatalf("dials before quiesce: %d to the proxy, %d to the upstream; want 1 and 1", proxyDials.Load(), upDials.Load())
	}
	for deadline := time.Now().Add(5 * time.Second); !upIdle(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the proxy's connection to the upstream never became idle")
		}
	}
	b.quiesce(context.Background())
	get()
	if proxyDials.Load() != 2 || upDials.Load() != 2 {
		t.Fatalf("dials after quiesce: %d to the proxy, %d to the upstream; want 2 and 2", proxyDials.Load(), upDials.Load())
	}
}

// TestGCOverlap: the collections between two reads are the ones numbered after the first
// read's count, found in the ring of 256 ends; a request overlaps one that ends during it
// or within gcWindow after it.
func TestGCOverlap(t *testing.T) {
	ring := make([]uint64, 256)
	for k := uint32(250); k <= 262; k++ {
		ring[(k+255)%256] = uint64(k) * 1e9
	}
	ends, ok := gcEnds(goMem{NumGC: 257}, goMem{NumGC: 260, PauseEnd: ring})
	if !ok || !slices.Equal(ends, []int64{258e9, 259e9, 260e9}) {
		t.Fatalf("ends %v, %v; want 258, 259 and 260 s", ends, ok)
	}
	if ends, ok := gcEnds(goMem{NumGC: 7}, goMem{NumGC: 7, PauseEnd: ring}); !ok || len(ends) != 0 {
		t.Fatalf("no collection between the reads: %v, %v", ends, ok)
	}
	for _, m := range []struct{ m0, m1 goMem }{
		{goMem{NumGC: 1}, goMem{NumGC: 258, PauseEnd: ring}}, // more than the ring holds
		{goMem{NumGC: 9}, goMem{NumGC: 8, PauseEnd: ring}},   // another process
		{goMem{NumGC: 1}, goMem{NumGC: 2}},                   // no ring
	} {
		if _, ok := gcEnds(m.m0, m.m1); ok {
			t.Errorf("gcEnds(%d, %d) told ends it cannot know", m.m0.NumGC, m.m1.NumGC)
		}
	}
	w := int64(gcWindow)
	e := []int64{100 * w}
	for _, c := range []struct {
		t0, t1 int64
		want   bool
	}{
		{99 * w, 101 * w, true},        // the collection ended during the request
		{98 * w, 99 * w, true},         // it ended within gcWindow after
		{98 * w, 99*w - 1, false},      // more than gcWindow after
		{100 * w, 100*w + 5, true},     // it ended as the request started
		{100*w + 1, 100*w + 9, false},  // before the request
		{-w, w, false},                 // far from it
		{50 * w, 200 * w, true},        // the request spans it
		{100*w - w, 100*w - w/2, true}, // in the window
		{100*w - 3*w, 100*w - 2*w, false},
	} {
		if got := overlapsGC(c.t0, c.t1, e); got != c.want {
			t.Errorf("overlapsGC(%d, %d) = %v, want %v", c.t0, c.t1, got, c.want)
		}
	}
}

// TestOverlapsSpan: a request overlaps a writer transaction that began or ended during it,
// or spans it, and no other.
func TestOverlapsSpan(t *testing.T) {
	txs := [][2]int64{{100, 200}, {500, 510}}
	for _, c := range []struct {
		t0, t1 int64
		want   bool
	}{
		{50, 100, true}, {150, 160, true}, {199, 300, true}, {201, 499, false},
		{0, 99, false}, {400, 600, true}, {511, 900, false}, {510, 510, true},
	} {
		if got := overlapsSpan(c.t0, c.t1, txs); got != c.want {
			t.Errorf("overlapsSpan(%d, %d) = %v, want %v", c.t0, c.t1, got, c.want)
		}
	}
	if overlapsSpan(0, 1000, nil) {
		t.Error("a request overlapped a transaction of a proxy without a writer")
	}
}

// TestCycleOrder: each cycle's order is a permutation of the arms in which the gateway's
// arms keep the places they had and the others stay put, and over many cycles every
// gateway arm takes every one of those places about as often (a fixed order gave the
// third gateway arm more of the writer's transactions).
func TestCycleOrder(t *testing.T) {
	arms := []*arm{{kind: kindDirect}, {kind: kindCaddy}, {kind: kindGateway}, {kind: kindGateway}, {kind: kindGateway}, {kind: kindGateway}}
	const cycles = 4000
	places := map[[2]int]int{}
	for range cycles {
		order := cycleOrder(arms)
		if order[0] != 0 || order[1] != 1 {
			t.Fatalf("order %v moved the direct or Caddy arm", order)
		}
		seen := make([]bool, len(arms))
		for place, i := range order {
			if seen[i] || arms[i].kind != arms[place].kind {
				t.Fatalf("order %v is not a permutation within kinds", order)
			}
			seen[i] = true
			places[[2]int{i, place}]++
		}
	}
	for i := 2; i < len(arms); i++ {
		for place := 2; place < len(arms); place++ {
			// 1,000 expected, standard deviation about 27.
			if c := places[[2]int{i, place}]; c < 800 || c > 1200 {
				t.Errorf("arm %d took place %d in %d of %d cycles", i, place, c, cycles)
			}
		}
	}
}

// TestTailKinds: a slot's requests are classed by the collections between the two reads
// and the writer transactions of the second, the direct arm's all clean, and a slot whose
// collections cannot be told judges nothing but still ends its clean slot.
func TestTailKinds(t *testing.T) {
	ring := make([]uint64, 256)
	ring[(11+255)%256] = uint64(100 * gcWindow) // collection 11 ends at 100 windows
	w := int64(gcWindow)
	m0 := goMem{NumGC: 10}
	m1 := goMem{NumGC: 11, PauseEnd: ring, WriterSpans: [][2]int64{{200 * w, 201 * w}}}
	// Each span lasts as many µs as its number (the one in both kinds aside).
	spans := []span{
		{99 * w, 99*w + 1000},   // 1: the collection ended within gcWindow after it
		{200 * w, 200*w + 2000}, // 2: in the writer's transaction
		{300 * w, 300*w + 3000}, // 3: clean
		{50 * w, 250 * w},       // both
		{400 * w, 400*w + 5000}, // 5: clean
	}
	var k tailKinds
	k.classify(spans, false, m0, true, m1, true)
	gcHits, writerHits := 0, 0
	for _, r := range k.judged {
		if r.gc {
			gcHits++
		}
		if r.wrote {
			writerHits++
		}
	}
	if len(k.judged) != 5 || gcHits != 2 || writerHits != 2 {
		t.Fatalf("judged %d, gc %d, writer %d; want 5, 2, 2", len(k.judged), gcHits, writerHits)
	}
	if !slices.Equal(k.clean.all, []float64{3, 5}) || !slices.Equal(k.gcOnly.all, []float64{1}) || !slices.Equal(k.writerOnly.all, []float64{2}) {
		t.Fatalf("clean %v, gc only %v, writer only %v", k.clean.all, k.gcOnly.all, k.writerOnly.all)
	}
	if gc, wr := k.shares(); gc != 40 || wr != 40 {
		t.Fatalf("shares %v%%, %v%%; want 40 and 40", gc, wr)
	}
	// The slowest: the one in both kinds (200 windows long), then 5 and 3 (clean), 2, 1.
	for _, c := range []struct{ pct, gc, wr float64 }{
		{1, 100, 100}, // at least one request
		{40, 50, 50},
		{60, 100.0 / 3, 100.0 / 3},
		{80, 25, 50},
		{100, 40, 40},
	} {
		if gc, wr := k.slowest(c.pct); math.Abs(float64(gc)-c.gc) > 1e-9 || math.Abs(float64(wr)-c.wr) > 1e-9 {
			t.Errorf("slowest %v%%: %v%% overlapped a collection, %v%% the writer; want %v and %v", c.pct, gc, wr, c.gc, c.wr)
		}
	}
	k.classify(spans, false, m0, false, m1, true) // the first read failed
	if len(k.judged) != 5 || len(k.clean.slots) != 2 || len(k.clean.slots[1]) != 0 {
		t.Fatalf("an unknown slot judged requests (%d) or kept no empty slot (%d slots)", len(k.judged), len(k.clean.slots))
	}
	var d tailKinds
	d.classify(spans, true, goMem{}, false, goMem{}, false)
	if len(d.judged) != 5 || len(d.clean.all) != 5 {
		t.Fatalf("direct: judged %d, clean %d; want all 5 clean", len(d.judged), len(d.clean.all))
	}
	var none tailKinds
	if gc, wr := none.shares(); !math.IsNaN(float64(gc)) || !math.IsNaN(float64(wr)) {
		t.Fatalf("shares of nothing judged: %v, %v; want NaN", gc, wr)
	}
	if gc, wr := none.slowest(1); !math.IsNaN(float64(gc)) || !math.IsNaN(float64(wr)) {
		t.Fatalf("slowest of nothing judged: %v, %v; want NaN", gc, wr)
	}
}
