package module_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/modelgateway/caddy-modelgateway/module"
	"github.com/modelgateway/caddy-modelgateway/providers"
)

// A provider type for the media tests, written as a third party writes it: MediaFake answers
// images with token usage (which the mock does not report) through the neutral interface.

func init() {
	caddy.RegisterModule(new(MediaFake))
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
	out := &providers.ImageResponse{Size: "1024x1024", Usage: providers.MediaUsage{Input: int64(len(strings.Fields(req.Prompt)))}, UsageKnown: true}
	if req.Size != "" && req.Size != "auto" {
		out.Size = req.Size
	}
	for i := range req.N {
		out.Images = append(out.Images, providers.GeneratedImage{B64JSON: fmt.Sprintf("ZmFrZQ%d", i), MIMEType: "image/png"})
	}
	return out, nil
}

// Interface guards.
var (
	_ module.ProviderModule    = (*MediaFake)(nil)
	_ providers.ImageGenerator = (*mediaFakeAdapter)(nil)
)
