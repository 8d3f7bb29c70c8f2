package module

import (
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/elevenlabs"
)

func init() {
	caddy.RegisterModule(new(ElevenLabsProvider))
}

// ElevenLabsProvider is the provider type of ElevenLabs' speech APIs: text to speech and
// Scribe speech to text. Its stream_idle_timeout bounds the silences in the audio of a speech.
type ElevenLabsProvider struct {
	httpUpstream
}

// CaddyModule returns the Caddy module information.
func (*ElevenLabsProvider) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: ProvidersNamespace + ".elevenlabs", New: func() caddy.Module { return new(ElevenLabsProvider) }}
}

// Provision resolves placeholders and sets up the transport.
func (p *ElevenLabsProvider) Provision(ctx caddy.Context) error {
	return p.provision(ctx, caddy.NewReplacer())
}

// Validate checks the timeout.
func (p *ElevenLabsProvider) Validate() error { return p.validate() }

// Build returns the adapter.
func (p *ElevenLabsProvider) Build(name string) (providers.Provider, error) {
	adapter, err := elevenlabs.New(elevenlabs.Config{
		Name: name, BaseURL: p.baseURL, APIKey: p.apiKey, RequireKey: p.requireKey(), Headers: p.headers,
		Transport: p.transport, Timeout: p.timeout(), StreamIdleTimeout: time.Duration(p.StreamIdleTimeout),
	})
	if err != nil {
		return nil, err
	}
	return adapter, nil
}

// Cleanup releases the default transport.
func (p *ElevenLabsProvider) Cleanup() error { return p.cleanup() }

// Interface guards.
var (
	_ ProviderModule     = (*ElevenLabsProvider)(nil)
	_ caddy.Provisioner  = (*ElevenLabsProvider)(nil)
	_ caddy.Validator    = (*ElevenLabsProvider)(nil)
	_ caddy.CleanerUpper = (*ElevenLabsProvider)(nil)
)
