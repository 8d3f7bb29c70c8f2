package module_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/modelgateway/caddy-modelgateway/module"
	"github.com/modelgateway/caddy-modelgateway/providers"
)

// Provider types for the media tests, written as a third party writes them: OCRWire
// forwards Mistral's OCR format to base_url/v1/ocr as it is (what providers/mistral is to
// do), MediaFake answers images and documents through the neutral interfaces.

func init() {
	caddy.RegisterModule(new(OCRWire))
	caddy.RegisterModule(new(MediaFake))
}

// OCRWire is the type ocr_wire.
type OCRWire struct {
	BaseURL string `json:"base_url,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (*OCRWire) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "model_gateway.providers.ocr_wire", New: func() caddy.Module { return new(OCRWire) }}
}

// UnmarshalCaddyfile reads `base_url <url>`.
func (o *OCRWire) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next()
	for d.NextBlock(0) {
		if d.Val() != "base_url" || !d.NextArg() {
			return d.Errf("unrecognized subdirective %q", d.Val())
		}
		o.BaseURL = d.Val()
	}
	return nil
}

// Build returns the adapter.
func (o *OCRWire) Build(name string) (providers.Provider, error) {
	return &ocrWireAdapter{name: name, url: strings.TrimSuffix(o.BaseURL, "/") + "/v1/ocr"}, nil
}

type ocrWireAdapter struct{ name, url string }

func (a *ocrWireAdapter) Name() string { return a.name }

func (a *ocrWireAdapter) Formats() []providers.WireFormat {
	return []providers.WireFormat{providers.FormatMistralOCR}
}

func (a *ocrWireAdapter) Forward(ctx context.Context, req *providers.RawRequest) (*providers.RawResponse, error) {
	if req.Format != providers.FormatMistralOCR {
		return nil, fmt.Errorf("cannot forward %s", req.Format)
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, a.url, bytes.NewReader(req.Body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		return nil, &providers.UpstreamError{Provider: a.name, Category: providers.CategoryServerError, Retryable: true, Message: err.Error(), Err: err}
	}
	if resp.StatusCode/100 != 2 {
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		cat := providers.CategoryServerError
		if resp.StatusCode < 500 {
			cat = providers.CategoryInvalidRequest
		}
		return nil, &providers.UpstreamError{Provider: a.name, Status: resp.StatusCode, Category: cat, Retryable: cat == providers.CategoryServerError, Message: string(body)}
	}
	return &providers.RawResponse{Status: resp.StatusCode, Header: resp.Header, Body: resp.Body, ContentLength: resp.ContentLength}, nil
}

// MediaFake is the type media_fake: it makes images of the size asked (or 1024x1024) and
// reads three pages of any document.
type MediaFake struct{}

// CaddyModule returns the Caddy module information.
func (*MediaFake) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "model_gateway.providers.media_fake", New: func() caddy.Module { return new(MediaFake) }}
}

// Build returns the adapter.
func (*MediaFake) Build(name string) (providers.Provider, error) {
	return &mediaFakeAdapter{name: name}, nil
}

type mediaFakeAdapter struct{ name string }

func (a *mediaFakeAdapter) Name() string { return a.name }

func (a *mediaFakeAdapter) GenerateImages(_ context.Context, req *providers.ImageRequest) (*providers.ImageResponse, error) {
	out := &providers.ImageResponse{Size: "1024x1024", Usage: providers.MediaUsage{InputTokens: int64(len(strings.Fields(req.Prompt)))}, UsageKnown: true}
	if req.Size != "" && req.Size != "auto" {
		out.Size = req.Size
	}
	for i := range req.N {
		out.Images = append(out.Images, providers.GeneratedImage{B64JSON: fmt.Sprintf("ZmFrZQ%d", i), MIMEType: "image/png"})
	}
	return out, nil
}

func (a *mediaFakeAdapter) ReadDocument(_ context.Context, req *providers.OCRRequest) (*providers.OCRResponse, error) {
	out := &providers.OCRResponse{Usage: providers.MediaUsage{Pages: 3}}
	for i := range 3 {
		out.Pages = append(out.Pages, providers.OCRPage{Index: i, Markdown: fmt.Sprintf("Page %d of %s", i+1, req.DocumentURL)})
	}
	return out, nil
}

// Interface guards.
var (
	_ module.ProviderModule    = (*OCRWire)(nil)
	_ caddyfile.Unmarshaler    = (*OCRWire)(nil)
	_ providers.Forwarder      = (*ocrWireAdapter)(nil)
	_ module.ProviderModule    = (*MediaFake)(nil)
	_ providers.ImageGenerator = (*mediaFakeAdapter)(nil)
	_ providers.DocumentReader = (*mediaFakeAdapter)(nil)
)
