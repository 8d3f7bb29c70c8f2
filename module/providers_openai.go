package module

import (
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/openai"
)

func init() {
	caddy.RegisterModule(new(OpenAIProvider))
}

// OpenAIProvider is the provider type of OpenAI's API and of every OpenAI-compatible
// server (Groq, Mistral, vLLM, Ollama...).
type OpenAIProvider struct {
	httpUpstream
	// API is the one OpenAI API the upstream speaks: "chat" (/chat/completions, what
	// compatible servers have) or "responses" (/responses). Requests in that format are
	// forwarded byte for byte; the others are translated to it. Default: chat.
	API string `json:"api,omitempty"`
	// Organization and Project set OpenAI's OpenAI-Organization and OpenAI-Project headers;
	// placeholders are resolved. Default: none.
	Organization string `json:"organization,omitempty"`
	Project      string `json:"project,omitempty"`
	// BatchAPI says whether the upstream has OpenAI's Batch API (/files and /batches): the
	// gateway then runs batches of chat completions, responses and embeddings there, at the
	// route's batch price, and runs every other batch itself, request by request. Default:
	// true when the base URL is api.openai.com's, false otherwise (compatible servers such as
	// vLLM, Ollama or Groq mostly lack it).
	BatchAPI *bool `json:"batch_api,omitempty"`

	organization string
	project      string
}

// CaddyModule returns the Caddy module information.
func (*OpenAIProvider) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: ProvidersNamespace + ".openai", New: func() caddy.Module { return new(OpenAIProvider) }}
}

// Provision resolves placeholders and sets up the transport.
func (p *OpenAIProvider) Provision(ctx caddy.Context) error {
	repl := caddy.NewReplacer()
	p.organization, p.project = repl.ReplaceKnown(p.Organization, ""), repl.ReplaceKnown(p.Project, "")
	return p.provision(ctx, repl)
}

// Validate checks the API and the timeout.
func (p *OpenAIProvider) Validate() error {
	if p.API != "" && p.API != "chat" && p.API != "responses" {
		return fmt.Errorf("api: want chat or responses, got %q", p.API)
	}
	return p.validate()
}

// Build returns the adapter.
func (p *OpenAIProvider) Build(name string) (providers.Provider, error) {
	adapter, err := openai.New(openai.Config{
		Name: name, BaseURL: p.baseURL, APIKey: p.apiKey, RequireKey: p.requireKey(),
		Organization: p.organization, Project: p.project, Headers: p.headers, Transport: p.transport,
		Timeout: p.timeout(), StreamIdleTimeout: time.Duration(p.StreamIdleTimeout), API: p.API,
		BatchAPI: p.BatchAPI,
	})
	if err != nil {
		return nil, err
	}
	return adapter, nil
}

// Cleanup releases the default transport.
func (p *OpenAIProvider) Cleanup() error { return p.cleanup() }

// Interface guards.
var (
	_ ProviderModule     = (*OpenAIProvider)(nil)
	_ caddy.Provisioner  = (*OpenAIProvider)(nil)
	_ caddy.Validator    = (*OpenAIProvider)(nil)
	_ caddy.CleanerUpper = (*OpenAIProvider)(nil)
)
