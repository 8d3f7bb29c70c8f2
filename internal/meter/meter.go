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
// the model's default), the resolution of the video. It is kept as JSON (a charge, a job
// row), every dimension by its name.
type Usage struct {
	Input       int64 `json:"input_tokens,omitempty"`
	CachedInput int64 `json:"cached_input_tokens,omitempty"`
	CacheWrite  int64 `json:"cache_write_tokens,omitempty"`
	Output      int64 `json:"output_tokens,omitempty"`
	Reasoning   int64 `json:"reasoning_tokens,omitempty"`

	InputAudioTokens  int64 `json:"input_audio_tokens,omitempty"`
	OutputAudioTokens int64 `json:"output_audio_tokens,omitempty"`
	ImageInputTokens  int64 `json:"image_input_tokens,omitempty"`
	ImageOutputTokens int64 `json:"image_output_tokens,omitempty"`
	InputCharacters   int64 `json:"input_characters,omitempty"`

	// InputAudio and OutputAudio are billed per started second. In JSON they are counted
	// in nanoseconds, so that a usage read back is priced as the one written.
	InputAudio  time.Duration `json:"input_audio_ns,omitempty"`
	OutputAudio time.Duration `json:"output_audio_ns,omitempty"`

	Images       int64  `json:"images,omitempty"`
	ImageSize    string `json:"image_size,omitempty"`
	ImageQuality string `json:"image_quality,omitempty"`

	Pages int64 `json:"pages,omitempty"`

	// OutputVideo is billed per started second (nanoseconds in JSON).
	OutputVideo     time.Duration `json:"output_video_ns,omitempty"`
	VideoResolution string        `json:"video_resolution,omitempty"`

	// Requests is how many requests the call stands for; 0 counts as one.
	Requests int64 `json:"requests,omitempty"`
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
