package pricing

import (
	"math/bits"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Usage is what one call consumed, by dimension: the gateway fills it after the call from
// what the upstream reported (or, before the call, from an estimate to reserve), and
// Price.Cost prices it. Each token is counted once: Input leaves out cached reads, cache
// writes, audio and image tokens; Output leaves out reasoning, audio and image tokens.
// A keyed dimension's quantity comes with its key: the size and quality of the images (the
// caller resolves "auto" or a missing value to the model's default), the resolution of
// the video.
type Usage struct {
	Input       int64
	CachedInput int64
	CacheWrite  int64
	Output      int64
	Reasoning   int64

	InputAudioTokens  int64
	OutputAudioTokens int64
	ImageInputTokens  int64
	ImageOutputTokens int64
	InputCharacters   int64

	// InputAudio and OutputAudio are billed per started second.
	InputAudio  time.Duration
	OutputAudio time.Duration

	Images       int64
	ImageSize    string
	ImageQuality string

	Pages int64

	// OutputVideo is billed per started second.
	OutputVideo     time.Duration
	VideoResolution string

	// Requests is how many requests the call stands for; 0 counts as one.
	Requests int64
}

// quantity is the usage's quantity in the dimension at index i, in the units of its cost
// line: seconds are whole started ones, and every call is one request at least, so that a
// fee per request is never forgotten.
func (u *Usage) quantity(i int) int64 {
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

// Tokens is the metered usage of a text call's neutral token counts.
func Tokens(u providers.Usage) Usage {
	return Usage{Input: u.Input, CachedInput: u.CacheRead, CacheWrite: u.CacheWrite, Output: u.Output, Reasoning: u.Reasoning}
}

// Media is the metered usage of what a media upstream reported.
func Media(u providers.MediaUsage) Usage {
	return Usage{
		Input: u.InputTokens, Output: u.OutputTokens,
		InputAudioTokens: u.InputAudioTokens, OutputAudioTokens: u.OutputAudioTokens,
		ImageInputTokens: u.ImageInputTokens, ImageOutputTokens: u.ImageOutputTokens,
		InputCharacters: u.InputCharacters, InputAudio: u.InputAudio, OutputAudio: u.OutputAudio, Pages: u.Pages,
	}
}

// Cost prices usage: one line per dimension with a quantity (the fee per request only when
// the route charges one), in the order of Dimensions, and their total. Each line is rounded
// up to the nanodollar, so that the wallet is never charged less than the listed prices.
// It fails with an *UnpricedError, and prices nothing, when the usage has images or video
// of a key that the route's keyed prices leave out.
func (p Price) Cost(u Usage) ([]store.CostLine, int64, error) {
	var qty, unit [numDimensions]int64
	n := 0
	for i := range qty {
		if qty[i] = u.quantity(i); qty[i] <= 0 {
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
	lines := make([]store.CostLine, 0, n)
	var total int64
	for i := range qty {
		if qty[i] <= 0 {
			continue
		}
		nanos := mulDivCeil(qty[i], unit[i], dimensions[i].per)
		lines = append(lines, store.CostLine{Dimension: dimensions[i].Name, Quantity: qty[i], UnitPriceNanos: unit[i], Nanos: nanos})
		total = addSat(total, nanos)
	}
	return lines, total, nil
}

// Cost prices a text call's token usage: p.Cost(Tokens(u)), which token counts cannot fail.
func Cost(u providers.Usage, p Price) ([]store.CostLine, int64) {
	lines, total, _ := p.Cost(Tokens(u))
	return lines, total
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
