// Package pricing turns metered usage into money: integer nanodollars, one cost line per
// priced dimension. The same arithmetic bills requests and answers price calculations.
//
// A route's Price has one figure per dimension (tokens of each kind, characters, seconds
// of audio or video, images, pages, requests); images and video seconds are keyed (by size
// and quality, by resolution), and a key the route does not price cannot be charged, so
// Price.Cost refuses it rather than charge nothing.
package pricing

import (
	"fmt"
	"slices"
	"strings"
)

// Price is what a route charges, in nanodollars per Unit of each dimension (see
// Dimensions): per million tokens, per million characters, per second, per image, per page,
// per request. A zero figure is free, and so are images or video seconds at a route that
// prices none. The keyed prices are set with WithImages and WithVideoSeconds; compare
// prices with Equal, not ==.
type Price struct {
	Input       int64
	CachedInput int64
	CacheWrite  int64
	Output      int64
	Reasoning   int64

	InputAudioTokens   int64
	OutputAudioTokens  int64
	ImageInputTokens   int64
	ImageOutputTokens  int64
	InputCharacters    int64
	InputAudioSeconds  int64
	OutputAudioSeconds int64
	Page               int64

	PerRequest int64

	// batchDiscount is the percent Batch takes off (WithBatchDiscount).
	batchDiscount int64
	// keyed is shared by the copies of a price and never changed: With* make a new one.
	keyed *keyed
}

// ImagePrice is what one image of Size and Quality costs. An empty Size or Quality stands
// for any: an image is billed at the most specific price that matches it, a matching size
// counting for more than a matching quality.
type ImagePrice struct {
	Size    string
	Quality string
	Nanos   int64
}

// VideoPrice is what one second of video at Resolution costs; an empty Resolution stands
// for any, and prices what no other resolution's price matches.
type VideoPrice struct {
	Resolution string
	Nanos      int64
}

type keyed struct {
	images []ImagePrice
	video  []VideoPrice
}

// Dimension names of cost lines and prices.
const (
	DimInput              = "input"
	DimCachedInput        = "cached_input"
	DimCacheWrite         = "cache_write"
	DimOutput             = "output"
	DimReasoning          = "reasoning"
	DimInputAudioTokens   = "input_audio_tokens"
	DimOutputAudioTokens  = "output_audio_tokens"
	DimImageInputTokens   = "image_input_tokens"
	DimImageOutputTokens  = "image_output_tokens"
	DimInputCharacters    = "input_characters"
	DimInputAudioSeconds  = "input_audio_seconds"
	DimOutputAudioSeconds = "output_audio_seconds"
	DimImage              = "image"
	DimPage               = "page"
	DimOutputVideoSeconds = "output_video_seconds"
	DimRequest            = "request"
)

// Units that prices are for.
const (
	UnitMillionTokens     = "1M tokens"
	UnitMillionCharacters = "1M characters"
	UnitSecond            = "second"
	UnitImage             = "image"
	UnitPage              = "page"
	UnitRequest           = "request"
)

// Dimension is one thing a route may charge for.
type Dimension struct {
	// Name names the dimension in cost lines, in prices and in the configuration.
	Name string
	// Unit is what one price buys (UnitMillionTokens, UnitSecond...). A cost line's quantity
	// counts tokens, characters, whole started seconds, images, pages or requests.
	Unit string
	// Keyed tells that the dimension's prices depend on a key: size and quality for
	// images, resolution for video seconds.
	Keyed bool
}

// Indexes of the dimensions in the order of cost lines.
const (
	iInput = iota
	iCachedInput
	iCacheWrite
	iOutput
	iReasoning
	iInputAudioTokens
	iOutputAudioTokens
	iImageInputTokens
	iImageOutputTokens
	iInputCharacters
	iInputAudioSeconds
	iOutputAudioSeconds
	iImage
	iPage
	iOutputVideoSeconds
	iRequest
	numDimensions
)

// dimension is a Dimension with how many units of quantity make one Unit.
type dimension struct {
	Dimension
	per int64
}

const perMillion = 1_000_000

var dimensions = [numDimensions]dimension{
	iInput:              {Dimension{DimInput, UnitMillionTokens, false}, perMillion},
	iCachedInput:        {Dimension{DimCachedInput, UnitMillionTokens, false}, perMillion},
	iCacheWrite:         {Dimension{DimCacheWrite, UnitMillionTokens, false}, perMillion},
	iOutput:             {Dimension{DimOutput, UnitMillionTokens, false}, perMillion},
	iReasoning:          {Dimension{DimReasoning, UnitMillionTokens, false}, perMillion},
	iInputAudioTokens:   {Dimension{DimInputAudioTokens, UnitMillionTokens, false}, perMillion},
	iOutputAudioTokens:  {Dimension{DimOutputAudioTokens, UnitMillionTokens, false}, perMillion},
	iImageInputTokens:   {Dimension{DimImageInputTokens, UnitMillionTokens, false}, perMillion},
	iImageOutputTokens:  {Dimension{DimImageOutputTokens, UnitMillionTokens, false}, perMillion},
	iInputCharacters:    {Dimension{DimInputCharacters, UnitMillionCharacters, false}, perMillion},
	iInputAudioSeconds:  {Dimension{DimInputAudioSeconds, UnitSecond, false}, 1},
	iOutputAudioSeconds: {Dimension{DimOutputAudioSeconds, UnitSecond, false}, 1},
	iImage:              {Dimension{DimImage, UnitImage, true}, 1},
	iPage:               {Dimension{DimPage, UnitPage, false}, 1},
	iOutputVideoSeconds: {Dimension{DimOutputVideoSeconds, UnitSecond, true}, 1},
	iRequest:            {Dimension{DimRequest, UnitRequest, false}, 1},
}

// field is the figure of the dimension at index i, nil for a keyed one. (A switch, not a
// table of functions: a price called through a function value would escape to the heap.)
func (p *Price) field(i int) *int64 {
	switch i {
	case iInput:
		return &p.Input
	case iCachedInput:
		return &p.CachedInput
	case iCacheWrite:
		return &p.CacheWrite
	case iOutput:
		return &p.Output
	case iReasoning:
		return &p.Reasoning
	case iInputAudioTokens:
		return &p.InputAudioTokens
	case iOutputAudioTokens:
		return &p.OutputAudioTokens
	case iImageInputTokens:
		return &p.ImageInputTokens
	case iImageOutputTokens:
		return &p.ImageOutputTokens
	case iInputCharacters:
		return &p.InputCharacters
	case iInputAudioSeconds:
		return &p.InputAudioSeconds
	case iOutputAudioSeconds:
		return &p.OutputAudioSeconds
	case iPage:
		return &p.Page
	case iRequest:
		return &p.PerRequest
	}
	return nil
}

// unit is the price of one Unit of the dimension at index i for the usage.
func (p *Price) unit(i int, u *Usage) (int64, error) {
	switch i {
	case iImage:
		return p.imageUnit(u)
	case iOutputVideoSeconds:
		return p.videoUnit(u)
	}
	return *p.field(i), nil
}

// index finds a dimension by name.
func index(dim string) int {
	for i := range dimensions {
		if dimensions[i].Name == dim {
			return i
		}
	}
	return -1
}

// Dimensions lists every dimension a route may price, in the order of cost lines. The list
// is shared, so that reading it on a request's path costs nothing: do not change it. (Cost
// reads its own table, never this list.)
func Dimensions() []Dimension { return dimensionList }

var dimensionList = func() []Dimension {
	out := make([]Dimension, len(dimensions))
	for i, d := range dimensions {
		out[i] = d.Dimension
	}
	return out
}()

// PerUnit is the price of one Unit of a dimension priced by one figure; 0 for a keyed
// dimension (see Images and VideoSeconds) or an unknown name.
func (p Price) PerUnit(dim string) int64 {
	if i := index(dim); i >= 0 && !dimensions[i].Keyed {
		return *p.field(i)
	}
	return 0
}

// SetPerUnit sets the price of one Unit of a dimension priced by one figure.
func (p *Price) SetPerUnit(dim string, nanos int64) error {
	i := index(dim)
	if i < 0 || dimensions[i].Keyed {
		return fmt.Errorf("%q is not a dimension priced by one figure", dim)
	}
	if nanos < 0 {
		return fmt.Errorf("price %s: negative", dim)
	}
	*p.field(i) = nanos
	return nil
}

// Images lists the route's prices per image, as set; none when images are free.
func (p Price) Images() []ImagePrice { return slices.Clone(p.images()) }

// VideoSeconds lists the route's prices per second of video, as set; none when video is free.
func (p Price) VideoSeconds() []VideoPrice { return slices.Clone(p.video()) }

func (p *Price) images() []ImagePrice {
	if p.keyed == nil {
		return nil
	}
	return p.keyed.images
}

func (p *Price) video() []VideoPrice {
	if p.keyed == nil {
		return nil
	}
	return p.keyed.video
}

// WithImages returns p with its prices per image replaced by list. Keys compare without
// regard to case; "auto" is no key (the caller resolves it to the model's default), and a
// key may be priced once.
func (p Price) WithImages(list ...ImagePrice) (Price, error) {
	for i, ip := range list {
		if err := checkKey(DimImage, ip.Nanos, "size", ip.Size, "quality", ip.Quality); err != nil {
			return p, err
		}
		for _, prev := range list[:i] {
			if strings.EqualFold(prev.Size, ip.Size) && strings.EqualFold(prev.Quality, ip.Quality) {
				return p, fmt.Errorf("price %s: %s is priced twice", DimImage, imageKey(ip.Size, ip.Quality))
			}
		}
	}
	k := p.keyedCopy()
	k.images = slices.Clone(list)
	p.keyed = k
	return p, nil
}

// WithVideoSeconds returns p with its prices per second of video replaced by list, under
// the rules of WithImages.
func (p Price) WithVideoSeconds(list ...VideoPrice) (Price, error) {
	for i, vp := range list {
		if err := checkKey(DimOutputVideoSeconds, vp.Nanos, "resolution", vp.Resolution); err != nil {
			return p, err
		}
		for _, prev := range list[:i] {
			if strings.EqualFold(prev.Resolution, vp.Resolution) {
				return p, fmt.Errorf("price %s: %s is priced twice", DimOutputVideoSeconds, videoKey(vp.Resolution))
			}
		}
	}
	k := p.keyedCopy()
	k.video = slices.Clone(list)
	p.keyed = k
	return p, nil
}

func (p Price) keyedCopy() *keyed {
	if p.keyed == nil {
		return new(keyed)
	}
	k := *p.keyed
	return &k
}

// checkKey refuses a keyed price that could never match or would pay the caller: the
// parts of its key are named and valued in pairs.
func checkKey(dim string, nanos int64, parts ...string) error {
	if nanos < 0 {
		return fmt.Errorf("price %s: negative", dim)
	}
	for i := 0; i < len(parts); i += 2 {
		v := parts[i+1]
		if strings.EqualFold(v, "auto") || strings.ContainsAny(v, " \t\r\n") {
			return fmt.Errorf("price %s: %s %q is not a %s (leave it out to price any)", dim, parts[i], v, parts[i])
		}
	}
	return nil
}

// IsZero tells whether nothing about the route costs money, in batches or not.
func (p Price) IsZero() bool {
	p.batchDiscount = 0
	for _, ip := range p.images() {
		if ip.Nanos != 0 {
			return false
		}
	}
	for _, vp := range p.video() {
		if vp.Nanos != 0 {
			return false
		}
	}
	p.keyed = nil
	return p == Price{}
}

// Equal tells whether p and q charge the same for everything, batches included.
func (p Price) Equal(q Price) bool {
	if !slices.Equal(p.images(), q.images()) || !slices.Equal(p.video(), q.video()) {
		return false
	}
	p.keyed, q.keyed = nil, nil
	return p == q
}

// imageUnit is the price of one of the usage's images: free when the route prices no
// image, an *UnpricedError when it prices images but none of this size and quality.
func (p *Price) imageUnit(u *Usage) (int64, error) {
	list := p.images()
	if len(list) == 0 {
		return 0, nil
	}
	best, score := int64(0), -1
	for _, ip := range list {
		s := 0
		switch {
		case ip.Size == "":
		case strings.EqualFold(ip.Size, u.ImageSize):
			s += 2
		default:
			continue
		}
		switch {
		case ip.Quality == "":
		case strings.EqualFold(ip.Quality, u.ImageQuality):
			s++
		default:
			continue
		}
		if s > score {
			best, score = ip.Nanos, s
		}
	}
	if score < 0 {
		priced := make([]string, len(list))
		for i, ip := range list {
			priced[i] = imageKey(ip.Size, ip.Quality)
		}
		return 0, &UnpricedError{Dimension: DimImage, Key: imageKey(u.ImageSize, u.ImageQuality), LineKey: u.ImageKey(), Priced: priced}
	}
	return best, nil
}

// videoUnit is the price of a second of the usage's video, under the rules of imageUnit.
func (p *Price) videoUnit(u *Usage) (int64, error) {
	list := p.video()
	if len(list) == 0 {
		return 0, nil
	}
	best, found := int64(0), false
	for _, vp := range list {
		if strings.EqualFold(vp.Resolution, u.VideoResolution) {
			return vp.Nanos, nil
		}
		if vp.Resolution == "" {
			best, found = vp.Nanos, true
		}
	}
	if !found {
		priced := make([]string, len(list))
		for i, vp := range list {
			priced[i] = videoKey(vp.Resolution)
		}
		return 0, &UnpricedError{Dimension: DimOutputVideoSeconds, Key: videoKey(u.VideoResolution), LineKey: u.VideoResolution, Priced: priced}
	}
	return best, nil
}

func imageKey(size, quality string) string {
	return "size " + orAny(size) + ", quality " + orAny(quality)
}

func videoKey(resolution string) string { return "resolution " + orAny(resolution) }

func orAny(s string) string {
	if s == "" {
		return "any"
	}
	return s
}

// UnpricedError is a usage that the route's prices cannot price: units of a keyed
// dimension whose key the route has no price for. The gateway refuses such a request
// before it calls the upstream rather than charge it nothing.
type UnpricedError struct {
	// Dimension is DimImage or DimOutputVideoSeconds.
	Dimension string
	// Key is the usage's key ("size 512x512, quality low"); Priced lists the route's.
	Key    string
	Priced []string
	// LineKey is the usage's key as a cost line records it ("512x512/low", CostLine.Key).
	LineKey string
}

func (e *UnpricedError) Error() string {
	return fmt.Sprintf("the route has no %s price for %s (it prices %s)", e.Dimension, e.Key, strings.Join(e.Priced, "; "))
}
