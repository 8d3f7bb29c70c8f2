package main

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"time"
)

// percentile is the nearest-rank p-th percentile (0 < p <= 100) of xs, which it sorts in
// place; NaN when xs is empty.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	slices.Sort(xs)
	rank := int(math.Ceil(p / 100 * float64(len(xs))))
	rank = min(max(rank, 1), len(xs))
	return xs[rank-1]
}

// median is the middle value of xs (the mean of the two middle ones for an even count),
// ignoring NaNs; NaN when nothing is left. xs is not modified.
func median(xs []float64) float64 {
	v := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// ratio is a/b, NaN when either is unknown or b is not positive.
func ratio(a, b float64) float64 {
	if math.IsNaN(a) || math.IsNaN(b) || b <= 0 {
		return math.NaN()
	}
	return a / b
}

// added is a-b, NaN when either is unknown.
func added(a, b float64) float64 {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	return a - b
}

// micros converts a duration to float microseconds.
func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// pairwise applies f to the arm's and the reference's values round by round and returns
// the median of the results: pairing values measured in the same round cancels most of the
// drift of a shared machine's load between rounds.
func pairwise(arm, ref []float64, f func(a, b float64) float64) float64 {
	return median(perRound(arm, ref, f))
}

// perRound applies f to the arm's and the reference's values round by round.
func perRound(arm, ref []float64, f func(a, b float64) float64) []float64 {
	n := min(len(arm), len(ref))
	out := make([]float64, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, f(arm[i], ref[i]))
	}
	return out
}

// num is a figure that may be unknown (NaN); it is null in JSON, which has no NaN.
type num float64

var nan = num(math.NaN())

func (n num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, math.Round(f*1000)/1000, 'f', -1, 64), nil
}

// pooledInterval compares an arm with the reference at percentile p, over their slots
// pooled: the arms take turns in slots, so slot i of the two ran moments apart, on the same
// state of the machine, and each slot holds that moment's samples. est is the percentile of
// the arm's pooled samples minus the reference's; lo and hi bound a 95% interval of that
// difference, from draws resamples of the slot pairs with replacement (a paired bootstrap:
// a host stall spoils a pair, and a resample holds it as often as chance draws it). Pairs
// where either slot is empty are left out; ok is false with fewer than minPairs left, too
// few for a resample to stand for the run.
// minPairs is the fewest slot pairs pooledInterval bounds a difference from (a default run
// has 36: 3 rounds of 12 slots).
const minPairs = 10

func pooledInterval(arm, ref [][]float64, p float64, draws int, seed uint64) (est, lo, hi float64, ok bool) {
	var a, r []sortedSlot
	for i := range min(len(arm), len(ref)) {
		if len(arm[i]) > 0 && len(ref[i]) > 0 {
			a, r = append(a, sortSlot(arm[i])), append(r, sortSlot(ref[i]))
		}
	}
	if len(a) < minPairs || draws < 1 {
		return math.NaN(), math.NaN(), math.NaN(), false
	}
	pa, pr := newPooled(a), newPooled(r)
	pick := make([]int, len(a))
	for i := range pick {
		pick[i] = i
	}
	est = pa.percentile(pick, p) - pr.percentile(pick, p)
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	ds := make([]float64, draws)
	for k := range ds {
		for i := range pick {
			pick[i] = rng.IntN(len(a))
		}
		ds[k] = pa.percentile(pick, p) - pr.percentile(pick, p)
	}
	slices.Sort(ds)
	at := func(q float64) float64 { return ds[min(int(q*float64(draws)), draws-1)] }
	return est, at(0.025), at(0.975), true
}

// sortedSlot is a slot's samples in order.
type sortedSlot []float64

func sortSlot(xs []float64) sortedSlot {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s
}

// pooled finds percentiles of unions of slots, drawn with repetition, without merging them:
// a resample of 60 slots of a default run's gaps holds about 100,000 samples, and sorting
// each of 400 resamples took a minute.
type pooled struct {
	slots []sortedSlot
	all   []float64 // every sample of every slot, in order: the candidates
}

func newPooled(slots []sortedSlot) *pooled {
	var all []float64
	for _, s := range slots {
		all = append(all, s...)
	}
	slices.Sort(all)
	return &pooled{slots: slots, all: all}
}

// percentile is the nearest-rank p-th percentile of the samples of the slots pick names (a
// slot named twice counts twice), as percentile of their concatenation would return it.
func (pl *pooled) percentile(pick []int, p float64) float64 {
	n := 0
	for _, i := range pick {
		n += len(pl.slots[i])
	}
	rank := min(max(int(math.Ceil(p/100*float64(n))), 1), n)
	atMost := func(v float64) int {
		c := 0
		for _, i := range pick {
			s := pl.slots[i]
			c += sort.Search(len(s), func(j int) bool { return s[j] > v })
		}
		return c
	}
	// The answer is the smallest sample v with at least rank samples at or below it.
	k := sort.Search(len(pl.all), func(j int) bool { return atMost(pl.all[j]) >= rank })
	return pl.all[k]
}
