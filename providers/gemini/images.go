package gemini

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/modelgateway/caddy-modelgateway/internal/background"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
)

// Limits of an image request.
const (
	// MaxImages is the most images one request may ask for (OpenAI's n is 1 to 10).
	MaxImages = 10
	// imagenBatch is the most images one :predict call makes.
	imagenBatch = 4
	// maxParallelCalls bounds the calls one request has in flight.
	maxParallelCalls = 4
)

// The aspect ratios each family of models makes, which a requested size is rounded to.
var (
	imagenRatios = []string{"1:1", "3:4", "4:3", "9:16", "16:9"}
	geminiRatios = []string{"1:1", "2:3", "3:2", "3:4", "4:3", "4:5", "5:4", "9:16", "16:9", "21:9"}
)

// maskNote introduces the mask of an edit, which Gemini's image models take as one more
// picture: OpenAI's masks are transparent where the image may change.
const maskNote = "The next image is a mask: change only the area it leaves transparent and keep the rest of the image as it is."

// GenerateImages makes images with an Imagen model (an id that starts with "imagen"),
// through :predict, or with a Gemini image model, through generateContent with
// responseModalities TEXT and IMAGE.
//
//   - Size ("WxH") becomes the closest aspect ratio the family makes (Imagen: 1:1, 3:4, 4:3,
//     9:16, 16:9; Gemini also 2:3, 3:2, 4:5, 5:4, 21:9); "" and "auto" leave it to the
//     model. For a Gemini model a long edge past 1536 pixels also asks imageSize 2K, past
//     2560 4K. Quality, OutputFormat and Background have no field in the Gemini API and are
//     dropped; each image's MIMEType says what Gemini made.
//   - Imagen makes up to four images a call, and N is cut into calls of four; it reports no
//     tokens, so the usage is unknown and the images are counted by the caller. It does not
//     edit: a request with images is refused before any call (invalid_request, Status 0,
//     ErrUnsupportedRequest), on which the gateway tries the model's next route.
//   - A Gemini image model makes one image a call (it takes no candidateCount), so N images
//     are N calls, at most four at a time, with their usage added up. The images to edit go
//     inline after the prompt, and the mask last, after a note that says what it is.
//     Thought images (the drafts of thinking models) are not answers and are dropped.
//     Usage: promptTokenCount is Input, less its IMAGE share (ImageInputTokens); the
//     IMAGE share of candidatesTokenCount (all of it without details) is
//     ImageOutputTokens, the rest and the thoughts Output.
//
// A call that fails fails the request. An answer without any image (the prompt or the
// image blocked, IMAGE_SAFETY, a refusal in text) is an *UpstreamError of category
// invalid_request that says why.
func (p *Provider) GenerateImages(ctx context.Context, req *providers.ImageRequest) (*providers.ImageResponse, error) {
	model, err := modelPath(req.Model)
	if err != nil {
		return nil, &providers.UpstreamError{Provider: p.name, Category: providers.CategoryModelUnavailable, Message: err.Error(), Err: err}
	}
	n := max(req.N, 1)
	if n > MaxImages {
		return nil, p.invalid(fmt.Sprintf("n is %d: at most %d images a request", n, MaxImages))
	}
	if strings.TrimSpace(req.Prompt) == "" {
		return nil, p.invalid("prompt is empty")
	}
	_, id, _ := strings.Cut(model, "/")
	if strings.HasPrefix(id, "imagen") {
		return p.imagen(ctx, model, req, n)
	}
	return p.geminiImages(ctx, model, req, n)
}

func (p *Provider) invalid(msg string) *providers.UpstreamError {
	return &providers.UpstreamError{Provider: p.name, Category: providers.CategoryInvalidRequest, Message: msg}
}

// imagen makes n images with :predict, in calls of at most four.
func (p *Provider) imagen(ctx context.Context, model string, req *providers.ImageRequest, n int) (*providers.ImageResponse, error) {
	if len(req.Images) > 0 || req.Mask != nil {
		return nil, requestError(p.name, fmt.Errorf("%w: Imagen models make images from a prompt and do not edit images", ErrUnsupportedRequest))
	}
	ratio, _, _, err := aspectRatio(req.Size, imagenRatios)
	if err != nil {
		return nil, p.invalid(err.Error())
	}
	var counts []int
	for left := n; left > 0; left -= imagenBatch {
		counts = append(counts, min(left, imagenBatch))
	}
	target := p.base + "/" + model + ":predict"
	results, err := fanOut(ctx, p.name, len(counts), func(ctx context.Context, i int) (imageResult, error) {
		body, err := json.Marshal(PredictRequest{
			Instances:  []PredictInstance{{Prompt: req.Prompt}},
			Parameters: PredictParameters{SampleCount: counts[i], AspectRatio: ratio},
		})
		if err != nil {
			return imageResult{}, requestError(p.name, fmt.Errorf("encoding request: %w", err))
		}
		ans, err := p.up.CallAnswer(ctx, target, body)
		if err != nil {
			return imageResult{}, err
		}
		var r PredictResponse
		if err := json.Unmarshal(ans.Body, &r); err != nil {
			return imageResult{}, p.up.Malformed(ans.Status, ans.Body, err)
		}
		if !isFalsy(r.Error) {
			return imageResult{}, streamError(p.name, p.up.Redact(ans.Body))
		}
		ans.Release() // r holds copies
		var out imageResult
		for _, pr := range r.Predictions {
			switch {
			case pr.BytesBase64Encoded != "":
				mt := pr.MimeType
				if mt == "" {
					mt = "image/png"
				}
				out.images = append(out.images, providers.GeneratedImage{B64JSON: pr.BytesBase64Encoded, MIMEType: mt})
			case pr.RaiFilteredReason != "" && out.why == "":
				out.why = "Imagen filtered the image: " + pr.RaiFilteredReason
			}
		}
		if len(out.images) == 0 && out.why == "" {
			out.why = "Imagen returned no image"
		}
		return out, nil
	})
	if err != nil {
		return nil, err
	}
	return p.imageResponse(results, n, false)
}

// geminiImages makes n images with generateContent, one call each.
func (p *Provider) geminiImages(ctx context.Context, model string, req *providers.ImageRequest, n int) (*providers.ImageResponse, error) {
	ratio, w, h, err := aspectRatio(req.Size, geminiRatios)
	if err != nil {
		return nil, p.invalid(err.Error())
	}
	parts := []Part{{Text: req.Prompt}}
	for i := range req.Images {
		blob, err := inlineImage(&req.Images[i])
		if err != nil {
			return nil, p.invalid(fmt.Sprintf("image %d: %v", i+1, err))
		}
		parts = append(parts, Part{InlineData: blob})
	}
	if req.Mask != nil {
		blob, err := inlineImage(req.Mask)
		if err != nil {
			return nil, p.invalid(fmt.Sprintf("mask: %v", err))
		}
		parts = append(parts, Part{Text: maskNote}, Part{InlineData: blob})
	}
	gc := &GenerationConfig{ResponseModalities: []string{"TEXT", "IMAGE"}}
	if size := imageSize(w, h); ratio != "" || size != "" {
		gc.ImageConfig = &ImageConfig{AspectRatio: ratio, ImageSize: size}
	}
	body, err := json.Marshal(GenerateContentRequest{Contents: []Content{{Role: "user", Parts: parts}}, GenerationConfig: gc})
	if err != nil {
		return nil, requestError(p.name, fmt.Errorf("encoding request: %w", err))
	}
	target := p.base + "/" + model + ":generateContent"
	results, err := fanOut(ctx, p.name, n, func(ctx context.Context, _ int) (imageResult, error) {
		ans, err := p.up.CallAnswer(ctx, target, body)
		if err != nil {
			return imageResult{}, err
		}
		var r imageAnswer
		if err := json.Unmarshal(ans.Body, &r); err != nil {
			return imageResult{}, p.up.Malformed(ans.Status, ans.Body, err)
		}
		if !isFalsy(r.Error) {
			return imageResult{}, streamError(p.name, p.up.Redact(ans.Body))
		}
		ans.Release() // r holds copies
		return p.readImageAnswer(&r), nil
	})
	if err != nil {
		return nil, err
	}
	return p.imageResponse(results, n, true)
}

// imageAnswer is a generateContent answer with the usage details images are billed by.
type imageAnswer struct {
	Candidates     []Candidate         `json:"candidates"`
	PromptFeedback *PromptFeedback     `json:"promptFeedback"`
	UsageMetadata  *MediaUsageMetadata `json:"usageMetadata"`
	Error          json.RawMessage     `json:"error"`
}

// imageResult is what one call made: its images, its usage, and why it made none.
type imageResult struct {
	images    []providers.GeneratedImage
	usage     providers.MediaUsage
	usageSeen bool
	why       string
	code      string
}

func (p *Provider) readImageAnswer(r *imageAnswer) imageResult {
	var out imageResult
	if r.UsageMetadata != nil {
		out.usage, out.usageSeen = mediaUsage(r.UsageMetadata, "IMAGE"), true
	}
	var text string
	c := firstCandidate(r.Candidates)
	if c != nil && c.Content != nil {
		for _, part := range c.Content.Parts {
			switch {
			case part.Thought:
				// A draft of a thinking model, not the answer.
			case part.InlineData != nil && strings.HasPrefix(part.InlineData.MimeType, "image/") && part.InlineData.Data != "":
				out.images = append(out.images, providers.GeneratedImage{B64JSON: part.InlineData.Data, MIMEType: part.InlineData.MimeType})
			case part.Text != "" && len(text) < upstreamhttp.MaxMessage:
				text += part.Text
			}
		}
	}
	if len(out.images) > 0 {
		return out
	}
	switch {
	case r.PromptFeedback != nil && r.PromptFeedback.BlockReason != "":
		out.code = r.PromptFeedback.BlockReason
		out.why = withDetail("Gemini blocked the prompt ("+out.code+")", r.PromptFeedback.BlockReasonMessage)
	case c == nil:
		out.why = "Gemini returned no image and no candidate"
	default:
		out.code = c.FinishReason
		reason := c.FinishReason
		if reason == "" {
			reason = "none"
		}
		detail := c.FinishMessage
		if detail == "" && text != "" {
			detail = "the model answered in text: " + text
		}
		out.why = withDetail("Gemini returned no image (finish reason "+reason+")", detail)
	}
	return out
}

// imageResponse gathers the images of every call, at most n, and adds up their usage. No
// image at all is the caller's invalid request, with the reason of the first call.
func (p *Provider) imageResponse(results []imageResult, n int, tokens bool) (*providers.ImageResponse, error) {
	out := &providers.ImageResponse{UsageKnown: tokens}
	for _, r := range results {
		for _, img := range r.images {
			if len(out.Images) < n {
				out.Images = append(out.Images, img)
			}
		}
		out.Usage = addMediaUsage(out.Usage, r.usage)
		out.UsageKnown = out.UsageKnown && r.usageSeen
	}
	if len(out.Images) == 0 {
		return nil, &providers.UpstreamError{Provider: p.name, Category: providers.CategoryInvalidRequest,
			Code: results[0].code, Message: results[0].why}
	}
	return out, nil
}

// inlineImage is an uploaded picture as inlineData; its type is sniffed when the upload did
// not say it.
func inlineImage(img *providers.ImageInput) (*Blob, error) {
	if len(img.Data) == 0 {
		return nil, fmt.Errorf("empty file")
	}
	mt := strings.ToLower(strings.TrimSpace(img.MIMEType))
	if mt == "" || mt == "application/octet-stream" {
		mt = http.DetectContentType(img.Data)
	}
	if i := strings.IndexByte(mt, ';'); i >= 0 {
		mt = strings.TrimSpace(mt[:i])
	}
	if !strings.HasPrefix(mt, "image/") {
		return nil, fmt.Errorf("a file of type %q is not an image", upstreamhttp.Truncate(mt, 100))
	}
	return &Blob{MimeType: mt, Data: base64.StdEncoding.EncodeToString(img.Data)}, nil
}

// aspectRatio rounds a "WxH" size to the closest ratio of supported (by the logarithm of
// the ratios, so that 2:1 is as far from 1:1 as 1:2); "" and "auto" are no ratio.
func aspectRatio(size string, supported []string) (ratio string, w, h int, err error) {
	size = strings.ToLower(strings.TrimSpace(size))
	if size == "" || size == "auto" {
		return "", 0, 0, nil
	}
	ws, hs, ok := strings.Cut(size, "x")
	w, errW := strconv.Atoi(ws)
	h, errH := strconv.Atoi(hs)
	if !ok || errW != nil || errH != nil || w <= 0 || h <= 0 {
		return "", 0, 0, fmt.Errorf("size %q is not WIDTHxHEIGHT or auto", upstreamhttp.Truncate(size, 40))
	}
	want := math.Log(float64(w) / float64(h))
	best := math.Inf(1)
	for _, r := range supported {
		rw, rh, _ := strings.Cut(r, ":")
		a, _ := strconv.Atoi(rw)
		b, _ := strconv.Atoi(rh)
		if d := math.Abs(math.Log(float64(a)/float64(b)) - want); d < best {
			best, ratio = d, r
		}
	}
	return ratio, w, h, nil
}

// imageSize is the imageSize a size asks of a Gemini image model: none (1K, every model's
// default) up to a long edge of 1536 pixels, 2K up to 2560, 4K beyond.
func imageSize(w, h int) string {
	switch long := max(w, h); {
	case long > 2560:
		return "4K"
	case long > 1536:
		return "2K"
	}
	return ""
}

func addMediaUsage(a, b providers.MediaUsage) providers.MediaUsage {
	a.Input += b.Input
	a.Output += b.Output
	a.InputAudioTokens += b.InputAudioTokens
	a.OutputAudioTokens += b.OutputAudioTokens
	a.ImageInputTokens += b.ImageInputTokens
	a.ImageOutputTokens += b.ImageOutputTokens
	a.InputCharacters += b.InputCharacters
	a.InputAudio += b.InputAudio
	a.OutputAudio += b.OutputAudio
	a.Pages += b.Pages
	return a
}

// fanOut runs call for 0 to n-1, at most maxParallelCalls at a time, and returns the
// results in order. The first failure cancels the calls still running and is returned; the
// caller's own cancellation is returned as its context's error.
func fanOut[T any](ctx context.Context, provider string, n int, call func(context.Context, int) (T, error)) ([]T, error) {
	if n == 1 {
		r, err := call(ctx, 0)
		if err != nil {
			return nil, err
		}
		return []T{r}, nil
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		out   = make([]T, n)
		wg    sync.WaitGroup
		once  sync.Once
		first error
		slots = make(chan struct{}, maxParallelCalls)
	)
launch:
	for i := range n {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			break launch
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			// A panic here would end the process, not the request as on the request's own
			// goroutine: it fails this call instead.
			var r T
			var err error
			if p := background.Call("gemini image call", func() { r, err = call(ctx, i) }); p != nil {
				err = fmt.Errorf("provider %s: %w", provider, p)
			}
			if err != nil {
				once.Do(func() { first = err; cancel() })
				return
			}
			out[i] = r
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	if err := parent.Err(); err != nil {
		return nil, fmt.Errorf("provider %s: %w", provider, err)
	}
	return out, nil
}

// Interface guard.
var _ providers.ImageGenerator = (*Provider)(nil)
