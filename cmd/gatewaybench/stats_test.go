package main

import (
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestPercentile(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(100 - i) // 100..1, unsorted on purpose
	}
	tests := []struct {
		name string
		xs   []float64
		p    float64
		want float64
	}{
		{"empty", nil, 50, math.NaN()},
		{"one value", []float64{7}, 99, 7},
		{"p50 of 1..100", hundred, 50, 50},
		{"p99 of 1..100", hundred, 99, 99},
		{"p100 of 1..100", hundred, 100, 100},
		{"tiny p is the minimum", []float64{3, 1, 2}, 0.1, 1},
		{"p50 of three", []float64{3, 1, 2}, 50, 2},
		{"p99 of ten is the maximum", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 99, 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			xs := append([]float64(nil), tc.xs...)
			got := percentile(xs, tc.p)
			if !same(got, tc.want) {
				t.Fatalf("percentile(%v, %v) = %v, want %v", tc.xs, tc.p, got, tc.want)
			}
		})
	}
}

func TestMedianRatioAdded(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name string
		got  float64
		want float64
	}{
		{"median odd", median([]float64{5, 1, 3}), 3},
		{"median even", median([]float64{4, 1, 3, 2}), 2.5},
		{"median skips NaN", median([]float64{nan, 1, 3}), 2},
		{"median of nothing", median(nil), nan},
		{"ratio", ratio(850, 1000), 0.85},
		{"ratio by zero", ratio(1, 0), nan},
		{"ratio of unknown", ratio(nan, 1), nan},
		{"added", added(350, 300), 50},
		{"added unknown", added(1, nan), nan},
		{"pairwise ratio is the median of per-round ratios", pairwise([]float64{80, 90, 200}, []float64{100, 100, 100}, ratio), 0.9},
		{"pairwise added", pairwise([]float64{110, 130, 120}, []float64{100, 100, 100}, added), 20},
		{"pairwise uneven lengths", pairwise([]float64{2, 4}, []float64{1}, ratio), 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !same(tc.got, tc.want) {
				t.Fatalf("got %v, want %v", tc.got, tc.want)
			}
		})
	}
}

func TestTargetCheck(t *testing.T) {
	tests := []struct {
		name string
		tg   target
		v    float64
		want string
	}{
		{"ratio at least, pass", target{kind: atLeast, limit: 0.85}, 0.9, "pass"},
		{"ratio at least, fail", target{kind: atLeast, limit: 0.85}, 0.8, "FAIL"},
		{"at most, pass on the limit", target{kind: atMost, limit: 50}, 50, "pass"},
		{"at most, fail", target{kind: atMost, limit: 50}, 51, "FAIL"},
		{"unknown value", target{kind: atMost, limit: 50}, math.NaN(), "n/a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.tg.verdict(tc.v); got != tc.want {
				t.Fatalf("verdict(%v) = %q, want %q", tc.v, got, tc.want)
			}
		})
	}
}

func TestParseDirective(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"Hi [bench n=12 i=5ms l=1ms h=r1-caddy]"}]}`)
	d := parseDirective(body)
	if d.n != 12 || d.interval.Milliseconds() != 5 || d.latency.Milliseconds() != 1 || d.hold != "r1-caddy" {
		t.Fatalf("parseDirective = %+v", d)
	}
	if d := parseDirective([]byte(`{"messages":[]}`)); d.n != 1 || d.hold != "" {
		t.Fatalf("no directive: %+v", d)
	}
	for _, tc := range []struct {
		body string
		key  string
		want bool
	}{
		{`{"stream":true}`, "stream", true},
		{`{"stream" : true,"x":1}`, "stream", true},
		{`{"stream_options":{"include_usage":true},"stream":false}`, "stream", false},
		{`{"stream_options":{"include_usage":true}}`, "include_usage", true},
		{`{}`, "stream", false},
	} {
		if got := jsonTrue([]byte(tc.body), tc.key); got != tc.want {
			t.Errorf("jsonTrue(%s, %s) = %v, want %v", tc.body, tc.key, got, tc.want)
		}
	}
}

func same(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return math.Abs(a-b) < 1e-9
}

func TestSplitCPUs(t *testing.T) {
	p, r, err := splitCPUs("1", 2)
	if err != nil || cpuList(p) != "1" || cpuList(r) != "0" {
		t.Fatalf("1 of 2: %v %v %v", p, r, err)
	}
	p, r, err = splitCPUs("2-3,1", 4)
	if err != nil || cpuList(p) != "1,2,3" || cpuList(r) != "0" {
		t.Fatalf("2-3,1 of 4: %v %v %v", p, r, err)
	}
	for _, bad := range []string{"0,1", "2", "x", "3-1", "-1", ""} {
		if _, _, err := splitCPUs(bad, 2); err == nil {
			t.Errorf("%q of 2 accepted", bad)
		}
	}
}

func TestParseVariant(t *testing.T) {
	env, err := parseVariant("  GOGC=400 GODEBUG=gctrace=1  ")
	if err != nil || len(env) != 2 || env[0] != "GOGC=400" || env[1] != "GODEBUG=gctrace=1" {
		t.Fatalf("got %q, %v", env, err)
	}
	if env, err := parseVariant(""); err != nil || env != nil {
		t.Fatalf("empty: %q, %v", env, err)
	}
	for _, bad := range []string{"GOGC", "=1", "GOGC=1 X"} {
		if _, err := parseVariant(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestStealSince(t *testing.T) {
	total, steal, ok := cpuTimes()
	if !ok {
		t.Skip("no /proc/stat")
	}
	if steal < 0 || steal > total {
		t.Fatalf("steal %d of %d", steal, total)
	}
	if got := stealSince(total, steal, false); got != -1 {
		t.Fatalf("unknown start: %v, want -1", got)
	}
	// A reading from the future has no interval to measure.
	if got := stealSince(total+1<<40, steal, true); got != -1 {
		t.Fatalf("no interval: %v, want -1", got)
	}
	if got := stealSince(total-100, steal, true); got < 0 || got > 100 {
		t.Fatalf("steal %v%% out of range", got)
	}
}

func TestParseArms(t *testing.T) {
	want, err := parseArms("all")
	if err != nil || want[smallWalletArm] || want[cheapTranslatedArm] || !want["caddy"] || !want["direct"] || !want["gw-chat-translated"] {
		t.Fatalf("all: %v, %v", want, err)
	}
	want, err = parseArms(" gw-chat-passthrough , " + smallWalletArm)
	if err != nil || !want["caddy"] || !want["gw-chat-passthrough"] || !want[smallWalletArm] || want["direct"] {
		t.Fatalf("named: %v, %v", want, err)
	}
	if want, err = parseArms(smallWalletArm + ",all"); err != nil || !want[smallWalletArm] || !want["direct"] {
		t.Fatalf("all after a named arm keeps it: %v, %v", want, err)
	}
	if _, err := parseArms("gw-chat-passthru"); err == nil {
		t.Fatal("an unknown arm is accepted")
	}
}

func TestVerdictWithin(t *testing.T) {
	tg := target{kind: atMost, limit: 200}
	for _, tc := range []struct {
		lo, hi float64
		want   string
	}{
		{-50, 150, "pass"}, {250, 900, "FAIL"}, {100, 300, "unsure"}, {math.NaN(), math.NaN(), "n/a"},
	} {
		if got := tg.verdictWithin(tc.lo, tc.hi); got != tc.want {
			t.Errorf("verdictWithin(%v, %v) = %q, want %q", tc.lo, tc.hi, got, tc.want)
		}
	}
}

// slotsOf makes n slots of k samples each: base plus a spread of 0..99 µs, and, in the
// slots stalled marks, a tail of stall µs (a host hiccup: it spoils a slot, not a sample).
func slotsOf(n, k int, base float64, stalled map[int]bool, stall float64) [][]float64 {
	out := make([][]float64, n)
	for i := range out {
		for j := range k {
			v := base + float64(j%100)
			if stalled[i] && j%10 == 0 {
				v += stall
			}
			out[i] = append(out[i], v)
		}
	}
	return out
}

func TestPooledInterval(t *testing.T) {
	ref := slotsOf(36, 250, 2000, nil, 0)

	// A steady 500 µs more: found, and tightly bounded.
	est, lo, hi, ok := pooledInterval(slotsOf(36, 250, 2500, nil, 0), ref, 99, 400, 1)
	if !ok || est != 500 || lo != 500 || hi != 500 {
		t.Fatalf("shifted by 500: %v (%v…%v) ok=%v", est, lo, hi, ok)
	}

	// The same machine noise in both: the p99 difference is zero within its interval.
	noisy := func(seedSlots ...int) map[int]bool {
		m := map[int]bool{}
		for _, i := range seedSlots {
			m[i] = true
		}
		return m
	}
	armN := slotsOf(36, 250, 2000, noisy(3, 17, 30), 8000)
	refN := slotsOf(36, 250, 2000, noisy(5, 11, 28), 8000)
	est, lo, hi, ok = pooledInterval(armN, refN, 99, 400, 1)
	if !ok || lo > 0 || hi < 0 || est != 0 {
		t.Fatalf("equal noise: %v (%v…%v), want 0 inside the interval", est, lo, hi)
	}
	// ...but a stall in a few of one arm's slots makes the interval wide: one run cannot
	// tell a p99 within a 200 µs target from one far above it.
	armS := slotsOf(36, 250, 2000, noisy(3, 17), 8000)
	est, lo, hi, ok = pooledInterval(armS, ref, 99, 400, 1)
	if !ok || hi-lo < 1000 || (target{atMost, 200}).verdictWithin(lo, hi) != "unsure" {
		t.Fatalf("stalled slots: %v (%v…%v), want an interval across the 200 µs target", est, lo, hi)
	}

	// Deterministic for a seed; pairs with an empty side are left out; too few pairs fail.
	e2, l2, h2, _ := pooledInterval(armS, ref, 99, 400, 1)
	if e2 != est || l2 != lo || h2 != hi {
		t.Fatal("the same seed gave another interval")
	}
	withEmpty := append(slotsOf(minPairs, 10, 100, nil, 0), nil)
	if _, _, _, ok := pooledInterval(withEmpty, slotsOf(minPairs+1, 10, 100, nil, 0), 50, 10, 1); !ok {
		t.Fatal("enough full pairs and an empty slot: no interval")
	}
	withEmpty[0] = nil
	if _, _, _, ok := pooledInterval(withEmpty, slotsOf(minPairs+1, 10, 100, nil, 0), 50, 10, 1); ok {
		t.Fatal("an interval from too few pairs, an empty slot counted as one")
	}
}

// TestBuildJudgesOnThePooledInterval: a latency target is judged on the pooled interval of
// the slots, not on the median of the rounds.
func TestBuildJudgesOnThePooledInterval(t *testing.T) {
	round := func(base float64, stalled map[int]bool) roundResult {
		s := slotsOf(12, 250, base, stalled, 8000)
		return roundResult{Latency: latResult{P50Us: num(base + 50), P99Us: num(base + 99), slots: s}}
	}
	rep := &report{Config: config{Tests: "latency", Rounds: 3, Rate: 1000}, Arms: []string{"caddy", "gw-chat-passthrough", "gw-chat-translated"},
		Rounds: map[string][]roundResult{
			"caddy":               {round(2000, nil), round(2000, nil), round(2000, nil)},
			"gw-chat-passthrough": {round(2030, nil), round(2030, nil), round(2030, nil)},
			// The rounds' p99 says +99 µs, but two slots had a stall.
			"gw-chat-translated": {round(2000, map[int]bool{4: true}), round(2000, nil), round(2000, map[int]bool{9: true})},
		}}
	rep.build()
	got := map[string]string{}
	for _, tl := range rep.Targets {
		got[tl.Target+" "+tl.Arm] = tl.Verdict
	}
	for k, want := range map[string]string{
		"latency_p50 <= +50 µs gw-chat-passthrough":  "pass",
		"latency_p99 <= +200 µs gw-chat-passthrough": "pass",
		"latency_p50 <= +50 µs gw-chat-translated":   "pass",
		"latency_p99 <= +200 µs gw-chat-translated":  "unsure",
	} {
		if got[k] != want {
			t.Errorf("%s: %q, want %q (all: %v)", k, got[k], want, got)
		}
	}
}

// TestPooledPercentile: the percentile of a resample of slots is the percentile of their
// samples put together, repeated slots and ties included.
func TestPooledPercentile(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	slots := make([]sortedSlot, 9)
	for i := range slots {
		xs := make([]float64, 1+rng.IntN(40))
		for j := range xs {
			xs[j] = float64(rng.IntN(50)) // ties on purpose
		}
		slots[i] = sortSlot(xs)
	}
	pl := newPooled(slots)
	for range 200 {
		pick := make([]int, 1+rng.IntN(12))
		var cat []float64
		for i := range pick {
			pick[i] = rng.IntN(len(slots))
			cat = append(cat, slots[pick[i]]...)
		}
		for _, p := range []float64{1, 50, 90, 99, 100} {
			if got, want := pl.percentile(pick, p), percentile(slices.Clone(cat), p); got != want {
				t.Fatalf("p%v of %v: %v, want %v", p, pick, got, want)
			}
		}
	}
}

// TestSchedHist: waits are added up as differences between two reads of one process, and
// the percentile is the bound of the bucket that holds it.
func TestSchedHist(t *testing.T) {
	up := []float64{1, 10, 100, 1000, math.MaxFloat64}
	var h schedHist
	if !math.IsNaN(h.percentile(99)) {
		t.Fatal("a percentile of nothing")
	}
	h.add(&schedHist{up, []uint64{5, 5, 0, 0, 0}}, &schedHist{up, []uint64{95, 7, 1, 1, 0}})       // +90 +2 +1 +1
	h.add(nil, &schedHist{up, []uint64{1, 1, 1, 1, 1}})                                            // no first read: ignored
	h.add(&schedHist{up[:2], []uint64{0, 0}}, &schedHist{up, []uint64{9, 9, 9, 9, 9}})             // another histogram: ignored
	for p, want := range map[float64]float64{50: 1, 95: 1, 97: 10, 98: 100, 99: 1000, 100: 1000} { // of 94 waits
		if got := h.percentile(p); got != want {
			t.Errorf("p%v = %v, want %v (counts %v)", p, got, want, h.Counts)
		}
	}
}

// TestRuntimeEnv: the Go runtime settings in the environment, which every process of a run
// inherits, are named in the report; others are not.
func TestRuntimeEnv(t *testing.T) {
	for _, k := range []string{"GOGC", "GOMEMLIMIT", "GOMAXPROCS", "GODEBUG"} {
		if v, ok := os.LookupEnv(k); ok {
			t.Setenv(k, v) // restored afterwards
			os.Unsetenv(k)
		}
	}
	if got := runtimeEnv(); len(got) != 0 {
		t.Fatalf("runtimeEnv() = %v with none set", got)
	}
	t.Setenv("GOGC", "200")
	t.Setenv("GOFLAGS", "-count=1")
	if got := runtimeEnv(); !slices.Equal(got, []string{"GOGC=200"}) {
		t.Fatalf("runtimeEnv() = %v, want [GOGC=200]", got)
	}
}

// TestStealNote: the run's stolen CPU with each round's, a warning from noisySteal on, and
// nothing when the figure is unknown.
func TestStealNote(t *testing.T) {
	if got := stealNote(-1, nil); got != "" {
		t.Fatalf("unknown: %q", got)
	}
	if got, want := stealNote(0.4, []float64{0.3, 0.5}), "CPU time stolen by the hypervisor during the run: 0.4% (per round: 0.3% 0.5%)\n"; got != want {
		t.Fatalf("quiet: %q, want %q", got, want)
	}
	got := stealNote(16.7, []float64{12, -1, 25.1})
	if !strings.HasPrefix(got, "CPU time stolen by the hypervisor during the run: 16.7% (per round: 12.0% ? 25.1%)\nwarning: with 5% or more") {
		t.Fatalf("noisy: %q", got)
	}
	if got := stealNote(3, []float64{3}); strings.Contains(got, "per round") || strings.Contains(got, "warning") {
		t.Fatalf("one quiet round: %q", got)
	}
}
