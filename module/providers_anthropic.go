package module

import (
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/anthropic"
)

func init() {
	caddy.RegisterModule(new(AnthropicProvider))
}

// AnthropicProvider is the provider type of Anthropic's Messages API.
type AnthropicProvider struct {
	httpUpstream
	// Version is the anthropic-version header; placeholders are resolved. Default:
	// 2023-06-01.
	Version string `json:"version,omitempty"`
	// DefaultMaxTokens is the max_tokens sent when a request has none (the API requires
	// one). Default: 4096.
	DefaultMaxTokens int64 `json:"default_max_tokens,omitempty"`
	// BatchAPI says whether the upstream has Message Batches (/v1/messages/batches): the
	// gateway then runs batches of messages and chat completions there, at the route's batch
	// price, and runs every other batch itself. Default: true when the base URL is
	// api.anthropic.com's, false otherwise.
	BatchAPI *bool `json:"batch_api,omitempty"`

	version string
}

// CaddyModule returns the Caddy module information.
func (*AnthropicProvider) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: ProvidersNamespace + ".anthropic", New: func() caddy.Module { return new(AnthropicProvider) }}
}

// Provision resolves placeholders and sets up the transport.
func (p *AnthropicProvider) Provision(ctx caddy.Context) error {
	repl := caddy.NewReplacer()
	p.version = repl.ReplaceKnown(p.Version, "")
	return p.provision(ctx, repl)
}

// Validate checks the timeout.
func (p *AnthropicProvider) Validate() error { return p.validate() }

// Build returns the adapter.
func (p *AnthropicProvider) Build(name string) (providers.Provider, error) {
	adapter, err := anthropic.New(anthropic.Config{
		Name: name, BaseURL: p.baseURL, APIKey: p.apiKey, RequireKey: p.requireKey(), Version: p.version,
		Headers: p.headers, Transport: p.transport, Timeout: p.timeout(),
		StreamIdleTimeout: time.Duration(p.StreamIdleTimeout), DefaultMaxTokens: p.DefaultMaxTokens,
		BatchAPI: p.BatchAPI,
	})
	if err != nil {
		return nil, err
	}
	return adapter, nil
}

// AcceptsPrefill is true: the Messages API continues a last assistant turn.
func (*AnthropicProvider) AcceptsPrefill() bool { return true }

// Cleanup releases the default transport.
func (p *AnthropicProvider) Cleanup() error { return p.cleanup() }

// Interface guards.
var (
	_ ProviderModule     = (*AnthropicProvider)(nil)
	_ PrefillAccepter    = (*AnthropicProvider)(nil)
	_ caddy.Provisioner  = (*AnthropicProvider)(nil)
	_ caddy.Validator    = (*AnthropicProvider)(nil)
	_ caddy.CleanerUpper = (*AnthropicProvider)(nil)
)
