package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// targetKind is the direction of a target.
type targetKind int

const (
	atLeast targetKind = iota
	atMost
)

// target is one of the limits, on a ratio to plain Caddy or on an addition to it.
type target struct {
	kind  targetKind
	limit float64
}

func (t target) verdict(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case t.kind == atLeast && v >= t.limit, t.kind == atMost && v <= t.limit:
		return "pass"
	}
	return "FAIL"
}

// verdictWithin judges a value known only to lie between lo and hi: "unsure" when the
// target holds at one end and not at the other.
func (t target) verdictWithin(lo, hi float64) string {
	a, b := t.verdict(lo), t.verdict(hi)
	if a == b {
		return a
	}
	return "unsure"
}

// bootstrapDraws is how many resamples pooledInterval draws.
const bootstrapDraws = 400

// compareKind is how an arm is compared with plain Caddy.
type compareKind int

const (
	byRatio compareKind = iota // arm / caddy
	byAdded                    // arm - caddy, in the figure's unit
)

// figureDef describes one table.
type figureDef struct {
	key, title, unit string
	test             string // the test that measures it
	compare          compareKind
	proxiesOnly      bool
	value            func(r roundResult) float64
	// target is the limit that applies to an arm, if any.
	target func(a string) *target
	// For a percentile (pct) of samples taken in slots: the slots of a round, for the
	// pooled comparison with plain Caddy.
	pct   float64
	slots func(r roundResult) [][]float64
	// arm is the gateway's arm of a media test's figure, which has no other but direct and
	// caddy; "" for the figures of the chat arms, which leave the media arms out.
	arm string
	// absolute judges the target on the arm's own value, not on its comparison with Caddy,
	// and lists each round's value.
	absolute bool
	// vsDirect also compares the gateway's arm with direct (the fake itself), by difference.
	vsDirect bool
}

// covers reports whether the figure has a row for arm a.
func (fd figureDef) covers(a string) bool {
	if fd.arm == "" {
		return !isMediaArm(a)
	}
	return a == "direct" || a == "caddy" || a == fd.arm
}

// percentileDef is a percentile of samples taken in slots, in µs: compared with plain Caddy
// by the difference, and pooled over the slots of the run (pooledInterval).
func percentileDef(key, test string, pct float64, title string, value func(roundResult) num, slots func(roundResult) [][]float64, target func(string) *target) figureDef {
	return figureDef{key: key, test: test, unit: "µs", compare: byAdded, title: title,
		value: func(r roundResult) float64 { return float64(value(r)) }, target: target, pct: pct, slots: slots}
}

// shareDef is a figure of a percentage of a proxy's requests, compared by difference.
func shareDef(key, test, title string, value func(roundResult) num) figureDef {
	return figureDef{key: key, test: test, unit: "%", compare: byAdded, proxiesOnly: true, title: title,
		value: func(r roundResult) float64 { return float64(value(r)) }}
}

// The slots of each kind of sample, for percentileDef.
func latencySlots(r roundResult) [][]float64   { return r.Latency.slots }
func toUpSlots(r roundResult) [][]float64      { return r.Latency.toSlots }
func fromUpSlots(r roundResult) [][]float64    { return r.Latency.fromSlots }
func cleanSlots(r roundResult) [][]float64     { return r.Latency.cleanSlots }
func ttfbCleanSlots(r roundResult) [][]float64 { return r.Streams.ttfbCleanSlots }
func ttfbSlots(r roundResult) [][]float64      { return r.Streams.ttfbSlots }
func gapSlots(r roundResult) [][]float64       { return r.Streams.gapSlots }
func upGapSlots(r roundResult) [][]float64     { return r.Streams.upGapSlots }
func relaySlots(r roundResult) [][]float64     { return r.Streams.relaySlots }
func transitSlots(r roundResult) [][]float64   { return r.Streams.transitSlots }

// figure is one table of the report.
type figure struct {
	Key     string      `json:"key"`
	Title   string      `json:"title"`
	Unit    string      `json:"unit"`
	Compare string      `json:"compare"`
	Rows    []figureRow `json:"rows"`
}

type figureRow struct {
	Arm     string `json:"arm"`
	Rounds  []num  `json:"rounds"`
	Median  num    `json:"median"`
	VsCaddy num    `json:"vs_caddy"`
	// VsCaddyRounds are the per-round ratios or differences whose median VsCaddy is: their
	// spread shows how much the machine moved the figure.
	VsCaddyRounds []num `json:"vs_caddy_rounds"`
	// VsDirect is the median of the per-round differences to direct (VsDirectRounds), for
	// the figures that have it.
	VsDirect       *num  `json:"vs_direct,omitempty"`
	VsDirectRounds []num `json:"vs_direct_rounds,omitempty"`
	// Pooled is the arm's percentile minus Caddy's over the samples of every slot of every
	// round; Low and High bound its 95% interval (pooledInterval). The verdict of a target
	// on such a figure is theirs: pass only if all of the interval is within the target,
	// FAIL only if none of it is, unsure otherwise.
	Pooled  *num   `json:"pooled_vs_caddy,omitempty"`
	Low     *num   `json:"pooled_low95,omitempty"`
	High    *num   `json:"pooled_high95,omitempty"`
	Target  string `json:"target,omitempty"`
	Verdict string `json:"verdict,omitempty"`
	Note    string `json:"note,omitempty"`
}

// recordCheck compares the gateway's 200 answers with its generation rows.
type recordCheck struct {
	Answered int64            `json:"gateway_200_answers"`
	Rows     int64            `json:"generation_rows"`
	Lost     int64            `json:"lost_records"`
	ByStatus map[string]int64 `json:"rows_by_status"`
	// WaitSeconds is how long the rows took to catch up with the answers after the last test.
	WaitSeconds float64 `json:"wait_seconds"`
	Error       string  `json:"error,omitempty"`
}

// report is the whole run, as printed and as written to JSON.
type report struct {
	Config   config                `json:"config"`
	Machine  machine               `json:"machine"`
	Seconds  float64               `json:"seconds"`
	Arms     []string              `json:"arms"`
	Figures  []figure              `json:"figures"`
	Capacity map[string]heldResult `json:"capacity,omitempty"`
	Errors   map[string]int64      `json:"errors"`
	// FirstErrors is the first error an arm met, per test.
	FirstErrors map[string][]string `json:"first_errors,omitempty"`
	// HeldStalls counts the stalled streams of the memory tests of all rounds.
	HeldStalls map[string]int           `json:"memory_test_stalls,omitempty"`
	Records    recordCheck              `json:"records"`
	Targets    []targetLine             `json:"targets"`
	Rounds     map[string][]roundResult `json:"rounds"`
}

type targetLine struct {
	Target  string `json:"target"`
	Arm     string `json:"arm"`
	Value   string `json:"value"`
	Verdict string `json:"verdict"`
}

func isGateway(a string) bool { return strings.HasPrefix(a, "gw-") }

func gatewayLimit(kind targetKind, limit float64) func(string) *target {
	return func(a string) *target {
		if !isGateway(a) {
			return nil
		}
		return &target{kind, limit}
	}
}

func (rep *report) figureDefs() []figureDef {
	c := rep.Config
	defs := []figureDef{
		{key: "throughput", test: "saturation", unit: "rps", compare: byRatio,
			title: fmt.Sprintf("Throughput at saturation (closed loop, %d workers, %s measured after %s warm-up)", c.Concurrency, c.Duration, c.Warmup),
			value: func(r roundResult) float64 { return float64(r.Saturation.RPS) },
			target: func(a string) *target {
				switch {
				case strings.HasPrefix(a, "gw-chat-passthrough"):
					return &target{atLeast, 0.85}
				case isGateway(a):
					return &target{atLeast, 0.70}
				}
				return nil
			}},
		{key: "cpu_per_request", test: "saturation", unit: "µs", compare: byRatio, proxiesOnly: true,
			title: "CPU time per request of the proxy process at saturation (/proc utime+stime)",
			value: func(r roundResult) float64 { return float64(r.Saturation.CPUPerReqUs) }},
		{key: "alloc_per_request", test: "saturation", unit: "KiB", compare: byRatio, proxiesOnly: true,
			title: "Heap allocated per request by the proxy process at saturation (Go runtime's TotalAlloc; each KiB brings the next garbage collection closer)",
			value: func(r roundResult) float64 { return float64(r.Saturation.AllocPerReqKiB) }},
		{key: "gc_per_1000_requests", test: "saturation", unit: "GCs", compare: byRatio, proxiesOnly: true,
			title: "Garbage collections of the proxy process per 1,000 requests at saturation (Go runtime's NumGC)",
			value: func(r roundResult) float64 { return float64(r.Saturation.GCPer1kReq) }},
		{key: "upstream_cpu_per_request", test: "saturation", unit: "µs", compare: byRatio,
			title: "CPU time per request of the fake upstream at saturation (for reference; its fixed costs weigh more at a lower rate)",
			value: func(r roundResult) float64 { return float64(r.Saturation.UpstreamCPUPerReqUs) }},
		percentileDef("latency_p50", "latency", 50, fmt.Sprintf("Latency p50 at %d rps, open loop, send to end of body (%s measured%s)", c.Rate, c.RateDuration, slotNote(c.Slot)),
			func(r roundResult) num { return r.Latency.P50Us }, latencySlots, gatewayLimit(atMost, 50)),
		percentileDef("latency_p90", "latency", 90, fmt.Sprintf("Latency p90 at %d rps", c.Rate),
			func(r roundResult) num { return r.Latency.P90Us }, latencySlots, nil),
		percentileDef("latency_p99", "latency", 99, fmt.Sprintf("Latency p99 at %d rps", c.Rate),
			func(r roundResult) num { return r.Latency.P99Us }, latencySlots, gatewayLimit(atMost, 200)),
		percentileDef("to_upstream_p50", "latency", 50, "Latency split p50, the way to the upstream: from the send to the upstream's receipt of the request (its stamp)",
			func(r roundResult) num { return r.Latency.ToUpstreamP50Us }, toUpSlots, nil),
		percentileDef("from_upstream_p50", "latency", 50, "Latency split p50, the way back: from the upstream's write of the answer (its stamp) to the end of the body",
			func(r roundResult) num { return r.Latency.FromUpstreamP50Us }, fromUpSlots, nil),
		percentileDef("to_upstream_p99", "latency", 99, "Latency split p99, the way to the upstream",
			func(r roundResult) num { return r.Latency.ToUpstreamP99Us }, toUpSlots, nil),
		percentileDef("from_upstream_p99", "latency", 99, "Latency split p99, the way back",
			func(r roundResult) num { return r.Latency.FromUpstreamP99Us }, fromUpSlots, nil),
		percentileDef("clean_p99", "latency", 99, fmt.Sprintf("Latency p99 of the requests that overlapped neither a garbage collection of the proxy (none ended during the request or within %s after it; memstats' PauseEnd) nor a transaction of the gateway's SQLite writer", gcWindow),
			func(r roundResult) num { return r.Latency.CleanP99Us }, cleanSlots, nil),
		shareDef("gc_overlap", "latency", fmt.Sprintf("Share of the requests that overlapped a garbage collection of the proxy (counted as running for %s before its end)", gcWindow),
			func(r roundResult) num { return r.Latency.GCOverlapPct }),
		shareDef("writer_overlap", "latency", "Share of the requests that overlapped a transaction of the gateway's SQLite writer",
			func(r roundResult) num { return r.Latency.WriterOverlapPct }),
		shareDef("slowest_gc", "latency", "Of the slowest 1% of the requests in a round, the share that overlapped a garbage collection of the proxy (what the p99 is made of)",
			func(r roundResult) num { return r.Latency.SlowestGCPct }),
		shareDef("slowest_writer", "latency", "Of the slowest 1% of the requests in a round, the share that overlapped a transaction of the gateway's SQLite writer",
			func(r roundResult) num { return r.Latency.SlowestWriterPct }),
		{key: "sched_wait_p99", test: "latency", unit: "µs", compare: byAdded, proxiesOnly: true,
			title: "Scheduling wait p99 of the proxy process at the fixed rate: how long a runnable goroutine waited for a processor (the Go runtime's /sched/latencies, a bucket's upper bound)",
			value: func(r roundResult) float64 { return float64(r.Latency.SchedWaitP99Us) }},
		{key: "goroutines", test: "latency", unit: "n", compare: byRatio, proxiesOnly: true,
			title: "Goroutines of the proxy process at the fixed rate, the most at the end of a slot (every garbage collection scans each one's stack; an idle keep-alive connection is one on the server side and two on the upstream side)",
			value: func(r roundResult) float64 { return float64(r.Latency.GoroutinesMax) }},
		percentileDef("ttfb_p50", "streams", 50, fmt.Sprintf("Stream time to first content chunk p50 (%s, %d chunks %s apart, upstream latency %s, %s measured%s)", c.streamLoad(), c.Chunks, c.ChunkInterval, c.Latency, c.StreamDuration, slotNote(c.Slot)),
			func(r roundResult) num { return r.Streams.TTFBP50Us }, ttfbSlots, nil),
		percentileDef("ttfb_p99", "streams", 99, "Stream time to first content chunk p99",
			func(r roundResult) num { return r.Streams.TTFBP99Us }, ttfbSlots, gatewayLimit(atMost, 300)),
		percentileDef("ttfb_clean_p99", "streams", 99, "Stream time to first content chunk p99 of the streams whose wait for it overlapped neither a garbage collection of the proxy nor a transaction of the gateway's SQLite writer",
			func(r roundResult) num { return r.Streams.TTFBCleanP99Us }, ttfbCleanSlots, nil),
		shareDef("ttfb_gc_overlap", "streams", "Share of the streams whose wait for the first chunk overlapped a garbage collection of the proxy",
			func(r roundResult) num { return r.Streams.TTFBGCOverlapPct }),
		shareDef("ttfb_writer_overlap", "streams", "Share of the streams whose wait for the first chunk overlapped a transaction of the gateway's SQLite writer",
			func(r roundResult) num { return r.Streams.TTFBWriterOverlapPct }),
		{key: "cpu_per_stream", test: "streams", unit: "µs", compare: byRatio, proxiesOnly: true,
			title: "CPU time per stream of the proxy process in the streaming test (/proc utime+stime)",
			value: func(r roundResult) float64 { return float64(r.Streams.CPUPerStreamUs) }},
		{key: "alloc_per_stream", test: "streams", unit: "KiB", compare: byRatio, proxiesOnly: true,
			title: "Heap allocated per stream by the proxy process in the streaming test (Go runtime's TotalAlloc)",
			value: func(r roundResult) float64 { return float64(r.Streams.AllocPerStreamKiB) }},
		percentileDef("gap_p50", "streams", 50, fmt.Sprintf("Gap between content chunks p50 at arrival (upstream sends them %s apart; the fake's own pacing is in it, see the upstream's gap below)", c.ChunkInterval),
			func(r roundResult) num { return r.Streams.GapP50Us }, gapSlots, nil),
		percentileDef("gap_p99", "streams", 99, "Gap between content chunks p99 at arrival",
			func(r roundResult) num { return r.Streams.GapP99Us }, gapSlots, nil),
		percentileDef("upstream_gap_p50", "streams", 50, "Gap the upstream made between content chunks p50 (their send stamps): the fake's own pacing, on the cores it shares with the proxy",
			func(r roundResult) num { return r.Streams.UpstreamGapP50Us }, upGapSlots, nil),
		percentileDef("relay_p50", "streams", 50, "Chunk relay time p50: from the upstream's write of a content chunk (its send stamp) to its arrival; what the proxy adds to each chunk's way, with the upstream's pacing taken out (the gap target is judged here)",
			func(r roundResult) num { return r.Streams.RelayP50Us }, relaySlots, gatewayLimit(atMost, 50)),
		percentileDef("relay_p99", "streams", 99, "Chunk relay time p99",
			func(r roundResult) num { return r.Streams.RelayP99Us }, relaySlots, nil),
		percentileDef("transit_gap_p99", "streams", 99, "Gap the way through the proxy added between two chunks p99: their gap at arrival minus the gap between their stamps",
			func(r roundResult) num { return r.Streams.TransitGapP99Us }, transitSlots, nil),
		{key: "memory_per_stream", test: "memory", unit: "KiB", compare: byRatio, proxiesOnly: true,
			title: fmt.Sprintf("Memory per open stream: proxy RSS growth with %d streams held open, divided by %d", c.MemStreams, c.MemStreams),
			value: func(r roundResult) float64 {
				if r.Memory == nil {
					return math.NaN()
				}
				return float64(r.Memory.BytesPerStream) / 1024
			},
			target: func(a string) *target {
				if isGateway(a) {
					return &target{atMost, 1.2}
				}
				return nil
			}},
	}
	return slices.Concat(defs, rep.mediaFigureDefs(), rep.jobsFigureDefs(), rep.batchFigureDefs())
}

// mediaFigureDefs are the figures of the media tests (media.go).
func (rep *report) mediaFigureDefs() []figureDef {
	c := rep.Config
	speech := func(f func(*speechResult) num) func(roundResult) num {
		return func(r roundResult) num {
			if r.Speech == nil {
				return nan
			}
			return f(r.Speech)
		}
	}
	speechSlots := func(f func(*speechResult) [][]float64) func(roundResult) [][]float64 {
		return func(r roundResult) [][]float64 {
			if r.Speech == nil {
				return nil
			}
			return f(r.Speech)
		}
	}
	ttfb := speechSlots(func(s *speechResult) [][]float64 { return s.ttfbSlots })
	last := speechSlots(func(s *speechResult) [][]float64 { return s.lastSlots })
	upload := func(f func(*uploadResult) num) func(roundResult) float64 {
		return testValue(func(r roundResult) *uploadResult { return r.Transcription }, f)
	}
	image := func(f func(*satResult) num) func(roundResult) float64 {
		return testValue(func(r roundResult) *satResult { return r.ImageEdit }, f)
	}
	onArm := func(arm string, vsDirect bool, fd figureDef) figureDef {
		fd.arm, fd.vsDirect = arm, vsDirect
		return fd
	}
	upMiB := float64(c.UploadBytes) / mib
	return []figureDef{
		onArm(speechArm, true, percentileDef("speech_ttfb_p50", "speech-ttfb", 50,
			fmt.Sprintf("Speech time to first byte of audio p50: POST /v1/audio/speech at %d/s, open loop, %d pieces of 4 KiB %s apart after %s (%s measured a round, the arms taking turns in %s slots)",
				c.SpeechRate, c.SpeechPieces, c.SpeechGap, c.Latency, c.SpeechDuration, c.SpeechSlot),
			speech(func(s *speechResult) num { return s.TTFBP50Us }), ttfb, nil)),
		onArm(speechArm, true, percentileDef("speech_ttfb_p99", "speech-ttfb", 99, "Speech time to first byte of audio p99",
			speech(func(s *speechResult) num { return s.TTFBP99Us }), ttfb, gatewayLimit(atMost, 1000))),
		onArm(speechArm, true, percentileDef("speech_last_byte_p50", "speech-ttfb", 50, "Speech time to the last byte of audio p50 (the fake's pacing is most of it)",
			speech(func(s *speechResult) num { return s.LastByteP50Us }), last, nil)),
		{key: "transcription_heap_growth", test: "transcription-heap", arm: transcriptionArm, unit: "MB", compare: byAdded, proxiesOnly: true, absolute: true,
			title: fmt.Sprintf("Transcription upload, peak Go heap growth of the proxy over its idle heap (heap objects after a collection, then the most its 1 ms sampler saw during %d sequential uploads of a %.1f MiB WAV; MB = MiB)", c.Uploads, upMiB),
			value: upload(func(u *uploadResult) num { return u.HeapGrowthMB }), target: gatewayLimit(atMost, 2)},
		{key: "transcription_alloc_per_upload", test: "transcription-heap", arm: transcriptionArm, unit: "MB", compare: byRatio, proxiesOnly: true,
			title: "Transcription upload, heap allocated per upload by the proxy (Go runtime's TotalAlloc)",
			value: upload(func(u *uploadResult) num { return u.AllocPerUploadMB })},
		{key: "transcription_rss_growth", test: "transcription-heap", arm: transcriptionArm, unit: "MB", compare: byAdded, proxiesOnly: true,
			title: "Transcription upload, peak RSS growth of the proxy during the uploads (/proc VmHWM, reset before them, less the RSS before them; context)",
			value: upload(func(u *uploadResult) num { return u.RSSGrowthMB })},
		{key: "transcription_seconds_per_upload", test: "transcription-heap", arm: transcriptionArm, unit: "s", compare: byRatio,
			title: "Transcription upload, seconds per upload, send to answer (the gateway writes the upload to its spool file and reads its duration before it sends it on)",
			value: upload(func(u *uploadResult) num { return u.SecondsPerUpload })},
		{key: "image_edit_throughput", test: "image-edit", arm: imageEditArm, unit: "rps", compare: byRatio,
			title:  fmt.Sprintf("Image edit throughput: POST /v1/images/edits with two PNGs of %.1f MB, closed loop, %d workers, %s measured after %s warm-up", float64(c.ImageBytes)/1e6, c.ImageConc, c.ImageDuration, c.Warmup),
			value:  image(func(s *satResult) num { return s.RPS }),
			target: gatewayLimit(atLeast, 0.8)},
		{key: "image_edit_cpu_per_request", test: "image-edit", arm: imageEditArm, unit: "µs", compare: byRatio, proxiesOnly: true,
			title: "Image edit, CPU time per request of the proxy process (/proc utime+stime)",
			value: image(func(s *satResult) num { return s.CPUPerReqUs })},
		{key: "image_edit_alloc_per_request", test: "image-edit", arm: imageEditArm, unit: "KiB", compare: byRatio, proxiesOnly: true,
			title: "Image edit, heap allocated per request by the proxy process (Go runtime's TotalAlloc)",
			value: image(func(s *satResult) num { return s.AllocPerReqKiB })},
	}
}

// testValue is a figure's value read from the result of the test that measured it, NaN in a
// round without one.
func testValue[T any](result func(roundResult) *T, f func(*T) num) func(roundResult) float64 {
	return func(r roundResult) float64 {
		if t := result(r); t != nil {
			return float64(f(t))
		}
		return math.NaN()
	}
}

// build computes the figures, the error counts and the target summary.
func (rep *report) build() {
	series := func(a string, f func(roundResult) float64) []float64 {
		var out []float64
		for _, r := range rep.Rounds[a] {
			out = append(out, f(r))
		}
		return out
	}
	for _, fd := range rep.figureDefs() {
		if !rep.Config.runs(fd.test) || (fd.test == "memory" && rep.Config.MemStreams == 0) {
			continue
		}
		fig := figure{Key: fd.key, Title: fd.title, Unit: fd.unit, Compare: map[compareKind]string{byRatio: "ratio", byAdded: "added"}[fd.compare]}
		ref := series("caddy", fd.value)
		for _, a := range rep.Arms {
			if fd.proxiesOnly && a == "direct" || !fd.covers(a) {
				continue
			}
			vals := series(a, fd.value)
			if fd.arm != "" && a != fd.arm && math.IsNaN(median(vals)) {
				continue // direct or caddy, in a run without the media test's figure of it
			}
			row := figureRow{Arm: a, Median: num(median(vals))}
			for _, v := range vals {
				row.Rounds = append(row.Rounds, num(v))
			}
			f := added
			if fd.compare == byRatio {
				f = ratio
			}
			rounds := perRound(vals, ref, f)
			row.VsCaddy = num(median(rounds))
			for _, v := range rounds {
				row.VsCaddyRounds = append(row.VsCaddyRounds, num(v))
			}
			pooled := false
			if fd.slots != nil && a != "caddy" {
				est, lo, hi, ok := pooledInterval(rep.allSlots(a, fd.slots), rep.allSlots("caddy", fd.slots), fd.pct, bootstrapDraws, 1)
				if ok {
					pooled = true
					e, l, h := num(est), num(lo), num(hi)
					row.Pooled, row.Low, row.High = &e, &l, &h
				}
			}
			if fd.vsDirect && a != "direct" && a != "caddy" {
				if d := perRound(vals, series("direct", fd.value), added); len(d) > 0 {
					v := num(median(d))
					row.VsDirect = &v
					var each []string
					for _, x := range d {
						row.VsDirectRounds = append(row.VsDirectRounds, num(x))
						each = append(each, fmtCompare(fd, x))
					}
					row.Note = fmt.Sprintf("minus direct's (the fake itself): %s, per round %s", fmtCompare(fd, float64(v)), strings.Join(each, " "))
				}
			}
			if t := fd.target; t != nil && fd.absolute {
				if t := t(a); t != nil {
					row.Target = t.labelAbsolute(fd)
					row.Verdict = t.verdict(float64(row.Median))
					var each []string
					for _, v := range vals {
						each = append(each, fmtValue(v))
					}
					value := fmt.Sprintf("%s %s (per round %s)", fmtValue(float64(row.Median)), fd.unit, strings.Join(each, " "))
					rep.Targets = append(rep.Targets, targetLine{Target: fd.key + " " + row.Target, Arm: a, Value: value, Verdict: row.Verdict})
				}
			} else if fd.target != nil {
				if t := fd.target(a); t != nil {
					row.Target = t.label(fd)
					value := fmtCompare(fd, float64(row.VsCaddy))
					row.Verdict = t.verdict(float64(row.VsCaddy))
					if pooled {
						row.Verdict = t.verdictWithin(float64(*row.Low), float64(*row.High))
						value += fmt.Sprintf(" (pooled %s, 95%% %s)", fmtCompare(fd, float64(*row.Pooled)), fmtInterval(fd, float64(*row.Low), float64(*row.High)))
					}
					rep.Targets = append(rep.Targets, targetLine{Target: fd.key + " " + row.Target, Arm: a, Value: value, Verdict: row.Verdict})
				}
			}
			if fd.test == "latency" && rep.Config.runs("saturation") {
				if sat := median(series(a, func(r roundResult) float64 { return float64(r.Saturation.RPS) })); sat < float64(rep.Config.Rate) {
					row.Note = fmt.Sprintf("over capacity (saturates at %.0f rps)", sat)
				}
			}
			fig.Rows = append(fig.Rows, row)
		}
		rep.Figures = append(rep.Figures, fig)
	}

	rep.Errors, rep.FirstErrors, rep.HeldStalls = map[string]int64{}, map[string][]string{}, map[string]int{}
	for _, a := range rep.Arms {
		var n int64
		note := func(test, first string) {
			if first != "" {
				rep.FirstErrors[a] = append(rep.FirstErrors[a], test+": "+first)
			}
		}
		if _, held := rep.Capacity[a]; len(rep.Rounds[a]) == 0 && !held {
			continue // an arm of no test that ran
		}
		for _, r := range rep.Rounds[a] {
			n += r.Saturation.Errors + r.Latency.Errors + r.Latency.Dropped + r.Streams.Errors
			note("saturation", r.Saturation.FirstError)
			note("latency", r.Latency.FirstError)
			note("streams", r.Streams.FirstError)
			if s := r.Speech; s != nil {
				n += s.Errors
				note("speech-ttfb", s.FirstError)
			}
			if u := r.Transcription; u != nil {
				n += u.Errors
				note("transcription-heap", u.FirstError)
			}
			if s := r.ImageEdit; s != nil {
				n += s.Errors
				note("image-edit", s.FirstError)
			}
			if v := r.Video; v != nil {
				n += v.Errors
				note("video-content", v.FirstError)
			}
			if j := r.Jobs; j != nil {
				for _, l := range []latResult{j.IdleBefore, j.Live, j.IdleAfter} {
					n += l.Errors + l.Dropped
					note("jobs-load chat", l.FirstError)
				}
				n += j.Errors
				note("jobs-load", j.FirstError)
			}
			if bl := r.Batch; bl != nil {
				for _, l := range []latResult{bl.Idle, bl.DuringClient, bl.DuringBatch} {
					n += l.Errors + l.Dropped
					note("batch-load chat", l.FirstError)
				}
				n += bl.Errors
				note("batch-load", bl.FirstError)
			}
			if r.Memory != nil {
				n += r.Memory.Errors
				note("memory", r.Memory.FirstError)
				rep.HeldStalls[a] += r.Memory.Stalled
			}
		}
		if c, ok := rep.Capacity[a]; ok {
			n += c.Errors
			note("capacity", c.FirstError)
		}
		rep.Errors[a] = n
		v := "pass"
		if n != 0 {
			v = "FAIL"
		}
		rep.Targets = append(rep.Targets, targetLine{Target: "errors = 0", Arm: a, Value: fmt.Sprint(n), Verdict: v})
	}
	for _, a := range rep.Arms {
		c, ok := rep.Capacity[a]
		if !ok {
			continue
		}
		v := "pass"
		if c.Stalled != 0 || c.Completed != c.Streams {
			v = "FAIL"
		}
		rep.Targets = append(rep.Targets, targetLine{Target: fmt.Sprintf("%d concurrent streams, none stalled", c.Streams), Arm: a,
			Value: fmt.Sprintf("%d completed, %d stalled", c.Completed, c.Stalled), Verdict: v})
	}
	v := "pass"
	if rep.Records.Lost != 0 || rep.Records.Error != "" {
		v = "FAIL"
	}
	rep.Targets = append(rep.Targets, targetLine{Target: "lost records = 0", Arm: "gateway",
		Value: fmt.Sprintf("%d (%d answers, %d rows)", rep.Records.Lost, rep.Records.Answered, rep.Records.Rows), Verdict: v})
}

// allSlots strings together an arm's slots of every round, in round order: slot i of two
// arms is a pair measured moments apart as long as both have every slot.
func (rep *report) allSlots(a string, slots func(roundResult) [][]float64) [][]float64 {
	var out [][]float64
	for _, r := range rep.Rounds[a] {
		out = append(out, slots(r)...)
	}
	return out
}

func fmtInterval(fd figureDef, lo, hi float64) string {
	return fmt.Sprintf("%+.0f…%+.0f %s", lo, hi, fd.unit)
}

func (t target) label(fd figureDef) string {
	op := ">="
	if t.kind == atMost {
		op = "<="
	}
	if fd.compare == byRatio {
		return fmt.Sprintf("%s %.2fx", op, t.limit)
	}
	return fmt.Sprintf("%s +%.0f %s", op, t.limit, fd.unit)
}

// labelAbsolute is the label of a target on the arm's own value.
func (t target) labelAbsolute(fd figureDef) string {
	op := ">="
	if t.kind == atMost {
		op = "<="
	}
	return fmt.Sprintf("%s %s %s", op, fmtValue(t.limit), fd.unit)
}

func fmtCompare(fd figureDef, v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case fd.compare == byRatio:
		return fmt.Sprintf("%.2fx", v)
	case fd.unit == "%", fd.unit == "MB", fd.unit == "s":
		return fmt.Sprintf("%+.2f %s", v, fd.unit)
	}
	return fmt.Sprintf("%+.0f %s", v, fd.unit)
}

func fmtValue(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// noisySteal is the share of stolen CPU above which a run's timed figures mostly measure the
// hypervisor: on a 2-vCPU host at 13–35%, plain Caddy's own p99 at 1,000 rps ranged from 4
// to 44 ms between rounds, and a gateway arm's throughput from 0.47× to 2.85× of Caddy's.
const noisySteal = 5.0

// stealNote reports the CPU time the hypervisor took, over the run and in each round, and
// warns when it is enough to drown the timed figures; "" when unknown.
func stealNote(total float64, rounds []float64) string {
	if total < 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "CPU time stolen by the hypervisor during the run: %.1f%%", total)
	if len(rounds) > 1 {
		b.WriteString(" (per round:")
		for _, r := range rounds {
			if r < 0 {
				b.WriteString(" ?")
			} else {
				fmt.Fprintf(&b, " %.1f%%", r)
			}
		}
		b.WriteString(")")
	}
	b.WriteString("\n")
	if total >= noisySteal {
		fmt.Fprintf(&b, "warning: with %.0f%% or more of the CPU stolen, the timed figures (throughput, latency, time to first byte) mostly measure the hypervisor and their verdicts may flip either way; heap and collections per request still hold. Judge the rest on a quieter run\n", noisySteal)
	}
	return b.String()
}

func (rep *report) print(w io.Writer) {
	m := rep.Machine
	fmt.Fprintf(w, "\ngatewaybench: %d CPUs (%s), %s, kernel %s, source %s; load average %s before, %s after; %.0f s\n",
		m.CPUs, m.CPU, m.Go, m.Kernel, m.Source, m.LoadBefore, m.LoadAfter, rep.Seconds)
	if note := stealNote(m.StealPercent, m.RoundSteal); note != "" {
		fmt.Fprint(w, note)
	}
	if len(m.RuntimeEnv) > 0 {
		fmt.Fprintf(w, "every process of the run, plain Caddy's included, ran with %s\n", strings.Join(m.RuntimeEnv, " "))
	}
	if c := rep.Config.ProxyCPUs; c != "" {
		fmt.Fprintf(w, "both proxies pinned to CPU %s; the load generator and the fake upstream on the others\n", c)
	}
	fmt.Fprintf(w, "values are medians of %d round(s); \"vs caddy\" is the median of the per-round ratios or differences to plain Caddy;\n", rep.Config.Rounds)
	fmt.Fprintf(w, "\"pooled\" is the percentile of all slots' samples minus Caddy's, with a 95%% interval from resampling slot pairs (targets on these figures are judged on that interval)\n")
	defs := map[string]figureDef{}
	for _, fd := range rep.figureDefs() {
		defs[fd.key] = fd
	}
	for _, fig := range rep.Figures {
		fd := defs[fig.Key]
		fmt.Fprintf(w, "\n%s\n", fig.Title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		head := "ratio"
		if fd.compare == byAdded {
			head = "added"
		}
		pooledHead := ""
		if fd.slots != nil {
			pooledHead = "pooled, 95% interval\t"
		}
		perRound := "per round"
		if fd.absolute {
			perRound = "per round, " + fig.Unit
		}
		fmt.Fprintf(tw, "arm\t%s\t%s vs caddy\t%starget\t\t%s\t\n", fig.Unit, head, pooledHead, perRound)
		notes := false
		for _, r := range fig.Rows {
			vs := fmtCompare(fd, float64(r.VsCaddy))
			var each []string
			for _, v := range r.VsCaddyRounds {
				each = append(each, fmtCompare(fd, float64(v)))
			}
			if fd.absolute {
				each = each[:0]
				for _, v := range r.Rounds {
					each = append(each, fmtValue(float64(v)))
				}
			}
			rounds := strings.Join(each, " ")
			if (r.Arm == "caddy" && !fd.absolute) || len(each) < 2 {
				rounds = ""
			}
			if r.Arm == "caddy" {
				vs = ""
			}
			pooled := ""
			if fd.slots != nil {
				if r.Pooled != nil {
					pooled = fmt.Sprintf("%s (%s)", fmtCompare(fd, float64(*r.Pooled)), fmtInterval(fd, float64(*r.Low), float64(*r.High)))
				}
				pooled += "\t"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s%s\t%s\t%s\t\n", r.Arm, fmtValue(float64(r.Median)), vs, pooled, r.Target, r.Verdict, rounds)
			notes = notes || r.Note != ""
		}
		_ = tw.Flush()
		if notes {
			for _, r := range fig.Rows {
				if r.Note != "" {
					fmt.Fprintf(w, "  %s: %s\n", r.Arm, r.Note)
				}
			}
		}
	}
	if len(rep.Capacity) > 0 {
		fmt.Fprintf(w, "\nCapacity: streams held open at once, then released (%d chunks, %s apart; stalled = not opened, not finished, or silent > interval + %s)\n",
			rep.Config.HoldChunks, rep.Config.HoldInterval, rep.Config.Stall)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "arm\tstreams\topened\topen s\tcompleted\tstalled\tmax gap ms\tKiB/stream\tvs caddy\t\n")
		ref := rep.Capacity["caddy"]
		for _, a := range rep.Arms {
			c, ok := rep.Capacity[a]
			if !ok {
				continue
			}
			kib := float64(c.BytesPerStream) / 1024
			vs := ""
			if a != "caddy" {
				vs = fmtValue(ratio(float64(c.BytesPerStream), float64(ref.BytesPerStream))) + "x"
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%d\t%d\t%.0f\t%s\t%s\t\n", a, c.Streams, c.Opened, float64(c.OpenSeconds), c.Completed, c.Stalled, float64(c.MaxGapMs), fmtValue(kib), vs)
		}
		_ = tw.Flush()
	}
	fmt.Fprintf(w, "\nErrors (all tests and rounds; first error of each test in the JSON):")
	for _, a := range rep.Arms {
		if n, ok := rep.Errors[a]; ok {
			fmt.Fprintf(w, " %s %d;", a, n)
		}
	}
	fmt.Fprintln(w)
	for _, a := range rep.Arms {
		for _, e := range rep.FirstErrors[a] {
			fmt.Fprintf(w, "  %s: %s\n", a, e)
		}
	}
	if len(rep.HeldStalls) > 0 {
		fmt.Fprintf(w, "Stalled streams in the memory tests of all rounds:")
		for _, a := range rep.Arms {
			if n, ok := rep.HeldStalls[a]; ok {
				fmt.Fprintf(w, " %s %d;", a, n)
			}
		}
		fmt.Fprintln(w)
	}
	rc := rep.Records
	statuses := make([]string, 0, len(rc.ByStatus))
	for s, n := range rc.ByStatus {
		statuses = append(statuses, fmt.Sprintf("%s: %d", s, n))
	}
	sort.Strings(statuses)
	fmt.Fprintf(w, "Records: %d gateway answers with status 200, %d generation rows (%s), lost %d (rows caught up %.1f s after the last test)%s\n",
		rc.Answered, rc.Rows, strings.Join(statuses, ", "), rc.Lost, rc.WaitSeconds, map[bool]string{true: " (" + rc.Error + ")", false: ""}[rc.Error != ""])

	fmt.Fprintf(w, "\nTargets\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	pass, fail, unsure := 0, 0, 0
	for _, t := range rep.Targets {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.Verdict, t.Target, t.Arm, t.Value)
		switch t.Verdict {
		case "pass":
			pass++
		case "FAIL":
			fail++
		case "unsure":
			unsure++
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "%d passed, %d failed", pass, fail)
	if unsure > 0 {
		fmt.Fprintf(w, ", %d unsure (the 95%% interval of the pooled difference holds both sides of the target: this run's noise cannot tell)", unsure)
	}
	fmt.Fprintln(w)
}

func slotNote(slot time.Duration) string {
	if slot <= 0 {
		return ""
	}
	return fmt.Sprintf(", the arms taking turns in %s slots", slot)
}
