package mock

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"strconv"
	"strings"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// Limits of the mock's images.
const (
	// MaxImages is the most images a request may ask for, as OpenAI allows.
	MaxImages = 10
	// imageScale is how many pixels of the size asked make one pixel of the mock's
	// thumbnails: 1024x1024 asks an 8x8 image.
	imageScale = 128
	// maxImageEdge bounds a thumbnail's side.
	maxImageEdge = 64
)

// GenerateImages answers N tiny images after the latency: gradients whose colours come from
// the model, the prompt and the images to edit, a pixel for every 128 of the size asked,
// PNG (JPEG when OutputFormat is jpeg). The size and quality are answered as resolved: ""
// and "auto" are 1024x1024 and standard. The usage is unknown: the gateway counts images.
func (p *Provider) GenerateImages(ctx context.Context, req *providers.ImageRequest) (*providers.ImageResponse, error) {
	n := max(req.N, 1)
	if n > MaxImages {
		return nil, p.invalid(fmt.Sprintf("n is %d: at most %d images a request", n, MaxImages))
	}
	size := strings.ToLower(strings.TrimSpace(req.Size))
	if size == "" || size == "auto" {
		size = "1024x1024"
	}
	w, h, ok := parseSize(size)
	if !ok {
		return nil, p.invalid(fmt.Sprintf("size %q is not WIDTHxHEIGHT or auto", req.Size))
	}
	quality := req.Quality
	if quality == "" || quality == "auto" {
		quality = "standard"
	}
	key := req.Model + "\x00" + req.Prompt
	for _, img := range req.Images {
		key += "\x00" + strconv.FormatUint(hash(string(img.Data)), 16)
	}
	if req.Mask != nil {
		key += "\x00mask " + strconv.FormatUint(hash(string(req.Mask.Data)), 16)
	}
	seed := hash(key)
	jpg := req.OutputFormat == "jpeg" || req.OutputFormat == "jpg"
	out := &providers.ImageResponse{Size: size, Quality: quality}
	for range n {
		b, err := thumbnail(&seed, clampEdge(w), clampEdge(h), jpg)
		if err != nil {
			return nil, fmt.Errorf("provider %s: encoding an image: %w", p.cfg.Name, err)
		}
		img := providers.GeneratedImage{B64JSON: base64.StdEncoding.EncodeToString(b), MIMEType: "image/png"}
		if jpg {
			img.MIMEType = "image/jpeg"
		}
		out.Images = append(out.Images, img)
	}
	if err := p.delay(ctx); err != nil {
		return nil, fmt.Errorf("provider %s: %w", p.cfg.Name, err)
	}
	return out, nil
}

func parseSize(s string) (w, h int, ok bool) {
	ws, hs, ok := strings.Cut(s, "x")
	w, errW := strconv.Atoi(ws)
	h, errH := strconv.Atoi(hs)
	return w, h, ok && errW == nil && errH == nil && w > 0 && h > 0
}

func clampEdge(px int) int { return min(max(px/imageScale, 1), maxImageEdge) }

// thumbnail draws a w×h gradient between two colours drawn from seed.
func thumbnail(seed *uint64, w, h int, jpg bool) ([]byte, error) {
	from, to := splitmix(seed), splitmix(seed)
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	mix := func(a, b uint64, shift uint, t, span int) uint8 {
		x, y := int(uint8(a>>shift)), int(uint8(b>>shift))
		return uint8(x + (y-x)*t/max(span, 1))
	}
	for y := range h {
		for x := range w {
			t, span := x+y, w+h-2
			img.SetNRGBA(x, y, color.NRGBA{R: mix(from, to, 0, t, span), G: mix(from, to, 8, t, span), B: mix(from, to, 16, t, span), A: 255})
		}
	}
	var buf bytes.Buffer
	var err error
	if jpg {
		err = jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90})
	} else {
		err = png.Encode(&buf, img)
	}
	return buf.Bytes(), err
}

// Interface guard.
var _ providers.ImageGenerator = (*Provider)(nil)
