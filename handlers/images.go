package handlers

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/internal/upload"
	"github.com/modelgateway/caddy-modelgateway/providers"
)

// Image generation (POST /images/generations, JSON) and editing (POST /images/edits,
// multipart), in OpenAI's wire format. A route whose adapter forwards the format gets the
// request as it came (its model rewritten); an ImageGenerator adapter (Gemini, Imagen, the
// mock) gets the neutral request and is answered in OpenAI's shape.
//
// Billing: GPT Image models report tokens (text and image, in and out), DALL·E reports
// nothing and is priced per image by size and quality. Both are metered, and each route
// prices what it prices: an image's size and quality come from the answer when it says them,
// else from the request with "auto" or nothing resolved to the model's default (DALL·E's
// 1024x1024 standard), else, when the model chooses (GPT Image asked for "auto"), from the
// route's dearest image price that fits, so that an image is never priced 0 for want of a
// key. A size or quality the route has no price for is refused before any upstream call.

// imageMeters are what the image endpoints measure: text and image tokens in and out (GPT
// Image), images by size and quality (DALL·E and per-image resellers), the request.
var imageMeters = []string{pricing.DimInput, pricing.DimImageInputTokens, pricing.DimOutput, pricing.DimImageOutputTokens, pricing.DimImage, pricing.DimRequest}

func isImageGenerator(p providers.Provider) bool {
	_, ok := p.(providers.ImageGenerator)
	return ok
}

var (
	imageGenerationsCapability = capability{endpoint: "/images/generations", format: providers.FormatOpenAIImages, meters: imageMeters, neutral: isImageGenerator}
	imageEditsCapability       = capability{endpoint: "/images/edits", format: providers.FormatOpenAIImageEdits, meters: imageMeters, neutral: isImageGenerator}
)

// OpenAI's bounds of an image request.
const (
	maxImagesPerRequest = 10
	maxEditImages       = 16
	maxPartialImages    = 3
	// maxImageSide bounds each side of a free WxH size (gpt-image-2 allows 3840).
	maxImageSide = 16384
)

// Worst-case token counts of an image call, which size its reservation.
const (
	// maxImageOutputTokens is what GPT Image bills for its largest standard image at high
	// quality (gpt-image-1: 6240 image tokens for 1024x1536); a larger free size scales it
	// by its pixels.
	maxImageOutputTokens = 6240
	standardImagePixels  = 1024 * 1536
	// partialImageTokens is the image output of each partial image of a stream.
	partialImageTokens = 100
	// maxImageInputTokens bounds the image tokens of one uploaded picture or mask: pictures
	// are scaled down before they are read, so their tokens do not grow with their bytes.
	maxImageInputTokens = 8192
)

// imageRequest is a generation or an edit as the gateway reads it.
type imageRequest struct {
	model, prompt                           string
	n                                       int
	size, quality, outputFormat, background string
	responseFormat                          string
	partialImages                           int
	stream, meta                            bool
	// set lists the parameters the client set, for the neutral path's dropped_parameters.
	set []string
	// edit holds the uploaded pictures and mask of an edit.
	edit   bool
	images []upload.Part
	mask   *upload.Part
}

// imageFields are the parameters of both endpoints, as JSON types: a multipart edit's
// strings are coerced into them.
type imageFields struct {
	Model             *string `json:"model"`
	Prompt            *string `json:"prompt"`
	N                 *int64  `json:"n"`
	Size              *string `json:"size"`
	Quality           *string `json:"quality"`
	OutputFormat      *string `json:"output_format"`
	OutputCompression *int64  `json:"output_compression"`
	Background        *string `json:"background"`
	PartialImages     *int64  `json:"partial_images"`
	Stream            *bool   `json:"stream"`
	ResponseFormat    *string `json:"response_format"`
	Style             *string `json:"style"`
	Moderation        *string `json:"moderation"`
	InputFidelity     *string `json:"input_fidelity"`
	User              *string `json:"user"`
	Meta              *bool   `json:"meta"`
}

// strings are the string parameters by name.
func (f *imageFields) strings() []struct {
	name string
	v    **string
} {
	return []struct {
		name string
		v    **string
	}{
		{"model", &f.Model}, {"prompt", &f.Prompt}, {"size", &f.Size}, {"quality", &f.Quality},
		{"output_format", &f.OutputFormat}, {"background", &f.Background}, {"response_format", &f.ResponseFormat},
		{"style", &f.Style}, {"moderation", &f.Moderation}, {"input_fidelity", &f.InputFidelity}, {"user", &f.User},
	}
}

// parseImageGeneration validates a POST /images/generations body.
func parseImageGeneration(body []byte) (*imageRequest, *APIError) {
	var f imageFields
	if err := json.Unmarshal(body, &f); err != nil {
		return nil, badField(CodeInvalidJSON, "", "the request body must be a JSON object with the documented field types: "+err.Error())
	}
	return f.request()
}

// parseImageEdit validates a POST /images/edits form read whole: its values are strings, and
// image, image[] and image[N] are one list of pictures.
func parseImageEdit(form *upload.Form) (*imageRequest, *APIError) {
	var f imageFields
	for _, s := range f.strings() {
		if v, ok := form.Value(s.name); ok {
			*s.v = &v
		}
	}
	for _, n := range []struct {
		name string
		v    **int64
	}{{"n", &f.N}, {"partial_images", &f.PartialImages}, {"output_compression", &f.OutputCompression}} {
		v, ok, err := form.Int(n.name)
		if err != nil {
			return nil, badField(CodeValidation, n.name, n.name+" must be an integer")
		}
		if ok {
			*n.v = &v
		}
	}
	for _, b := range []struct {
		name string
		v    **bool
	}{{"stream", &f.Stream}, {"meta", &f.Meta}} {
		v, ok, err := form.Bool(b.name)
		if err != nil {
			return nil, badField(CodeValidation, b.name, b.name+` must be "true" or "false"`)
		}
		if ok {
			*b.v = &v
		}
	}
	q, apiErr := f.request()
	if apiErr != nil {
		return nil, apiErr
	}
	q.edit = true
	if len(form.Values("image")) > 0 || len(form.Values("mask")) > 0 {
		return nil, badField(CodeValidation, "image", "image and mask must be files (multipart parts with a filename), not text fields")
	}
	q.images = form.Files("image")
	switch {
	case len(q.images) == 0:
		return nil, badField(CodeValidation, "image", "image is required: one picture, or up to 16 as image[]")
	case len(q.images) > maxEditImages:
		return nil, badField(CodeValidation, "image", fmt.Sprintf("%d images were sent; at most %d are allowed", len(q.images), maxEditImages))
	}
	switch masks := form.Files("mask"); len(masks) {
	case 0:
	case 1:
		q.mask = &masks[0]
	default:
		return nil, badField(CodeValidation, "mask", "at most one mask is allowed")
	}
	return q, nil
}

// request validates the parameters both endpoints share.
func (f *imageFields) request() (*imageRequest, *APIError) {
	if f.Model == nil || *f.Model == "" {
		return nil, badField(CodeModelRequired, "model", "model is required")
	}
	if f.Prompt == nil || strings.TrimSpace(*f.Prompt) == "" {
		return nil, badField(CodeValidation, "prompt", "prompt is required")
	}
	q := &imageRequest{model: *f.Model, prompt: *f.Prompt, n: 1}
	for _, e := range []struct {
		name    string
		v       *string
		allowed []string
	}{
		{"quality", f.Quality, []string{"auto", "standard", "hd", "low", "medium", "high"}},
		{"output_format", f.OutputFormat, []string{"png", "jpeg", "webp"}},
		{"background", f.Background, []string{"auto", "transparent", "opaque"}},
		{"response_format", f.ResponseFormat, []string{"url", "b64_json"}},
		{"style", f.Style, []string{"vivid", "natural"}},
		{"moderation", f.Moderation, []string{"auto", "low"}},
		{"input_fidelity", f.InputFidelity, []string{"high", "low"}},
	} {
		if e.v != nil && !containsFold(e.allowed, *e.v) {
			return nil, badField(CodeValidation, e.name, fmt.Sprintf("%s must be one of %s", e.name, strings.Join(e.allowed, ", ")))
		}
	}
	for _, e := range []struct {
		name     string
		v        *int64
		min, max int64
	}{
		{"n", f.N, 1, maxImagesPerRequest}, {"partial_images", f.PartialImages, 0, maxPartialImages}, {"output_compression", f.OutputCompression, 0, 100},
	} {
		if e.v != nil && (*e.v < e.min || *e.v > e.max) {
			return nil, badField(CodeValidation, e.name, fmt.Sprintf("%s must be an integer from %d to %d", e.name, e.min, e.max))
		}
	}
	if f.Size != nil && !strings.EqualFold(*f.Size, "auto") {
		if _, _, ok := parseImageSize(*f.Size); !ok {
			return nil, badField(CodeValidation, "size", `size must be "auto" or WIDTHxHEIGHT in pixels, such as 1024x1024`)
		}
	}
	deref := func(p *string) string {
		if p == nil {
			return ""
		}
		return strings.ToLower(*p)
	}
	q.size, q.quality, q.outputFormat, q.background, q.responseFormat = deref(f.Size), deref(f.Quality), deref(f.OutputFormat), deref(f.Background), deref(f.ResponseFormat)
	if f.N != nil {
		q.n = int(*f.N)
	}
	if f.PartialImages != nil {
		q.partialImages = int(*f.PartialImages)
	}
	q.stream = f.Stream != nil && *f.Stream
	q.meta = f.Meta != nil && *f.Meta
	if q.stream && q.n > 1 {
		// A stream's usage is read from its completed event; one image keeps it one.
		return nil, badField(CodeValidation, "n", "a streamed request makes one image: n must be 1 when stream is true")
	}
	if q.partialImages > 0 && !q.stream {
		return nil, badField(CodeValidation, "partial_images", "partial_images needs stream: true")
	}
	for _, s := range f.strings() {
		if *s.v != nil && s.name != "model" && s.name != "prompt" {
			q.set = append(q.set, s.name)
		}
	}
	for _, n := range []struct {
		name string
		set  bool
	}{{"n", f.N != nil}, {"partial_images", f.PartialImages != nil}, {"output_compression", f.OutputCompression != nil}} {
		if n.set {
			q.set = append(q.set, n.name)
		}
	}
	return q, nil
}

func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}

// parseImageSize reads WIDTHxHEIGHT.
func parseImageSize(s string) (w, h int64, ok bool) {
	ws, hs, found := strings.Cut(strings.ToLower(s), "x")
	if !found {
		return 0, 0, false
	}
	w, err1 := strconv.ParseInt(ws, 10, 64)
	h, err2 := strconv.ParseInt(hs, 10, 64)
	if err1 != nil || err2 != nil || w <= 0 || h <= 0 || w > maxImageSide || h > maxImageSide {
		return 0, 0, false
	}
	return w, h, true
}

// imageDefaults is the size and quality a model makes when asked for none or "auto": DALL·E's
// are documented; a GPT Image model chooses per request and says what it chose in the answer
// ("" here).
func imageDefaults(upstreamModel string) (size, quality string) {
	m := strings.ToLower(upstreamModel)
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	if strings.HasPrefix(m, "dall-e-2") || strings.HasPrefix(m, "dall-e-3") {
		return "1024x1024", "standard"
	}
	return "", ""
}

// imageKey resolves the size and quality of an image: the given one, else the model's
// default, else "" (the model chooses). "auto" is no key.
func imageKey(upstreamModel, size, quality string) (string, string) {
	ds, dq := imageDefaults(upstreamModel)
	if size == "" || strings.EqualFold(size, "auto") {
		size = ds
	}
	if quality == "" || strings.EqualFold(quality, "auto") {
		quality = dq
	}
	return strings.ToLower(size), strings.ToLower(quality)
}

// pricedImages sets the key of u's images on p: size and quality as given, a part left ""
// (unknown) taking the value of p's dearest image price that fits the rest, so that an image
// of unknown size is billed what it may cost at most, never 0. When no price fits, the key
// stays as given and p.Cost refuses it with an *UnpricedError.
func pricedImages(p pricing.Price, u pricing.Usage, size, quality string) pricing.Usage {
	u.ImageSize, u.ImageQuality = size, quality
	if u.Images == 0 || (size != "" && quality != "") {
		return u
	}
	best, most := u, int64(-1)
	if _, t, err := p.Cost(u); err == nil {
		most = t
	}
	fits := func(priced, asked string) bool {
		return priced == "" || asked == "" || strings.EqualFold(priced, asked)
	}
	for _, ip := range p.Images() {
		if !fits(ip.Size, size) || !fits(ip.Quality, quality) {
			continue
		}
		v := u
		if size == "" {
			v.ImageSize = ip.Size
		}
		if quality == "" {
			v.ImageQuality = ip.Quality
		}
		if _, t, err := p.Cost(v); err == nil && t > most {
			best, most = v, t
		}
	}
	return best
}

// foldImageTokens bills image tokens at the text rate on a route that prices text tokens
// but no image tokens: an operator who priced a GPT Image route by input and output means
// its tokens, which would otherwise be free.
func foldImageTokens(p pricing.Price, u pricing.Usage) pricing.Usage {
	if p.ImageInputTokens == 0 && p.Input > 0 {
		u.Input, u.ImageInputTokens = u.Input+u.ImageInputTokens, 0
	}
	if p.ImageOutputTokens == 0 && p.Output > 0 {
		u.Output, u.ImageOutputTokens = u.Output+u.ImageOutputTokens, 0
	}
	return u
}

// imageUsage is what an image call is billed on p: its tokens, and its images when p prices
// images, at their key.
func imageUsage(p pricing.Price, tokens pricing.Usage, images int, size, quality string) pricing.Usage {
	u := foldImageTokens(p, tokens)
	if len(p.Images()) > 0 {
		u.Images = int64(images)
	}
	return pricedImages(p, u, size, quality)
}

// imageOutputTokens bounds the image tokens of one image of size.
func imageOutputTokens(size string) int64 {
	w, h, ok := parseImageSize(size)
	if !ok || w*h <= standardImagePixels {
		return maxImageOutputTokens
	}
	return (maxImageOutputTokens*w*h + standardImagePixels - 1) / standardImagePixels
}

// worst is the most the request may cost on rt: the prompt's bytes as text tokens, each
// uploaded picture at maxImageInputTokens, each image at the largest output of its size
// (partial images included), and each image at its price. It fails with an
// *pricing.UnpricedError when rt prices images but not of the requested size and quality.
func (q *imageRequest) worst(rt Route) (int64, error) {
	size, quality := imageKey(rt.UpstreamModel, q.size, q.quality)
	tokens := q.estimate(rt, q.n, q.n*q.partialImages)
	_, total, err := rt.Price.Cost(imageUsage(rt.Price, tokens, q.n, size, quality))
	return total, err
}

// imageGenerations serves POST /images/generations.
func (g *Gateway) imageGenerations(w http.ResponseWriter, r *http.Request, caller *Caller) error {
	body, apiErr := g.readBody(w, r)
	if apiErr != nil {
		return apiErr
	}
	q, apiErr := parseImageGeneration(body)
	if apiErr != nil {
		return apiErr
	}
	return g.serveMedia(w, r, caller, &imageGenerationsEndpoint, &mediaRequest{
		model: q.model, promptBytes: len(q.prompt), meta: q.meta, relayed: q.stream, streamed: q.stream, worst: q.worst,
		attempt: func(c *call, ar *http.Request, rt Route) error {
			fw, ok := forwarderFor(rt, providers.FormatOpenAIImages)
			if !ok {
				return c.imagesNeutral(w, ar, rt, q, nil)
			}
			up, err := upstreamBody(body, rt.UpstreamModel)
			if err != nil {
				return fmt.Errorf("rewriting the request: %w", err)
			}
			return c.forward(w, ar, rt, fw, up, q.stream, imagesWire(rt, q, providers.FormatOpenAIImages), func(began time.Time, resp *providers.RawResponse) error {
				return c.relayEvents(w, ar, rt, began, resp, imageEvents(rt, q))
			})
		},
	})
}

// The image families cap a charge at the hold on routes priced by the image alone: the
// worst case is n images at the dearest price the request may get. Image tokens are
// reported after the call, and bounded by nothing the gateway knows before.
var (
	imageGenerationsEndpoint = mediaEndpoint{cp: &imageGenerationsCapability, capAtHold: perImageOnly}
	imageEditsEndpoint       = mediaEndpoint{cp: &imageEditsCapability, capAtHold: perImageOnly}
)

func perImageOnly(p pricing.Price) bool { return pricedOnlyBy(p, true) }

// imageEdits serves POST /images/edits.
func (g *Gateway) imageEdits(w http.ResponseWriter, r *http.Request, caller *Caller) error {
	form, apiErr := g.readForm(r, &imageEditsCapability, DefaultImageUpload)
	if apiErr != nil {
		return apiErr
	}
	defer func() { _ = form.Close() }()
	// The form is read whole before the call: its fields may follow its files (openai-node
	// sends them in the caller's order, curl in the command's), and n, size, quality and
	// stream decide the reservation and how the answer is read.
	if apiErr := g.spoolForm(form, &imageEditsCapability, DefaultImageUpload); apiErr != nil {
		return apiErr
	}
	q, apiErr := parseImageEdit(form)
	if apiErr != nil {
		return apiErr
	}
	return g.serveMedia(w, r, caller, &imageEditsEndpoint, &mediaRequest{
		model: q.model, promptBytes: len(q.prompt), meta: q.meta, relayed: q.stream, streamed: q.stream,
		fit: g.uploadFit(form.Size(), DefaultImageUpload), worst: q.worst,
		attempt: func(c *call, ar *http.Request, rt Route) error {
			fw, ok := forwarderFor(rt, providers.FormatOpenAIImageEdits)
			if !ok {
				return c.imagesNeutral(w, ar, rt, q, form)
			}
			began := c.g.Now()
			// Pictures go on under the name the client gave (a lone `image` stays one, as
			// servers that read a single picture want); several go on as image[], the list
			// OpenAI reads whatever the client called them.
			var opt upload.BodyOptions
			if len(q.images) > 1 {
				opt.Lists = []string{"image"}
			}
			resp, err := c.forwardForm(ar, rt, fw, form, providers.FormatOpenAIImageEdits, q.stream, opt)
			if err != nil {
				return err
			}
			if q.stream {
				return c.relayEvents(w, ar, rt, began, resp, imageEvents(rt, q))
			}
			return c.answerForwarded(w, ar, rt, began, resp, imagesWire(rt, q, providers.FormatOpenAIImageEdits))
		},
	})
}

// imagesWire is the forwarding of an OpenAI images answer: metered from its usage (tokens),
// its images and their size and quality. A DALL·E answer has no usage: one is written.
func imagesWire(rt Route, q *imageRequest, f providers.WireFormat) wireFormat {
	return wireFormat{
		format: f, finish: noFinish,
		// Only an answer without usage gets one: it reported no tokens.
		appendUsage: func(b []byte, _ providers.Usage) []byte { return appendImageUsage(b, pricing.Usage{}) },
		meter: func(c *call, answer []byte) error {
			var images int
			data, _ := rawjson.Get(answer, "data")
			if !rawjson.IsNull(data) {
				if err := rawjson.EachElement(data, func([]byte) bool { images++; return true }); err != nil {
					return fmt.Errorf("the provider's images answer has an invalid data array: %w", err)
				}
			}
			return c.meterImageAnswer(rt, q, answer, images, 0)
		},
	}
}

// imageEvents is how an OpenAI image stream ends: its completed event, one image, metered
// from its usage. Until then, on a route priced by tokens, the partial images relayed are
// metered as they go, so that a stream cut short or left by its client bills them.
func imageEvents(rt Route, q *imageRequest) mediaEvents {
	partials := 0
	partial := q.eventPrefix() + ".partial_image"
	return mediaEvents{
		final: []string{q.eventPrefix() + ".completed"},
		meter: func(c *call, data []byte) error { return c.meterImageAnswer(rt, q, data, 1, partials) },
		seen: func(c *call, eventType string) {
			if eventType != partial || !pricesImageTokens(c.priceOf(rt)) {
				return
			}
			partials++
			c.meterImages(rt, q.estimate(rt, 0, partials), 0, q.size, q.quality)
		},
	}
}

// pricesImageTokens tells a route that bills images by their tokens (GPT Image).
func pricesImageTokens(p pricing.Price) bool {
	for _, d := range []string{pricing.DimInput, pricing.DimImageInputTokens, pricing.DimImageOutputTokens, pricing.DimOutput} {
		if p.PerUnit(d) > 0 {
			return true
		}
	}
	return false
}

// estimate is the usage of images the upstream reported no tokens for, as the reservation
// counts them: the prompt's bytes as text tokens, each uploaded picture at
// maxImageInputTokens, each image made at the largest output of its size and each partial
// image at partialImageTokens.
func (q *imageRequest) estimate(rt Route, images, partials int) pricing.Usage {
	size, _ := imageKey(rt.UpstreamModel, q.size, q.quality)
	pictures := int64(len(q.images))
	if q.mask != nil {
		pictures++
	}
	return pricing.Usage{
		Input:             estimateTokens(len(q.prompt)),
		ImageInputTokens:  pictures * maxImageInputTokens,
		ImageOutputTokens: int64(images)*imageOutputTokens(size) + int64(partials)*partialImageTokens,
	}
}

func (q *imageRequest) eventPrefix() string {
	if q.edit {
		return "image_edit"
	}
	return "image_generation"
}

// meterImageAnswer meters the call from an OpenAI images answer or completed event: its
// usage, its images, their size and quality (the request's when it does not say). Without
// usage, a route priced by tokens is billed the estimate of its images and of the partial
// images the stream relayed before.
func (c *call) meterImageAnswer(rt Route, q *imageRequest, obj []byte, images, partials int) error {
	var tokens pricing.Usage
	if raw, _ := rawjson.Get(obj, "usage"); !rawjson.IsNull(raw) {
		var err error
		if tokens, err = parseImageUsage(raw); err != nil {
			return err
		}
	} else if pricesImageTokens(c.priceOf(rt)) {
		// Priced by tokens and told none: the estimate, never nothing.
		tokens = q.estimate(rt, images, partials)
		c.g.Logger.Warn("the provider's images answer has no usage; the estimate is billed",
			zap.String("generation_id", c.GenerationID), zap.String("provider", rt.ProviderName))
	}
	size, quality := q.size, q.quality
	if raw, _ := rawjson.Get(obj, "size"); raw != nil {
		if s, ok := rawjson.String(raw); ok && s != "" {
			size = s
		}
	}
	if raw, _ := rawjson.Get(obj, "quality"); raw != nil {
		if s, ok := rawjson.String(raw); ok && s != "" {
			quality = s
		}
	}
	c.meterImages(rt, tokens, images, size, quality)
	return nil
}

// meterImages sets the call's usage: tokens as reported, images at their key resolved.
func (c *call) meterImages(rt Route, tokens pricing.Usage, images int, size, quality string) {
	size, quality = imageKey(rt.UpstreamModel, size, quality)
	c.meter(imageUsage(c.priceOf(rt), tokens, images, size, quality))
}

// parseImageUsage reads an Images API usage object. Input splits into text and image tokens;
// output is all image tokens unless it says otherwise (the Images API reports no split, and
// GPT Image's output is images: priced at the image rate, BerriAI/litellm#31142).
func parseImageUsage(raw []byte) (pricing.Usage, error) {
	var v struct {
		InputTokens        int64 `json:"input_tokens"`
		InputTokensDetails *struct {
			ImageTokens int64 `json:"image_tokens"`
		} `json:"input_tokens_details"`
		OutputTokens        int64 `json:"output_tokens"`
		OutputTokensDetails *struct {
			ImageTokens int64 `json:"image_tokens"`
		} `json:"output_tokens_details"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return pricing.Usage{}, fmt.Errorf("the provider's image usage is unreadable: %w", err)
	}
	in, out := max(v.InputTokens, 0), max(v.OutputTokens, 0)
	u := pricing.Usage{Input: in, ImageOutputTokens: out}
	if d := v.InputTokensDetails; d != nil {
		u.ImageInputTokens = min(max(d.ImageTokens, 0), in)
		u.Input = in - u.ImageInputTokens
	}
	if d := v.OutputTokensDetails; d != nil {
		u.ImageOutputTokens = min(max(d.ImageTokens, 0), out)
		u.Output = out - u.ImageOutputTokens
	}
	return u, nil
}

// appendImageUsage appends OpenAI's images usage object of u's tokens as reported (before
// any folding into text tokens).
func appendImageUsage(b []byte, u pricing.Usage) []byte {
	in, out := u.Input+u.ImageInputTokens, u.Output+u.ImageOutputTokens
	b = strconv.AppendInt(append(b, `{"input_tokens":`...), in, 10)
	b = strconv.AppendInt(append(b, `,"input_tokens_details":{"image_tokens":`...), u.ImageInputTokens, 10)
	b = strconv.AppendInt(append(b, `,"text_tokens":`...), u.Input, 10)
	b = strconv.AppendInt(append(b, `},"output_tokens":`...), out, 10)
	b = strconv.AppendInt(append(b, `,"output_tokens_details":{"image_tokens":`...), u.ImageOutputTokens, 10)
	b = strconv.AppendInt(append(b, `,"text_tokens":`...), u.Output, 10)
	b = strconv.AppendInt(append(b, `},"total_tokens":`...), in+out, 10)
	return append(b, '}')
}

// neutralImageParams are what an ImageGenerator cannot be asked: reported as dropped.
var neutralImageParams = []string{"response_format", "style", "moderation", "output_compression", "input_fidelity", "user", "partial_images"}

// imagesNeutral serves the request through an adapter's ImageGenerator, answered in OpenAI's
// shape: base64 images (a URL cannot be made of them), and for a stream one completed event
// per image, the last with the usage and its cost.
func (c *call) imagesNeutral(w http.ResponseWriter, r *http.Request, rt Route, q *imageRequest, form *upload.Form) error {
	ig, ok := rt.Provider.(providers.ImageGenerator)
	if !ok {
		return &providers.UpstreamError{Provider: rt.ProviderName, Category: providers.CategoryModelUnavailable, Message: "the provider cannot make images"}
	}
	req := &providers.ImageRequest{
		Model: rt.UpstreamModel, Prompt: q.prompt, N: q.n,
		Size: q.size, Quality: q.quality, OutputFormat: q.outputFormat, Background: q.background,
	}
	if q.edit {
		var err error
		if req.Images, req.Mask, err = readEditPictures(form, q); err != nil {
			return c.g.uploadError(err)
		}
	}
	c.dropped = c.dropped[:0]
	for _, p := range q.set {
		if containsFold(neutralImageParams, p) {
			c.dropped = append(c.dropped, p)
		}
	}
	// The images come whole: no header or first-token timer applies to a call that streams
	// nothing before it is done.
	c.headersArrived()
	c.gotToken()
	began := c.g.Now()
	resp, err := ig.GenerateImages(r.Context(), req)
	if err == nil && len(resp.Images) == 0 {
		err = c.providerFault(rt, "the provider answered no image", nil)
	}
	if err := c.neutralDone(rt, began, err); err != nil {
		return err
	}
	c.Status = http.StatusOK
	var tokens pricing.Usage
	if resp.UsageKnown {
		tokens = resp.Usage
	}
	size, quality := firstNonEmpty(resp.Size, q.size), firstNonEmpty(resp.Quality, q.quality)
	c.meterImages(rt, tokens, len(resp.Images), size, quality)
	format := q.outputFormat
	if format == "" {
		format = imageFormat(resp.Images[0].MIMEType)
	}
	created := c.Start.Unix()
	if q.stream {
		return c.neutralImageEvents(w, r, q, resp, tokens, created, format, size, quality)
	}
	buf := answerBufs.Get()
	b := strconv.AppendInt(append((*buf)[:0], `{"created":`...), created, 10)
	b = append(b, `,"data":[`...)
	for i, img := range resp.Images {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendGeneratedImage(append(b, '{'), img)
		b = append(b, '}')
	}
	b = append(b, ']')
	b = appendImageMeta(b, q.background, format, size, quality)
	b = appendImageUsage(append(b, `,"usage":`...), tokens)
	b = append(b, '}')
	defer answerBufs.Put(buf, b)
	return c.answerComplete(w, r, b, appendTokenUsage)
}

// neutralImageEvents writes a neutral answer as an OpenAI image stream: one completed event
// per image, the last written after the charge is recorded, with the usage and its cost.
func (c *call) neutralImageEvents(w http.ResponseWriter, r *http.Request, q *imageRequest, resp *providers.ImageResponse, tokens pricing.Usage, created int64, format, size, quality string) error {
	out := newSSEWriter(w)
	defer out.release()
	name := q.eventPrefix() + ".completed"
	for i, img := range resp.Images {
		b := append(append(make([]byte, 0, len(img.B64JSON)+256), `{"type":"`...), name...)
		b = appendGeneratedImage(append(b, `",`...), img)
		b = strconv.AppendInt(append(b, `,"created_at":`...), created, 10)
		b = appendImageMeta(b, q.background, format, size, quality)
		if i < len(resp.Images)-1 {
			out.event(name, append(b, '}'))
			if out.failed {
				c.clientGone()
				return nil
			}
			continue
		}
		b = appendImageUsage(append(b, `,"usage":`...), tokens)
		if !c.writeFinalEvent(out, r, name, append(b, '}'), nil) {
			c.clientGone()
		}
	}
	return nil
}

// appendGeneratedImage appends an image's members: b64_json and revised_prompt.
func appendGeneratedImage(b []byte, img providers.GeneratedImage) []byte {
	b = rawjson.AppendStringLikeMarshal(append(b, `"b64_json":`...), img.B64JSON)
	if img.RevisedPrompt != "" {
		b = rawjson.AppendStringLikeMarshal(append(b, `,"revised_prompt":`...), img.RevisedPrompt)
	}
	return b
}

// appendImageMeta appends the background, output_format, quality and size members known.
func appendImageMeta(b []byte, background, format, size, quality string) []byte {
	for _, m := range [...]struct{ k, v string }{{"background", background}, {"output_format", format}, {"quality", quality}, {"size", size}} {
		if m.v != "" && m.v != "auto" {
			b = rawjson.AppendStringLikeMarshal(append(append(append(b, `,"`...), m.k...), `":`...), m.v)
		}
	}
	return b
}

// imageFormat is the output_format of a media type: png, jpeg or webp.
func imageFormat(mimeType string) string {
	switch strings.ToLower(mimeType) {
	case "image/jpeg", "image/jpg":
		return "jpeg"
	case "image/webp":
		return "webp"
	}
	return "png"
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// readEditPictures reads an edit's pictures and mask whole from the spooled form: the
// upstreams that take edits as JSON need them inline, bounded by the upload limit.
func readEditPictures(form *upload.Form, q *imageRequest) ([]providers.ImageInput, *providers.ImageInput, error) {
	read := func(p upload.Part) (providers.ImageInput, error) { return readPicture(form, p) }
	images := make([]providers.ImageInput, 0, len(q.images))
	for _, p := range q.images {
		in, err := read(p)
		if err != nil {
			return nil, nil, err
		}
		images = append(images, in)
	}
	if q.mask == nil {
		return images, nil, nil
	}
	mask, err := read(*q.mask)
	if err != nil {
		return nil, nil, err
	}
	return images, &mask, nil
}

// readPicture reads an uploaded picture whole from the spooled form, its media type
// sniffed when the client named none.
func readPicture(form *upload.Form, p upload.Part) (providers.ImageInput, error) {
	sr, err := form.Open(p)
	if err != nil {
		return providers.ImageInput{}, err
	}
	data, err := io.ReadAll(sr)
	if err != nil {
		return providers.ImageInput{}, err
	}
	mt := p.ContentType
	if mt == "" || strings.EqualFold(mt, "application/octet-stream") {
		mt = http.DetectContentType(data)
	}
	return providers.ImageInput{Data: data, MIMEType: mt, FileName: p.FileName}, nil
}
