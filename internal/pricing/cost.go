package pricing

import (
	"math/bits"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/meter"
)

// Usage is what one call consumed, by dimension (meter.Usage): the one type providers
// report, pricing prices and the store records.
type Usage = meter.Usage

// CostLine is one priced dimension of a cost (meter.CostLine).
type CostLine = meter.CostLine

// quantity is the usage's quantity in the dimension at index i, in the units of its cost
// line: seconds are whole started ones, and every call is one request at least, so that a
// fee per request is never forgotten.
func quantity(u *Usage, i int) int64 {
	switch i {
	case iInput:
		return u.Input
	case iCachedInput:
		return u.CachedInput
	case iCacheWrite:
		return u.CacheWrite
	case iOutput:
		return u.Output
	case iReasoning:
		return u.Reasoning
	case iInputAudioTokens:
		return u.InputAudioTokens
	case iOutputAudioTokens:
		return u.OutputAudioTokens
	case iImageInputTokens:
		return u.ImageInputTokens
	case iImageOutputTokens:
		return u.ImageOutputTokens
	case iInputCharacters:
		return u.InputCharacters
	case iInputAudioSeconds:
		return startedSeconds(u.InputAudio)
	case iOutputAudioSeconds:
		return startedSeconds(u.OutputAudio)
	case iImage:
		return u.Images
	case iPage:
		return u.Pages
	case iOutputVideoSeconds:
		return startedSeconds(u.OutputVideo)
	case iRequest:
		return max(u.Requests, 1)
	}
	return 0
}

// Cost prices usage: one line per dimension with a quantity (the fee per request only when
// the route charges one), in the order of Dimensions, and their total. Each line is rounded
// up to the nanodollar, so that the wallet is never charged less than the listed prices.
// It fails with an *UnpricedError, and prices nothing, when the usage has images or video
// of a key that the route's keyed prices leave out.
func (p Price) Cost(u Usage) ([]CostLine, int64, error) {
	var qty, unit [numDimensions]int64
	n := 0
	for i := range qty {
		if qty[i] = quantity(&u, i); qty[i] <= 0 {
			continue
		}
		var err error
		if unit[i], err = p.unit(i, &u); err != nil {
			return nil, 0, err
		}
		if i == iRequest && unit[i] == 0 {
			qty[i] = 0
			continue
		}
		n++
	}
	// Sized to the lines there are: they go into the generation record of every request.
	lines := make([]CostLine, 0, n)
	var total int64
	for i := range qty {
		if qty[i] <= 0 {
			continue
		}
		nanos := mulDivCeil(qty[i], unit[i], dimensions[i].per)
		lines = append(lines, CostLine{Dimension: dimensions[i].Name, Key: lineKey(&u, i), Quantity: qty[i], UnitPriceNanos: unit[i], Nanos: nanos})
		total = addSat(total, nanos)
	}
	return lines, total, nil
}

// Cost prices a text call's token usage: p.Cost(u), which cannot fail for token counts.
func Cost(u Usage, p Price) ([]CostLine, int64) {
	lines, total, _ := p.Cost(u)
	return lines, total
}

// lineKey is the key the cost line of the dimension at index i prices: the images' size
// and quality, the video's resolution; "" for a dimension priced by one figure.
func lineKey(u *Usage, i int) string {
	switch i {
	case iImage:
		return u.ImageKey()
	case iOutputVideoSeconds:
		return u.VideoResolution
	}
	return ""
}

// WorstCase is the most a text request can cost: every prompt token at the dearest input
// rate plus maxOutput tokens at the dearest output rate plus the request fee.
func WorstCase(p Price, promptTokens, maxOutput int64) int64 {
	in := max(p.Input, p.CachedInput, p.CacheWrite)
	out := max(p.Output, p.Reasoning)
	return addSat(addSat(mulDivCeil(promptTokens, in, perMillion), mulDivCeil(maxOutput, out, perMillion)), p.PerRequest)
}

// startedSeconds counts d in whole seconds, a started one as one.
func startedSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// mulDivCeil returns ceil(a*b/c) for non-negative values without overflowing the product.
func mulDivCeil(a, b, c int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		// The quotient would not fit: saturate, the caller's reservation will refuse it.
		return 1<<63 - 1
	}
	q, r := bits.Div64(hi, lo, uint64(c))
	if r != 0 {
		q++
	}
	if q > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(q)
}

func addSat(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return 1<<63 - 1
}
