package module

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

// defaultAttemptTimeout bounds one upstream attempt when the configuration does not.
const defaultAttemptTimeout = 10 * time.Minute

// httpUpstream holds the options of a provider type reached over HTTP, which the built-in
// ones (openai, anthropic, gemini, elevenlabs, mistral) embed.
type httpUpstream struct {
	// BaseURL is the API root, e.g. https://api.groq.com/openai/v1. Placeholders are
	// resolved. Default: the vendor's API (openai https://api.openai.com/v1, anthropic
	// https://api.anthropic.com, gemini https://generativelanguage.googleapis.com/v1beta,
	// mistral https://api.mistral.ai/v1, elevenlabs https://api.elevenlabs.io).
	BaseURL string `json:"base_url,omitempty"`
	// APIKey authenticates to the provider; write "{env.OPENAI_API_KEY}" to read it from the
	// environment when the configuration loads. One that resolves empty has every call
	// refused at once with credentials_not_configured. Never logged. Default: none.
	APIKey string `json:"api_key,omitempty"`
	// Headers are added to every upstream request; placeholders are resolved. Default: none.
	Headers map[string]string `json:"headers,omitempty"`
	// Timeout bounds one upstream attempt from request to last byte. Default: 10m.
	Timeout caddy.Duration `json:"timeout,omitempty"`
	// StreamIdleTimeout ends a stream the adapter translates (for elevenlabs, the audio of a
	// speech) that sends nothing for this long. Default: 30s.
	StreamIdleTimeout caddy.Duration `json:"stream_idle_timeout,omitempty"`
	// TransportRaw is Caddy's reverse-proxy HTTP transport ({"protocol": "http", ...}) with its
	// dial and header timeouts, keep-alive pool, TLS and HTTP/2 options. Default: Caddy's.
	TransportRaw json.RawMessage `json:"transport,omitempty" caddy:"namespace=http.reverse_proxy.transport inline_key=protocol"`

	baseURL   string
	apiKey    string
	headers   map[string]string
	transport http.RoundTripper
	// ownTransport is the default transport, provisioned and cleaned up here (a configured
	// one is a guest module, which Caddy cleans up).
	ownTransport *reverseproxy.HTTPTransport
}

// provision resolves the placeholders and sets up the transport.
func (u *httpUpstream) provision(ctx caddy.Context, repl *caddy.Replacer) error {
	u.baseURL = repl.ReplaceKnown(u.BaseURL, "")
	if u.baseURL != "" {
		if v, err := url.Parse(u.baseURL); err != nil || (v.Scheme != "http" && v.Scheme != "https") || v.Host == "" {
			return fmt.Errorf("base_url %q must be an http or https URL", u.baseURL)
		}
	}
	u.apiKey = repl.ReplaceKnown(u.APIKey, "")
	u.headers = make(map[string]string, len(u.Headers))
	for k, v := range u.Headers {
		u.headers[k] = repl.ReplaceKnown(v, "")
	}
	if u.TransportRaw != nil {
		mod, err := ctx.LoadModule(u, "TransportRaw")
		if err != nil {
			return fmt.Errorf("loading transport: %w", err)
		}
		rt, ok := mod.(http.RoundTripper)
		if !ok {
			return fmt.Errorf("transport %T is not an HTTP round tripper", mod)
		}
		u.transport = rt
		return nil
	}
	t := new(reverseproxy.HTTPTransport)
	if err := t.Provision(ctx); err != nil {
		return fmt.Errorf("provisioning the default transport: %w", err)
	}
	u.transport, u.ownTransport = t, t
	return nil
}

// requireKey tells whether an api_key is configured: one that resolves empty is a mistake
// (an unset environment variable), not a keyless local server.
func (u *httpUpstream) requireKey() bool { return u.APIKey != "" }

// CredentialMissing tells whether the upstream will refuse every call for want of a key:
// one configured that resolved empty, or none for the vendor's own API (no base_url), unless
// headers carry the credential.
func (u *httpUpstream) CredentialMissing() bool {
	if u.APIKey != "" {
		return u.apiKey == ""
	}
	return u.BaseURL == "" && len(u.Headers) == 0
}

// timeout is the bound of one attempt.
func (u *httpUpstream) timeout() time.Duration {
	if u.Timeout == 0 {
		return defaultAttemptTimeout
	}
	return time.Duration(u.Timeout)
}

func (u *httpUpstream) validate() error {
	if u.Timeout < 0 {
		return fmt.Errorf("timeout must not be negative")
	}
	return nil
}

func (u *httpUpstream) cleanup() error {
	if u.ownTransport == nil {
		return nil
	}
	return u.ownTransport.Cleanup()
}
