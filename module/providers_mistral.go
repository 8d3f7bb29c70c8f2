package module

import (
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/mistral"
)

func init() {
	caddy.RegisterModule(new(MistralProvider))
}

// MistralProvider is the provider type of Mistral's API: chat completions and embeddings
// (OpenAI's wire), Voxtral transcription (OpenAI's wire, the answer normalised to it) and
// OCR (Mistral's own /v1/ocr). Its base_url defaults to https://api.mistral.ai/v1.
type MistralProvider struct {
	httpUpstream
}

// CaddyModule returns the Caddy module information.
func (*MistralProvider) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: ProvidersNamespace + ".mistral", New: func() caddy.Module { return new(MistralProvider) }}
}

// Provision resolves placeholders and sets up the transport.
func (p *MistralProvider) Provision(ctx caddy.Context) error {
	return p.provision(ctx, caddy.NewReplacer())
}

// Validate checks the timeout.
func (p *MistralProvider) Validate() error { return p.validate() }

// Build returns the adapter.
func (p *MistralProvider) Build(name string) (providers.Provider, error) {
	adapter, err := mistral.New(mistral.Config{
		Name: name, BaseURL: p.baseURL, APIKey: p.apiKey, RequireKey: p.requireKey(), Headers: p.headers,
		Transport: p.transport, Timeout: p.timeout(), StreamIdleTimeout: time.Duration(p.StreamIdleTimeout),
	})
	if err != nil {
		return nil, err
	}
	return adapter, nil
}

// Cleanup releases the default transport.
func (p *MistralProvider) Cleanup() error { return p.cleanup() }

// Interface guards.
var (
	_ ProviderModule     = (*MistralProvider)(nil)
	_ caddy.Provisioner  = (*MistralProvider)(nil)
	_ caddy.Validator    = (*MistralProvider)(nil)
	_ caddy.CleanerUpper = (*MistralProvider)(nil)
)
