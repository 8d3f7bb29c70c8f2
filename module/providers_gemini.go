package module

import (
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/gemini"
)

func init() {
	caddy.RegisterModule(new(GeminiProvider))
}

// GeminiProvider is the provider type of Google's Gemini API (generateContent).
type GeminiProvider struct {
	httpUpstream
}

// CaddyModule returns the Caddy module information.
func (*GeminiProvider) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: ProvidersNamespace + ".gemini", New: func() caddy.Module { return new(GeminiProvider) }}
}

// Provision resolves placeholders and sets up the transport.
func (p *GeminiProvider) Provision(ctx caddy.Context) error {
	return p.provision(ctx, caddy.NewReplacer())
}

// Validate checks the timeout.
func (p *GeminiProvider) Validate() error { return p.validate() }

// Build returns the adapter.
func (p *GeminiProvider) Build(name string) (providers.Provider, error) {
	adapter, err := gemini.New(gemini.Config{
		Name: name, BaseURL: p.baseURL, APIKey: p.apiKey, RequireKey: p.requireKey(), Headers: p.headers,
		Transport: p.transport, Timeout: p.timeout(), StreamIdleTimeout: time.Duration(p.StreamIdleTimeout),
	})
	if err != nil {
		return nil, err
	}
	return adapter, nil
}

// Cleanup releases the default transport.
func (p *GeminiProvider) Cleanup() error { return p.cleanup() }

// Interface guards.
var (
	_ ProviderModule     = (*GeminiProvider)(nil)
	_ caddy.Provisioner  = (*GeminiProvider)(nil)
	_ caddy.Validator    = (*GeminiProvider)(nil)
	_ caddy.CleanerUpper = (*GeminiProvider)(nil)
)
