package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// armKind says what stands between the load generator and the fake upstream.
type armKind int

const (
	kindDirect armKind = iota
	kindCaddy
	kindGateway
)

// arm is one way of reaching the fake upstream.
type arm struct {
	name     string
	kind     armKind
	url      string
	messages bool // the Anthropic Messages surface, else chat completions
	model    string
	// contentType is the type of the arm's request bodies, JSON if empty (a media test's
	// multipart body).
	contentType string
	key         string
	// proc is the proxy process whose CPU and memory the arm is charged; nil for direct.
	proc   *child
	client *http.Client

	// ok200 counts 200 answers (for the gateway's records check), all tests included.
	ok200 atomic.Int64
}

func newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: 20000,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		WriteBufferSize:     4 << 10,
		ReadBufferSize:      4 << 10,
	}}
}

// body is the request the arm sends: the same prompt, with the directive, on every arm.
func (a *arm) body(stream bool, d directive) []byte {
	prompt := strconv.Quote("Write a short greeting for a benchmark. " + d.String())
	var b bytes.Buffer
	if a.messages {
		fmt.Fprintf(&b, `{"model":%q,"max_tokens":64,"messages":[{"role":"user","content":%s}]`, a.model, prompt)
		if stream {
			b.WriteString(`,"stream":true`)
		}
	} else {
		fmt.Fprintf(&b, `{"model":%q,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":%s}],"max_tokens":64,"temperature":0.2`, a.model, prompt)
		if stream {
			b.WriteString(`,"stream":true,"stream_options":{"include_usage":true}`)
		}
	}
	b.WriteByte('}')
	return b.Bytes()
}

func (a *arm) newRequest(ctx context.Context, body []byte) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, a.url, bytes.NewReader(body))
	h := req.Header
	h.Set("Content-Type", cmp.Or(a.contentType, "application/json"))
	if a.messages {
		h.Set("X-Api-Key", a.key)
		h.Set("Anthropic-Version", "2023-06-01")
	} else {
		h.Set("Authorization", "Bearer "+a.key)
	}
	return req
}

// do sends a non-streamed request and reads the whole answer.
func (a *arm) do(ctx context.Context, body []byte) error { return a.fetch(ctx, body, nil) }

// answerStamps are the fake upstream's stamps read back from a non-streamed answer: when it
// received the request and when it wrote the answer (zero if the answer had none).
type answerStamps struct {
	received, written time.Time
}

// fetch sends body and reads the whole answer; with st, it keeps the answer to read the
// upstream's stamps from it into st.
func (a *arm) fetch(ctx context.Context, body []byte, st *answerStamps) error {
	resp, err := a.client.Do(a.newRequest(ctx, body))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	var n int64
	if st == nil {
		n, err = io.Copy(io.Discard, resp.Body)
	} else {
		b := answerBuf.Get().(*[]byte)
		buf := bytes.NewBuffer((*b)[:0])
		n, err = buf.ReadFrom(resp.Body)
		data := buf.Bytes()
		st.received, _ = readTagged(data, recvTag)
		st.written, _ = readTagged(data, writeTag)
		*b = data
		answerBuf.Put(b)
	}
	_ = resp.Body.Close()
	a.ok200.Add(1)
	switch {
	case err != nil:
		return err
	case n == 0:
		return fmt.Errorf("empty answer")
	}
	return nil
}

// errorLog keeps the first error of a test for the report.
type errorLog struct {
	n     atomic.Int64
	once  sync.Once
	first string
}

func (e *errorLog) add(err error) {
	e.n.Add(1)
	e.once.Do(func() { e.first = err.Error() })
}

// satResult is a closed-loop saturation test.
type satResult struct {
	RPS        num    `json:"rps"`
	Requests   int64  `json:"requests"`
	Errors     int64  `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// CPUPerReqUs is the proxy's CPU time per request; UpstreamCPUPerReqUs the fake's.
	CPUPerReqUs         num `json:"cpu_per_request_us"`
	UpstreamCPUPerReqUs num `json:"upstream_cpu_per_request_us"`
	// AllocPerReqKiB is what the proxy's Go heap allocated per request, GCPer1kReq the
	// garbage collections it ran per 1,000 requests (the runtime's own counters).
	AllocPerReqKiB num `json:"alloc_per_request_kib"`
	GCPer1kReq     num `json:"gc_per_1000_requests"`
}

// saturate runs conc workers back to back for warmup+dur and counts the requests that
// complete inside the measured window. Requests in flight at the end finish (they are not cut, so that every
// gateway request is a complete one for the records check).
func saturate(ctx context.Context, a *arm, upstream *child, conc int, warmup, dur time.Duration, body []byte) satResult {
	start := time.Now()
	measureFrom, end := start.Add(warmup), start.Add(warmup+dur)
	var counted atomic.Int64
	var errs errorLog
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(end) {
					return
				}
				rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				err := a.do(rctx, body)
				cancel()
				t1 := time.Now()
				if err != nil {
					errs.add(err)
					continue
				}
				// Throughput is completions per second inside the window.
				if !t1.Before(measureFrom) && t1.Before(end) {
					counted.Add(1)
				}
			}
		}()
	}
	var cpu0, cpu1, up0, up1 time.Duration
	sleepCtx(ctx, time.Until(measureFrom))
	cpu0, up0 = cpuOf(a.proc), cpuOf(upstream)
	mem0, mem0ok := memOf(ctx, a.proc)
	sleepCtx(ctx, time.Until(end))
	cpu1, up1 = cpuOf(a.proc), cpuOf(upstream)
	mem1, mem1ok := memOf(ctx, a.proc)
	wg.Wait()
	r := satResult{Requests: counted.Load(), Errors: errs.n.Load(), FirstError: errs.first}
	r.RPS = num(float64(r.Requests) / dur.Seconds())
	r.CPUPerReqUs, r.UpstreamCPUPerReqUs, r.AllocPerReqKiB, r.GCPer1kReq = nan, nan, nan, nan
	if n := float64(r.Requests); n > 0 {
		if a.proc != nil {
			r.CPUPerReqUs = num(micros(cpu1-cpu0) / n)
		}
		r.UpstreamCPUPerReqUs = num(micros(up1-up0) / n)
		if mem0ok && mem1ok {
			r.AllocPerReqKiB = num(float64(mem1.TotalAlloc-mem0.TotalAlloc) / 1024 / n)
			r.GCPer1kReq = num(float64(mem1.NumGC-mem0.NumGC) * 1000 / n)
		}
	}
	return r
}

// goMem holds the counters of a proxy's Go runtime that the saturation test reads.
type goMem struct {
	TotalAlloc uint64 // bytes allocated on the heap since the process started
	NumGC      uint32 // garbage collections completed
	// HeapPeak is the module's "heap_peak": the heap now and its peak since the last read
	// (nil unless the process samples its heap, see heapSampleEnv).
	HeapPeak *heapPeak
	// Sched is how long goroutines waited for a processor since the process started (the
	// module's "sched_latencies"); nil from a build without it.
	Sched *schedHist
	// Goroutines is how many the process had (the module's "goroutines"; 0 from a build
	// without it).
	Goroutines int
	// PauseEnd holds when the last 256 collections ended (Unix ns): collection k's end is
	// PauseEnd[(k+255)%256].
	PauseEnd []uint64
	// WriterSpans are the gateway's last SQLite write transactions, [start, end] in Unix
	// ns (the module's "model_gateway_writer_spans"; empty in plain Caddy).
	WriterSpans [][2]int64
}

// gcWindow is how long before a collection's end (memstats' PauseEnd) a request still
// counts as overlapping it: about a mark phase and its stops on the hosts measured so far
// (GODEBUG=gctrace=1 put them at 1.5–5 ms). The -gc-window flag sets it.
var gcWindow = 5 * time.Millisecond

// gcEnds are the ends of the collections a process completed between two reads of its
// counters; false when they cannot be told (a read missing, or more than the 256 that
// memstats keeps).
func gcEnds(m0, m1 goMem) ([]int64, bool) {
	n := m1.NumGC - m0.NumGC
	if len(m1.PauseEnd) != 256 || m1.NumGC < m0.NumGC || n > 256 {
		return nil, false
	}
	ends := make([]int64, 0, n)
	for k := m0.NumGC + 1; k <= m1.NumGC; k++ {
		ends = append(ends, int64(m1.PauseEnd[(k+255)%256]))
	}
	return ends, true
}

// span is one request's (or one stream's wait for its first chunk) start and end, in Unix
// ns.
type span struct{ t0, t1 int64 }

// micros is the span's length in µs.
func (sp span) micros() float64 { return float64(sp.t1-sp.t0) / 1e3 }

// tailKinds classes requests by what ran in their proxy meanwhile: a garbage collection,
// a transaction of the gateway's SQLite writer, both or neither (clean).
type tailKinds struct {
	// judged are the requests whose overlap could be told, with what they overlapped.
	judged                    []judgedReq
	clean, writerOnly, gcOnly series
}

// judgedReq is one judged request: its latency in µs and what it overlapped.
type judgedReq struct {
	micros    float64
	gc, wrote bool
}

// classify adds one slot's requests, given the proxy's counters read before (m0) and
// after (m1) it; direct is the arm with no proxy, whose requests are all clean. The
// requests of a slot whose collections cannot be told are left out. The clean series
// ends its slot, empty or not, so that slots stay paired across arms.
func (k *tailKinds) classify(spans []span, direct bool, m0 goMem, m0ok bool, m1 goMem, m1ok bool) {
	defer k.clean.endSlot()
	var ends []int64
	known := direct
	if m0ok && m1ok {
		ends, known = gcEnds(m0, m1)
	}
	if !known {
		return
	}
	for _, sp := range spans {
		gc, wr := overlapsGC(sp.t0, sp.t1, ends), overlapsSpan(sp.t0, sp.t1, m1.WriterSpans)
		k.judged = append(k.judged, judgedReq{sp.micros(), gc, wr})
		switch {
		case !gc && !wr:
			k.clean.add(sp.micros())
		case !gc:
			k.writerOnly.add(sp.micros())
		case !wr:
			k.gcOnly.add(sp.micros())
		}
	}
}

// shares are the percentages of the judged requests that overlapped a collection and a
// writer transaction; NaN when none was judged.
func (k *tailKinds) shares() (gcPct, writerPct num) { return overlapShares(k.judged) }

// overlapShares are the percentages of reqs that overlapped a collection and a writer
// transaction; NaN when reqs is empty.
func overlapShares(reqs []judgedReq) (gcPct, writerPct num) {
	if len(reqs) == 0 {
		return nan, nan
	}
	var gc, wr int
	for _, r := range reqs {
		if r.gc {
			gc++
		}
		if r.wrote {
			wr++
		}
	}
	return num(100 * float64(gc) / float64(len(reqs))), num(100 * float64(wr) / float64(len(reqs)))
}

// slowest returns, of the slowest pct percent of the judged requests (at least one), the
// percentages that overlapped a collection and a writer transaction; NaN when none was
// judged. Where the slowest requests come from: the tail's composition, not its height.
func (k *tailKinds) slowest(pct float64) (gcPct, writerPct num) {
	if len(k.judged) == 0 {
		return nan, nan
	}
	reqs := slices.Clone(k.judged)
	slices.SortFunc(reqs, func(a, b judgedReq) int { return cmp.Compare(b.micros, a.micros) })
	return overlapShares(reqs[:max(1, int(math.Ceil(float64(len(reqs))*pct/100)))])
}

// overlapsSpan reports whether a request from t0 to t1 (Unix ns) overlapped one of spans.
func overlapsSpan(t0, t1 int64, spans [][2]int64) bool {
	for _, sp := range spans {
		if t0 <= sp[1] && t1 >= sp[0] {
			return true
		}
	}
	return false
}

// overlapsGC reports whether a request from t0 to t1 (Unix ns) overlapped a collection
// ending at one of ends, counted as running for gcWindow before its end.
func overlapsGC(t0, t1 int64, ends []int64) bool {
	for _, e := range ends {
		if t0 <= e && t1 >= e-int64(gcWindow) {
			return true
		}
	}
	return false
}

// schedHist is the runtime's /sched/latencies histogram as the module publishes it:
// Counts[i] waits of at most UpperUs[i] µs.
type schedHist struct {
	UpperUs []float64 `json:"upper_us"`
	Counts  []uint64  `json:"counts"`
}

// add adds to h what b2 counted beyond b1 (the same process read twice).
func (h *schedHist) add(b1, b2 *schedHist) {
	if b1 == nil || b2 == nil || len(b1.Counts) != len(b2.Counts) {
		return
	}
	if h.Counts == nil {
		h.UpperUs, h.Counts = b2.UpperUs, make([]uint64, len(b2.Counts))
	}
	if len(h.Counts) != len(b2.Counts) {
		return
	}
	for i := range h.Counts {
		h.Counts[i] += b2.Counts[i] - b1.Counts[i]
	}
}

// percentile is the upper bound of the bucket holding the p-th percentile wait, in µs; NaN
// when nothing was counted.
func (h *schedHist) percentile(p float64) float64 {
	var total uint64
	for _, c := range h.Counts {
		total += c
	}
	if total == 0 {
		return math.NaN()
	}
	rank := uint64(math.Ceil(p / 100 * float64(total)))
	var seen uint64
	for i, c := range h.Counts {
		if seen += c; seen >= rank {
			return h.UpperUs[i]
		}
	}
	return h.UpperUs[len(h.UpperUs)-1]
}

// memOf reads the Go runtime's counters of c from its admin endpoint (expvar's memstats);
// false when c has none or it does not answer.
func memOf(ctx context.Context, c *child) (goMem, bool) {
	if c == nil || c.admin == 0 {
		return goMem{}, false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://localhost:%d/debug/vars", c.admin), nil)
	if err != nil {
		return goMem{}, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return goMem{}, false
	}
	defer resp.Body.Close()
	var v struct {
		MemStats    *goMem     `json:"memstats"`
		Sched       *schedHist `json:"sched_latencies"`
		Goroutines  int        `json:"goroutines"`
		WriterSpans [][2]int64 `json:"model_gateway_writer_spans"`
		HeapPeak    *heapPeak  `json:"heap_peak"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&v) != nil || v.MemStats == nil {
		return goMem{}, false
	}
	m := *v.MemStats
	m.Sched, m.Goroutines, m.WriterSpans, m.HeapPeak = v.Sched, v.Goroutines, v.WriterSpans, v.HeapPeak
	return m, true
}

// heapPeak is the module's "heap_peak" (module/runtimevars.go): the bytes of the Go heap's
// objects at the read, the most sampled since the last read, and the samples taken.
type heapPeak struct {
	ObjectsBytes     uint64 `json:"objects_bytes"`
	PeakObjectsBytes uint64 `json:"peak_objects_bytes"`
	Samples          uint64 `json:"samples"`
}

func cpuOf(c *child) time.Duration {
	if c == nil {
		return 0
	}
	d, _ := procCPU(c.pid())
	return d
}

// latResult is an open-loop fixed-rate test.
type latResult struct {
	Sent       int64  `json:"sent"`
	P50Us      num    `json:"p50_us"`
	P90Us      num    `json:"p90_us"`
	P99Us      num    `json:"p99_us"`
	Errors     int64  `json:"errors"`
	Dropped    int64  `json:"dropped"`
	FirstError string `json:"first_error,omitempty"`
	// SchedWaitP99Us is the proxy's p99 wait of a runnable goroutine for a processor over
	// the measured slots (the runtime's /sched/latencies; a bucket bound, NaN for direct).
	SchedWaitP99Us num `json:"sched_wait_p99_us"`
	// GoroutinesMax is the most goroutines the proxy had at the end of a slot: every
	// collection scans each one's stack, so a proxy holding more idle connections (one
	// goroutine each on the server side, two on the client side) pays more per collection.
	GoroutinesMax int `json:"goroutines_max"`
	// GCOverlapPct is the share of the requests that overlapped a collection of the proxy
	// (see gcWindow), WriterOverlapPct of those that overlapped a transaction of the
	// gateway's SQLite writer, and CleanP99Us the p99 latency of the requests that
	// overlapped neither: what the proxy adds with those two taken out, and how many
	// requests they reach.
	GCOverlapPct     num `json:"gc_overlap_pct"`
	WriterOverlapPct num `json:"writer_overlap_pct"`
	CleanP99Us       num `json:"clean_p99_us"`
	// Of the slowest 1% of the requests, the shares that overlapped a collection and a
	// writer transaction: what the p99 is made of.
	SlowestGCPct     num `json:"slowest_gc_pct"`
	SlowestWriterPct num `json:"slowest_writer_pct"`
	// The latencies of each kind apart: the requests that overlapped neither (clean), a
	// writer transaction and no collection, a collection and no writer transaction.
	CleanP50Us      num `json:"clean_p50_us"`
	CleanP90Us      num `json:"clean_p90_us"`
	WriterOnlyP50Us num `json:"writer_only_p50_us"`
	WriterOnlyP90Us num `json:"writer_only_p90_us"`
	GCOnlyP50Us     num `json:"gc_only_p50_us"`
	GCOnlyP90Us     num `json:"gc_only_p90_us"`
	// The latency split at the upstream's stamps: ToUpstream from the send to the upstream's
	// receipt of the request, FromUpstream from the upstream's write of the answer to the end
	// of its body (what the proxy adds on each way, with the upstream's latency taken out).
	ToUpstreamP50Us   num `json:"to_upstream_p50_us"`
	ToUpstreamP99Us   num `json:"to_upstream_p99_us"`
	FromUpstreamP50Us num `json:"from_upstream_p50_us"`
	FromUpstreamP99Us num `json:"from_upstream_p99_us"`
	// slots are the latencies slot by slot, for the pooled comparison (not in the JSON);
	// toSlots and fromSlots the split's, cleanSlots those of the requests that overlapped
	// no collection.
	slots, toSlots, fromSlots, cleanSlots [][]float64
}

// latSamples gathers an arm's fixed-rate latencies, possibly over several slots.
type latSamples struct {
	mu            sync.Mutex
	lat, to, from series
	tail          tailKinds
	sched         schedHist
	goroutines    int
	errs          errorLog
	dropped, sent atomic.Int64
}

func (s *latSamples) result() latResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := &s.tail
	gcPct, writerPct := t.shares()
	slowGC, slowWriter := t.slowest(1)
	return latResult{
		GCOverlapPct: gcPct, WriterOverlapPct: writerPct, CleanP99Us: t.clean.pct(99), cleanSlots: t.clean.slots,
		SlowestGCPct: slowGC, SlowestWriterPct: slowWriter,
		CleanP50Us: t.clean.pct(50), CleanP90Us: t.clean.pct(90),
		WriterOnlyP50Us: t.writerOnly.pct(50), WriterOnlyP90Us: t.writerOnly.pct(90),
		GCOnlyP50Us: t.gcOnly.pct(50), GCOnlyP90Us: t.gcOnly.pct(90),
		Sent: s.sent.Load(), P50Us: s.lat.pct(50), P90Us: s.lat.pct(90), P99Us: s.lat.pct(99),
		Errors: s.errs.n.Load(), Dropped: s.dropped.Load(), FirstError: s.errs.first, slots: s.lat.slots,
		SchedWaitP99Us: num(s.sched.percentile(99)), GoroutinesMax: s.goroutines,
		ToUpstreamP50Us: s.to.pct(50), ToUpstreamP99Us: s.to.pct(99), toSlots: s.to.slots,
		FromUpstreamP50Us: s.from.pct(50), FromUpstreamP99Us: s.from.pct(99), fromSlots: s.from.slots,
	}
}

// fixedRate sends rate requests a second on a fixed schedule, whatever the answers' pace
// (open loop), and records each one's time from sending to the end of its body. At most
// maxInFlight requests are outstanding; a send that would exceed it is dropped and counted.
func fixedRate(ctx context.Context, a *arm, rate int, warmup, dur time.Duration, body []byte) latResult {
	var s latSamples
	s.sample(ctx, a, rate, warmup, dur, body)
	return s.result()
}

// interleaved runs the fixed-rate test on every arm in turn, slot by slot, until each has
// been measured for dur: slow changes of the host (other tenants, CPU steal) then fall on
// all arms alike instead of on whichever arm ran at the time. Each arm is warmed first.
func interleaved(ctx context.Context, arms []*arm, rate int, warmup, slot, dur time.Duration, body func(*arm) []byte) map[string]latResult {
	samples := make([]latSamples, len(arms))
	for i, a := range arms {
		samples[i].sample(ctx, a, rate, warmup, 0, body(a))
	}
	for done := time.Duration(0); done < dur && ctx.Err() == nil; done += slot {
		d := min(slot, dur-done)
		for _, i := range cycleOrder(arms) {
			samples[i].sample(ctx, arms[i], rate, 0, d, body(arms[i]))
		}
	}
	out := make(map[string]latResult, len(arms))
	for i, a := range arms {
		out[a.name] = samples[i].result()
	}
	return out
}

// cycleOrder is the order in which the arms take their slots in one cycle of an
// interleaved test: the gateway's arms (both gateways' with -variant) keep their places
// in the cycle, the block they form, but take them in a new random order every cycle.
//
// In a fixed order, the SQLite writer, which gathers settlements for 100 ms from the
// first one after an idle spell, phase-locked to the gateway's three arms in a row: its
// transactions fell about twice in the first and second arms' slots and three times in
// the third's (chat → Anthropic-wire), whose requests then overlapped 5–7% of them against
// 4% (see "Method" in docs/benchmark.md). Shuffled, every arm takes every place alike. The
// block stays whole, so that the transaction that applies a block's last settlements
// falls in the slot after it, as it did before: the direct arm's, never Caddy's (unless
// -arms leaves direct out).
func cycleOrder(arms []*arm) []int {
	order := make([]int, len(arms))
	var gw []int // the places the gateway's arms take
	for i, a := range arms {
		order[i] = i
		if a.kind == kindGateway {
			gw = append(gw, i)
		}
	}
	for k, j := range rand.Perm(len(gw)) {
		order[gw[k]] = gw[j]
	}
	return order
}

// schedule yields start, start+period... before end, each once its time has come: an open
// loop, where a tick the caller is late for comes at once, not skipped. It stops early when
// ctx ends.
func schedule(ctx context.Context, start, end time.Time, period time.Duration) iter.Seq[time.Time] {
	return func(yield func(time.Time) bool) {
		for i := 0; ctx.Err() == nil; i++ {
			at := start.Add(time.Duration(i) * period)
			if !at.Before(end) {
				return
			}
			if d := time.Until(at); d > 0 {
				time.Sleep(d)
			}
			if !yield(at) {
				return
			}
		}
	}
}

// sample adds to s a fixed-rate run of warmup (not recorded) and then dur (recorded); it
// returns once every request it sent has ended.
func (s *latSamples) sample(ctx context.Context, a *arm, rate int, warmup, dur time.Duration, body []byte) {
	const maxInFlight = 4096
	period := time.Second / time.Duration(rate)
	// The proxy's scheduling waits are read around the slot (with -slot 0, around its
	// warm-up too), before the schedule starts: a read takes a few milliseconds.
	var mem0 goMem
	var mem0ok bool
	if dur > 0 {
		mem0, mem0ok = memOf(ctx, a.proc)
	}
	start := time.Now()
	measureFrom, end := start.Add(warmup), start.Add(warmup+dur)
	var inFlight atomic.Int64
	var wg sync.WaitGroup
	// spans are the measured requests' times, to tell which overlapped a collection or a
	// writer transaction of the proxy once the slot's are known.
	var spans []span
	// Every measured slot is kept, empty or not, so that slot i of each arm stays a pair.
	defer func() {
		if dur > 0 {
			s.lat.endSlot()
			s.to.endSlot()
			s.from.endSlot()
			mem1, mem1ok := memOf(ctx, a.proc)
			if mem1ok {
				s.sched.add(mem0.Sched, mem1.Sched)
				s.goroutines = max(s.goroutines, mem1.Goroutines)
			}
			s.tail.classify(spans, a.proc == nil, mem0, mem0ok, mem1, mem1ok)
		}
	}()
	for at := range schedule(ctx, start, end, period) {
		measured := !at.Before(measureFrom)
		if inFlight.Load() >= maxInFlight {
			if measured {
				s.dropped.Add(1)
			}
			continue
		}
		inFlight.Add(1)
		if measured {
			s.sent.Add(1)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer inFlight.Add(-1)
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			var st answerStamps
			t0 := time.Now()
			err := a.fetch(rctx, body, &st)
			t1 := time.Now()
			if !measured {
				return
			}
			if err != nil {
				s.errs.add(err)
				return
			}
			s.mu.Lock()
			s.lat.add(micros(t1.Sub(t0)))
			spans = append(spans, span{t0.UnixNano(), t1.UnixNano()})
			if !st.received.IsZero() && !st.written.IsZero() {
				s.to.add(micros(st.received.Sub(t0)))
				s.from.add(micros(t1.Sub(st.written)))
			}
			s.mu.Unlock()
		}()
	}
	wg.Wait()
}

// streamObs is what the client saw of one stream.
type streamObs struct {
	ttfb    time.Duration // from sending to the first content chunk
	times   []time.Time   // arrival of each content chunk
	sent    []time.Time   // the upstream's stamp of each (zero if it had none)
	done    bool          // [DONE] or message_stop arrived
	errored bool          // an error event arrived
	status  int
	err     error
}

// openStream sends a streamed request and reads it to the end, calling first once the
// first content chunk has arrived (true) or the stream failed before it (false).
func (a *arm) openStream(ctx context.Context, body []byte, first func(ok bool)) streamObs {
	var o streamObs
	called := false
	signal := func() {
		if !called && first != nil {
			called = true
			first(len(o.times) > 0)
		}
	}
	defer signal()
	t0 := time.Now()
	resp, err := a.client.Do(a.newRequest(ctx, body))
	if err != nil {
		o.err = err
		return o
	}
	defer resp.Body.Close()
	o.status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		o.err = fmt.Errorf("status %d", resp.StatusCode)
		return o
	}
	a.ok200.Add(1)
	br := bufio.NewReaderSize(resp.Body, 8<<10)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			now := time.Now()
			if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				data = bytes.TrimSpace(data)
				switch {
				case bytes.Equal(data, []byte("[DONE]")), bytes.Contains(data, []byte(`"type":"message_stop"`)):
					o.done = true
				case bytes.HasPrefix(data, []byte(`{"error"`)), bytes.Contains(data, []byte(`"type":"error"`)):
					o.errored = true
				case bytes.Contains(data, []byte("~t")):
					if len(o.times) == 0 {
						o.ttfb = now.Sub(t0)
					}
					o.times = append(o.times, now)
					sent, _ := readStamp(data)
					o.sent = append(o.sent, sent)
					if len(o.times) == 1 {
						signal()
					}
				}
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err != io.EOF {
				o.err = err
			}
			return o
		}
	}
}

// check says what is wrong with a stream that should have had n content chunks.
func (o *streamObs) check(n int) error {
	switch {
	case o.err != nil:
		return o.err
	case o.errored:
		return fmt.Errorf("error event in the stream")
	case len(o.times) != n:
		return fmt.Errorf("%d content chunks, want %d", len(o.times), n)
	case !o.done:
		return fmt.Errorf("the stream ended without its end event")
	}
	return nil
}

// streamResult is the streaming test: time to first chunk and gaps between chunks.
type streamResult struct {
	Streams   int64 `json:"streams"`
	TTFBP50Us num   `json:"ttfb_p50_us"`
	TTFBP99Us num   `json:"ttfb_p99_us"`
	// The waits for the first chunk classed as the latency test's requests are: the share
	// that overlapped a collection of the proxy, a writer transaction, and the p99 of the
	// others.
	TTFBGCOverlapPct     num `json:"ttfb_gc_overlap_pct"`
	TTFBWriterOverlapPct num `json:"ttfb_writer_overlap_pct"`
	TTFBCleanP99Us       num `json:"ttfb_clean_p99_us"`
	GapP50Us             num `json:"gap_p50_us"`
	GapP99Us             num `json:"gap_p99_us"`
	// RelayP50Us and RelayP99Us are the time from the upstream's write of a content chunk
	// (its stamp) to the chunk's arrival; UpstreamGapP50Us the gap between the stamps of
	// consecutive chunks, the upstream's own pacing.
	// TransitGapP99Us is the gap between two chunks at arrival minus the gap between their
	// stamps: what the way through the proxy added to it.
	RelayP50Us       num `json:"relay_p50_us"`
	RelayP99Us       num `json:"relay_p99_us"`
	UpstreamGapP50Us num `json:"upstream_gap_p50_us"`
	TransitGapP99Us  num `json:"transit_gap_p99_us"`
	// CPUPerStreamUs is the proxy process's CPU time per completed stream (NaN for direct),
	// AllocPerStreamKiB what its Go heap allocated per stream.
	CPUPerStreamUs    num    `json:"cpu_per_stream_us"`
	AllocPerStreamKiB num    `json:"alloc_per_stream_kib"`
	Errors            int64  `json:"errors"`
	FirstError        string `json:"first_error,omitempty"`
	// The samples slot by slot (not in the JSON).
	ttfbSlots, gapSlots, relaySlots, upGapSlots, transitSlots, ttfbCleanSlots [][]float64
}

// series is one kind of observation: all of an arm's samples, and its slots' (the ones of
// the slot in progress in cur).
type series struct {
	all, cur []float64
	slots    [][]float64
}

func (x *series) add(v float64) {
	x.all = append(x.all, v)
	x.cur = append(x.cur, v)
}

func (x *series) endSlot() {
	x.slots = append(x.slots, x.cur)
	x.cur = nil
}

func (x *series) pct(p float64) num { return num(percentile(x.all, p)) }

// streamSamples gathers an arm's stream observations, possibly over several slots.
type streamSamples struct {
	mu                                   sync.Mutex
	ttfb, gaps, relays, upGaps, transits series
	// tail classes each stream's wait for its first chunk (see tailKinds).
	tail  tailKinds
	count atomic.Int64
	errs  errorLog
	// cpu is the proxy's CPU time over the slots, each from its start to its last stream's
	// end, alloc the bytes its heap allocated meanwhile (unless some slot's could not be
	// read: allocMissed).
	cpu         time.Duration
	alloc       uint64
	allocMissed bool
}

func (s *streamSamples) result() streamResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := streamResult{
		Streams: s.count.Load(), TTFBP50Us: s.ttfb.pct(50), TTFBP99Us: s.ttfb.pct(99),
		GapP50Us: s.gaps.pct(50), GapP99Us: s.gaps.pct(99),
		RelayP50Us: s.relays.pct(50), RelayP99Us: s.relays.pct(99),
		UpstreamGapP50Us: s.upGaps.pct(50), TransitGapP99Us: s.transits.pct(99),
		CPUPerStreamUs: nan, Errors: s.errs.n.Load(), FirstError: s.errs.first,
		ttfbSlots: s.ttfb.slots, gapSlots: s.gaps.slots, relaySlots: s.relays.slots,
		TTFBCleanP99Us: s.tail.clean.pct(99), ttfbCleanSlots: s.tail.clean.slots,
		upGapSlots: s.upGaps.slots, transitSlots: s.transits.slots,
	}
	r.TTFBGCOverlapPct, r.TTFBWriterOverlapPct = s.tail.shares()
	r.AllocPerStreamKiB = nan
	if n := s.count.Load(); n > 0 && s.cpu > 0 {
		r.CPUPerStreamUs = num(micros(s.cpu) / float64(n))
	}
	if n := s.count.Load(); n > 0 && s.alloc > 0 && !s.allocMissed {
		r.AllocPerStreamKiB = num(float64(s.alloc) / 1024 / float64(n))
	}
	return r
}

// streams runs conc workers that open streams back to back for dur.
func streams(ctx context.Context, a *arm, load streamLoad, warmup, dur time.Duration, d directive) streamResult {
	warmStreams(ctx, a, load, warmup, d)
	var s streamSamples
	s.sample(ctx, a, load, dur, d)
	return s.result()
}

// warmStreams runs a's streaming load for warmup, unrecorded, so that the connections it
// needs are open before it is measured.
func warmStreams(ctx context.Context, a *arm, load streamLoad, warmup time.Duration, d directive) {
	if warmup > 0 {
		var w streamSamples
		w.sample(ctx, a, load, warmup, d)
	}
}

// streamLoad is how the streaming test opens streams: conc of them open on average.
// Paced, a new stream opens every period (open loop, as in the latency test), the period
// being one stream's length divided by conc. Back to back, conc workers each open the next
// stream as soon as the last one ended: streams of equal length then stay in step, so conc
// requests arrive within the same instant, every chunk interval, and the time to first
// chunk measures the queue of that burst more than the proxy.
type streamLoad struct {
	conc       int
	backToBack bool
}

// period is the pacing interval for streams shaped by d.
func (l streamLoad) period(d directive) time.Duration {
	length := d.latency + time.Duration(max(d.n-1, 0))*d.interval
	return max(length/time.Duration(max(l.conc, 1)), time.Microsecond)
}

func (l streamLoad) String() string {
	if l.backToBack {
		return fmt.Sprintf("%d concurrent streams, opened back to back", l.conc)
	}
	return fmt.Sprintf("%d concurrent streams on average, opened at a fixed pace", l.conc)
}

// interleavedStreams runs the streaming test on every arm in turn, slot by slot, until each
// has had dur (see interleaved). Each arm is warmed first, unrecorded, so that the
// connections its load needs are open before its first slot.
func interleavedStreams(ctx context.Context, arms []*arm, load streamLoad, warmup, slot, dur time.Duration, d directive) map[string]streamResult {
	samples := make([]streamSamples, len(arms))
	for _, a := range arms {
		warmStreams(ctx, a, load, warmup, d)
	}
	for done := time.Duration(0); done < dur && ctx.Err() == nil; done += slot {
		for _, i := range cycleOrder(arms) {
			samples[i].sample(ctx, arms[i], load, min(slot, dur-done), d)
		}
	}
	out := make(map[string]streamResult, len(arms))
	for i, a := range arms {
		out[a.name] = samples[i].result()
	}
	return out
}

// sample adds to s the streams opened for dur (see streamLoad); it returns once every one
// has ended.
func (s *streamSamples) sample(ctx context.Context, a *arm, load streamLoad, dur time.Duration, d directive) {
	body := a.body(true, d)
	start := time.Now()
	end := start.Add(dur)
	cpu0 := cpuOf(a.proc)
	mem0, mem0ok := memOf(ctx, a.proc)
	var waits []span // each stream's wait for its first chunk (guarded by s.mu)
	defer func() {
		if a.proc != nil {
			s.cpu += cpuOf(a.proc) - cpu0
		}
		mem1, mem1ok := memOf(ctx, a.proc)
		if mem0ok && mem1ok {
			s.alloc += mem1.TotalAlloc - mem0.TotalAlloc
		} else {
			s.allocMissed = true
		}
		s.mu.Lock()
		s.tail.classify(waits, a.proc == nil, mem0, mem0ok, mem1, mem1ok)
		s.mu.Unlock()
		for _, x := range []*series{&s.ttfb, &s.gaps, &s.relays, &s.upGaps, &s.transits} {
			x.endSlot()
		}
	}()
	one := func() {
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		o := a.openStream(rctx, body, nil)
		cancel()
		if err := o.check(d.n); err != nil {
			s.errs.add(err)
			return
		}
		s.count.Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.ttfb.add(micros(o.ttfb))
		first := o.times[0].UnixNano()
		waits = append(waits, span{first - int64(o.ttfb), first})
		for i := 1; i < len(o.times); i++ {
			g := micros(o.times[i].Sub(o.times[i-1]))
			s.gaps.add(g)
			if !o.sent[i].IsZero() && !o.sent[i-1].IsZero() {
				up := micros(o.sent[i].Sub(o.sent[i-1]))
				s.upGaps.add(up)
				s.transits.add(g - up)
			}
		}
		for i, t := range o.sent {
			if !t.IsZero() {
				s.relays.add(micros(o.times[i].Sub(t)))
			}
		}
	}
	var wg sync.WaitGroup
	if !load.backToBack {
		for range schedule(ctx, start, end, load.period(d)) {
			wg.Go(one)
		}
		wg.Wait()
		return
	}
	for w := 0; w < load.conc; w++ {
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(end) {
				one()
			}
		})
	}
	wg.Wait()
}

// heldResult is the held-streams test: k streams open at once, the memory they cost, and
// whether every one of them went on flowing once released.
type heldResult struct {
	Streams int `json:"streams"`
	Opened  int `json:"opened"`
	// OpenSeconds is how long it took for every stream to get its first chunk.
	OpenSeconds num `json:"open_seconds"`
	// BytesPerStream is the proxy's RSS growth per open stream; UpstreamBytesPerStream the fake's.
	BytesPerStream         num   `json:"bytes_per_stream"`
	UpstreamBytesPerStream num   `json:"upstream_bytes_per_stream"`
	BaseRSS                int64 `json:"base_rss"`
	OpenRSS                int64 `json:"open_rss"`
	Completed              int   `json:"completed"`
	// Stalled streams never opened, never finished, or went silent longer than the stall
	// limit after their release.
	Stalled  int `json:"stalled"`
	MaxGapMs num `json:"max_gap_ms"`
	// WorstStreamMs is when each content chunk of the stream with the longest gap arrived,
	// relative to the release.
	WorstStreamMs []num  `json:"worst_stream_ms"`
	Errors        int64  `json:"errors"`
	FirstError    string `json:"first_error,omitempty"`
}

// openTimeout bounds the wait for every held stream's first chunk; the streams still
// unopened then count as stalled.
const openTimeout = 2 * time.Minute

// held opens k streams that the upstream holds after their first chunk, measures the
// proxy's memory while all are open, releases them and checks that each one completes
// with no gap longer than interval+stall.
func held(ctx context.Context, a *arm, upstream *child, upstreamURL string, k, openConc int, d directive, stall time.Duration) heldResult {
	r := heldResult{Streams: k, BytesPerStream: nan, UpstreamBytesPerStream: nan}
	body := a.body(true, d)
	sleepCtx(ctx, 500*time.Millisecond)
	base, _ := rssOf(a.proc)
	upBase, _ := rssOf(upstream)
	r.BaseRSS = base

	sem := make(chan struct{}, openConc)
	var opened, firsts sync.WaitGroup
	var released atomic.Int64 // unix nanos of the release
	var mu sync.Mutex
	var errs errorLog
	maxGap := time.Duration(0)
	start := time.Now()
	var nOpened atomic.Int64
	for i := 0; i < k; i++ {
		opened.Add(1)
		firsts.Add(1)
		go func() {
			defer opened.Done()
			sem <- struct{}{}
			rctx, cancel := context.WithTimeout(ctx, maxHold+time.Minute)
			defer cancel()
			o := a.openStream(rctx, body, func(ok bool) {
				if ok {
					nOpened.Add(1)
				}
				<-sem
				firsts.Done()
			})
			if err := o.check(d.n); err != nil {
				errs.add(err)
				mu.Lock()
				r.Stalled++
				mu.Unlock()
				return
			}
			// Gaps after the release: the first from the release itself.
			rel := time.Unix(0, released.Load())
			worst := time.Duration(0)
			prev := rel
			for _, t := range o.times[1:] {
				if g := t.Sub(prev); g > worst {
					worst = g
				}
				prev = t
			}
			mu.Lock()
			r.Completed++
			if worst > d.interval+stall {
				r.Stalled++
			}
			if worst > maxGap {
				maxGap = worst
				r.WorstStreamMs = r.WorstStreamMs[:0]
				for _, t := range o.times {
					r.WorstStreamMs = append(r.WorstStreamMs, num(float64(t.Sub(rel))/float64(time.Millisecond)))
				}
			}
			mu.Unlock()
		}()
	}
	waitGroup(ctx, &firsts, openTimeout)
	r.OpenSeconds = num(time.Since(start).Seconds())
	r.Opened = int(nOpened.Load())
	// Let the last streams' buffers settle, then take the highest of a few samples.
	sleepCtx(ctx, 300*time.Millisecond)
	var peak, upPeak int64
	for i := 0; i < 3; i++ {
		if v, err := rssOf(a.proc); err == nil {
			peak = max(peak, v)
		}
		if v, err := rssOf(upstream); err == nil {
			upPeak = max(upPeak, v)
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	r.OpenRSS = peak
	if r.Opened > 0 {
		if a.proc != nil {
			r.BytesPerStream = num(float64(peak-base) / float64(r.Opened))
		}
		r.UpstreamBytesPerStream = num(float64(upPeak-upBase) / float64(r.Opened))
	}
	released.Store(time.Now().UnixNano())
	if err := release(ctx, upstreamURL, d.hold); err != nil {
		errs.add(err)
	}
	opened.Wait()
	r.MaxGapMs = num(float64(maxGap) / float64(time.Millisecond))
	r.Errors, r.FirstError = errs.n.Load(), errs.first
	// Drop the k idle connections so that the next test starts from the same place.
	a.client.CloseIdleConnections()
	return r
}

func rssOf(c *child) (int64, error) {
	if c == nil {
		return 0, fmt.Errorf("no process")
	}
	return procRSS(c.pid())
}

// waitGroup waits for wg unless ctx ends or the timeout passes first.
func waitGroup(ctx context.Context, wg *sync.WaitGroup, timeout time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-ctx.Done():
	case <-t.C:
	}
}

func release(ctx context.Context, upstreamURL, id string) error {
	if err := postControl(ctx, upstreamURL, "/bench/release?id="+id); err != nil {
		return fmt.Errorf("releasing held streams: %w", err)
	}
	return nil
}

// postControl posts to one of the fake upstream's controls (/bench/...).
func postControl(ctx context.Context, upstreamURL, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, upstreamURL+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	return nil
}
