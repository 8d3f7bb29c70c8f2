// Package meter holds what a metered call consumed, by dimension, and the priced line of
// one dimension: the types that providers report usage in, that internal/pricing prices
// and that the store records. It imports nothing of the gateway, so that each of those
// can import it and none of them another.
package meter

import "time"

// NanosPerUSD is the number of nanodollars in one US dollar: every amount is int64 nanos.
const NanosPerUSD int64 = 1_000_000_000

// Usage is what one call consumed, by dimension: an upstream reports it (each field zero
// when not reported), the gateway fills in what the upstream leaves out (or, before the
// call, estimates it to reserve), and a route's price prices it. Each token is counted
// once: Input leaves out cached reads, cache writes, audio and image tokens; Output leaves
// out reasoning, audio and image tokens. A keyed dimension's quantity comes with its key:
// the size and quality of the images (the caller resolves "auto" or a missing value to
// the model's default), the resolution of the video.
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

// ImageKey is the key of the usage's images in a cost line: size and quality as
// "size/quality", or the one of them that is set ("" for neither).
func (u *Usage) ImageKey() string {
	switch {
	case u.ImageSize == "":
		return u.ImageQuality
	case u.ImageQuality == "":
		return u.ImageSize
	}
	return u.ImageSize + "/" + u.ImageQuality
}

// CostLine is one priced dimension of a call's cost: tokens of a kind, characters,
// seconds, images, pages or requests.
type CostLine struct {
	// Dimension names the dimension (internal/pricing's Dim constants).
	Dimension string `json:"dimension"`
	// Key is what a keyed dimension was priced for: the images' size and quality
	// ("1024x1024/high", Usage.ImageKey), the video's resolution ("720p"). Empty for a
	// dimension priced by one figure.
	Key      string `json:"key,omitempty"`
	Quantity int64  `json:"quantity"`
	// UnitPriceNanos is the price of one unit of the dimension: of a million tokens or
	// characters, of a second, an image, a page or a request.
	UnitPriceNanos int64 `json:"unit_price_nanos"`
	Nanos          int64 `json:"nanos"`
}
