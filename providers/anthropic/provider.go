// Package anthropic is the adapter for Anthropic's Messages API (POST /v1/messages) and the
// servers that speak it. It also owns the Messages wire format: the converters between it
// and the neutral model that the gateway's messages surface uses in the other direction
// (DecodeRequest, EncodeResponse, StreamEncoder...), so that each format is translated in
// one package only.
//
// The Provider calls the upstream with x-api-key and anthropic-version. It implements
// providers.Forwarder for Messages bodies (sent byte for byte) and providers.ChatProvider
// for the neutral model, whose policies for what the API cannot take as it is (JSON mode,
// temperature above 1, thinking with forced tool use...) are documented on EncodeRequest and
// Unsupported.
//
// The Messages stream skips a malformed frame (data that is not JSON, or JSON of the wrong
// shape) instead of failing, and counts it: the stream has a SkippedFrames() int method,
// which the gateway reads through the optional interface interface{ SkippedFrames() int }.
// Error events still end it with an error. A body that ends cleanly without message_stop
// ends the stream cleanly, with a finish and the last usage known; a body that breaks off
// (transport error, idle timeout) is an error.
package anthropic

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
)

// DefaultBaseURL is Anthropic's API.
const DefaultBaseURL = "https://api.anthropic.com"

// DefaultVersion is the anthropic-version header sent by default, the one the SDKs send.
const DefaultVersion = "2023-06-01"

// DefaultStreamIdleTimeout is the longest silence allowed on a stream by default. The API
// sends ping events during long pauses, well within it.
const DefaultStreamIdleTimeout = 30 * time.Second

// forwardedHeaders are the client headers passed on (canonical keys): the beta feature flags
// and tracing. Anything else, and credentials above all (x-api-key, Authorization, cookies),
// stays at the gateway; anthropic-version is the provider's own.
var forwardedHeaders = []string{"Anthropic-Beta", "Traceparent", "Tracestate"}

// Config configures one Anthropic upstream.
type Config struct {
	// Name is the operator's name for the provider; it defaults to "anthropic".
	Name string
	// BaseURL is the API root that /v1/messages is appended to, without /v1; it defaults to
	// DefaultBaseURL.
	BaseURL string
	// APIKey is sent as x-api-key; empty sends none (a 401 is then "credentials not
	// configured").
	APIKey string
	// RequireKey says the operator configured a credential: when APIKey is empty all the
	// same (the environment variable it named is unset) and no header carries one, every
	// call is refused at once with credentials_not_configured instead of reaching the
	// upstream.
	RequireKey bool
	// Version is sent as anthropic-version; it defaults to DefaultVersion.
	Version string
	// Headers are extra headers sent with every request, set before the version and the
	// API key, which override them (an Authorization header here serves proxies and OAuth).
	Headers map[string]string
	// Transport makes the requests; nil means http.DefaultTransport.
	Transport http.RoundTripper
	// Timeout bounds one attempt from the request to the end of the response body, streams
	// included; zero means no limit.
	Timeout time.Duration
	// StreamIdleTimeout is the longest silence allowed on a stream before it fails with a
	// timeout; zero means DefaultStreamIdleTimeout, a negative value disables the check.
	StreamIdleTimeout time.Duration
	// DefaultMaxTokens is the max_tokens sent when a neutral request has none (the API
	// requires it); zero means DefaultMaxTokens (4096).
	DefaultMaxTokens int64
	// BatchAPI says whether the upstream has Message Batches (/v1/messages/batches), on
	// which the gateway runs batches natively (providers.BatchRunner). Nil means true for
	// api.anthropic.com and false elsewhere: servers that speak Messages mostly lack them,
	// and the gateway runs their batches itself.
	BatchAPI *bool
}

// Provider calls one Anthropic upstream. It is safe for concurrent use.
type Provider struct {
	name      string
	url       string
	up        *upstreamhttp.Client
	idle      time.Duration
	maxTokens int64
	batchAPI  bool // the upstream runs Message Batches (Config.BatchAPI)
}

// adapter is what upstreamhttp sets an Anthropic upstream up with.
var adapter = upstreamhttp.Adapter{
	Name: "anthropic", BaseURL: DefaultBaseURL, StreamIdleTimeout: DefaultStreamIdleTimeout,
	KeyHeader: "X-Api-Key", Forwarded: forwardedHeaders, ParseError: ParseError,
}

// New checks cfg and returns its Provider.
func New(cfg Config) (*Provider, error) {
	up, err := upstreamhttp.Config{
		Name: cfg.Name, BaseURL: cfg.BaseURL, APIKey: cfg.APIKey, RequireKey: cfg.RequireKey, Headers: cfg.Headers,
		Transport: cfg.Transport, Timeout: cfg.Timeout, StreamIdleTimeout: cfg.StreamIdleTimeout,
	}.NewUpstream(adapter)
	if err != nil {
		return nil, err
	}
	name := up.Client.Provider
	if cfg.Version == "" {
		cfg.Version = DefaultVersion
	}
	if strings.ContainsAny(cfg.Version, "\r\n") || strings.ContainsAny(cfg.APIKey, "\r\n") {
		return nil, fmt.Errorf("anthropic provider %s: version and API key must be single-line", name)
	}
	if cfg.DefaultMaxTokens < 0 {
		return nil, fmt.Errorf("anthropic provider %s: default max tokens must not be negative", name)
	}
	if cfg.DefaultMaxTokens == 0 {
		cfg.DefaultMaxTokens = DefaultMaxTokens
	}
	up.Client.Header.Set("Anthropic-Version", cfg.Version)
	batchAPI := up.URL.Hostname() == "api.anthropic.com"
	if cfg.BatchAPI != nil {
		batchAPI = *cfg.BatchAPI
	}
	return &Provider{
		name:      name,
		url:       up.Base + "/v1/messages",
		up:        up.Client,
		idle:      up.StreamIdleTimeout,
		maxTokens: cfg.DefaultMaxTokens,
		batchAPI:  batchAPI,
	}, nil
}

// Name is the operator's name for the provider.
func (p *Provider) Name() string { return p.name }

// CredentialMissing tells whether the api_key configured resolved empty, with no header
// carrying one instead: every call is refused without reaching the upstream.
func (p *Provider) CredentialMissing() bool { return p.up.NoCredential }

// Formats lists the wire formats Forward accepts: Anthropic Messages. The slice is shared by
// every call (routing asks on every request): callers only read it.
func (p *Provider) Formats() []providers.WireFormat { return formats }

var formats = []providers.WireFormat{providers.FormatAnthropic}

// Unsupported is the package's Unsupported with the provider's default max_tokens.
func (p *Provider) Unsupported(req *providers.Request) []string {
	return planRequest(req, p.maxTokens).unsupported
}

// Forward posts a Messages body as it is, with the client's anthropic-beta and tracing
// headers. The body of a streamed answer fails with an *UpstreamError when it stays silent
// longer than the idle timeout; a read error of the body is an *UpstreamError too, except
// the caller's own cancellation.
func (p *Provider) Forward(ctx context.Context, req *providers.RawRequest) (*providers.RawResponse, error) {
	if req.Format != providers.FormatAnthropic {
		return nil, fmt.Errorf("provider %s: cannot forward format %q", p.name, req.Format)
	}
	resp, at, err := p.up.Send(ctx, p.url, req.Body, req.Stream, req.Header)
	if err != nil {
		return nil, err
	}
	return p.up.RawResponse(ctx, at, resp, req.Stream, p.idle), nil
}

// Chat sends the neutral request and waits for the whole answer.
func (p *Provider) Chat(ctx context.Context, req *providers.Request) (*providers.Response, error) {
	r := *req
	r.Stream = false
	body, err := encodeRequest(&r, p.maxTokens)
	if err != nil {
		return nil, fmt.Errorf("provider %s: encoding request: %w", p.name, err)
	}
	ans, err := p.up.CallAnswer(ctx, p.url, body)
	if err != nil {
		return nil, err
	}
	out, err := DecodeResponse(ans.Body)
	if err != nil {
		return nil, p.malformed(ans.Status, ans.Body, err) // the error may quote the body: not released
	}
	ans.Release() // out holds copies of what it read
	return out, nil
}

// ChatStream sends the neutral request with stream set and returns the answer's events as
// they arrive: reasoning, text and tool call pieces (Index is the call's ordinal among the
// message's tool calls), one EventFinish, and EventUsage after message_start (input and
// cache counts) and after message_delta (the merged final counts). A server that ignores
// stream and answers with one JSON body is read whole and its answer replayed as events.
func (p *Provider) ChatStream(ctx context.Context, req *providers.Request) (providers.Stream, error) {
	r := *req
	r.Stream = true
	body, err := encodeRequest(&r, p.maxTokens)
	if err != nil {
		return nil, fmt.Errorf("provider %s: encoding request: %w", p.name, err)
	}
	resp, at, err := p.up.Send(ctx, p.url, body, true, nil)
	if err != nil {
		return nil, err
	}
	if upstreamhttp.IsJSON(resp.Header) {
		b, err := p.up.ReadBody(ctx, at, resp)
		if err != nil {
			return nil, err
		}
		out, err := DecodeResponse(b)
		if err != nil {
			return nil, p.malformed(resp.StatusCode, b, err)
		}
		return upstreamhttp.NewEventStream(responseEvents(out)), nil
	}
	return newMessagesStream(ctx, p.name, at, upstreamhttp.NewIdleBody(resp.Body, p.idle, p.name)), nil
}

// malformed classifies a 2xx body that is not a message: an error object sent with 200 by
// some compatible servers, or garbage.
func (p *Provider) malformed(status int, body []byte, err error) *providers.UpstreamError {
	var probe struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(body, &probe) == nil && probe.Type == "error" {
		return streamError(p.name, p.up.Redact(body))
	}
	return p.up.Malformed(status, body, err)
}

// Interface guards.
var (
	_ providers.Provider          = (*Provider)(nil)
	_ providers.Forwarder         = (*Provider)(nil)
	_ providers.ChatProvider      = (*Provider)(nil)
	_ providers.CredentialChecker = (*Provider)(nil)
)
