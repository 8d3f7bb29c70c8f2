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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// DefaultBaseURL is Anthropic's API.
const DefaultBaseURL = "https://api.anthropic.com"

// DefaultVersion is the anthropic-version header sent by default, the one the SDKs send.
const DefaultVersion = "2023-06-01"

// DefaultStreamIdleTimeout is the longest silence allowed on a stream by default. The API
// sends ping events during long pauses, well within it.
const DefaultStreamIdleTimeout = 30 * time.Second

// maxResponseBody bounds a non-streamed answer.
const maxResponseBody = 32 << 20

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
}

// Provider calls one Anthropic upstream. It is safe for concurrent use.
type Provider struct {
	name      string
	url       string
	key       string
	keySet    bool // a credential is sent: from APIKey, or an operator's header
	header    http.Header
	client    *http.Client
	timeout   time.Duration
	idle      time.Duration
	maxTokens int64
}

// New checks cfg and returns its Provider.
func New(cfg Config) (*Provider, error) {
	if cfg.Name == "" {
		cfg.Name = "anthropic"
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	u, err := url.Parse(cfg.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("anthropic provider %s: parsing base URL: %w", cfg.Name, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("anthropic provider %s: base URL must be an absolute http or https URL", cfg.Name)
	}
	if cfg.Version == "" {
		cfg.Version = DefaultVersion
	}
	if strings.ContainsAny(cfg.Version, "\r\n") || strings.ContainsAny(cfg.APIKey, "\r\n") {
		return nil, fmt.Errorf("anthropic provider %s: version and API key must be single-line", cfg.Name)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("anthropic provider %s: timeout must not be negative", cfg.Name)
	}
	if cfg.DefaultMaxTokens < 0 {
		return nil, fmt.Errorf("anthropic provider %s: default max tokens must not be negative", cfg.Name)
	}
	if cfg.DefaultMaxTokens == 0 {
		cfg.DefaultMaxTokens = DefaultMaxTokens
	}
	idle := cfg.StreamIdleTimeout
	if idle == 0 {
		idle = DefaultStreamIdleTimeout
	}
	transport := cfg.Transport
	if transport == nil {
		transport = http.DefaultTransport
	}
	header := make(http.Header, len(cfg.Headers)+3)
	for k, v := range cfg.Headers {
		header.Set(k, v)
	}
	header.Set("Content-Type", "application/json")
	header.Set("Anthropic-Version", cfg.Version)
	if cfg.APIKey != "" {
		header.Set("X-Api-Key", cfg.APIKey)
	}
	return &Provider{
		name:   cfg.Name,
		url:    strings.TrimRight(cfg.BaseURL, "/") + "/v1/messages",
		key:    cfg.APIKey,
		keySet: header.Get("X-Api-Key") != "" || header.Get("Authorization") != "",
		header: header,
		client: &http.Client{
			Transport: transport,
			// An API has no business redirecting a POST; following it could carry the key
			// elsewhere. The 3xx comes back as an error instead.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		timeout:   cfg.Timeout,
		idle:      idle,
		maxTokens: cfg.DefaultMaxTokens,
	}, nil
}

// Name is the operator's name for the provider.
func (p *Provider) Name() string { return p.name }

// Formats lists the wire formats Forward accepts: Anthropic Messages.
func (p *Provider) Formats() []providers.WireFormat {
	return []providers.WireFormat{providers.FormatAnthropic}
}

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
	resp, at, err := p.send(ctx, req.Body, req.Stream, req.Header)
	if err != nil {
		return nil, err
	}
	body := io.ReadCloser(resp.Body)
	if req.Stream {
		body = newIdleBody(body, p.idle, p.name)
	}
	return &providers.RawResponse{
		Status: resp.StatusCode,
		Header: resp.Header,
		Body:   &attemptBody{rc: body, provider: p.name, ctx: ctx, at: at},
	}, nil
}

// Chat sends the neutral request and waits for the whole answer.
func (p *Provider) Chat(ctx context.Context, req *providers.Request) (*providers.Response, error) {
	r := *req
	r.Stream = false
	body, err := encodeRequest(&r, p.maxTokens)
	if err != nil {
		return nil, fmt.Errorf("provider %s: encoding request: %w", p.name, err)
	}
	resp, at, err := p.send(ctx, body, false, nil)
	if err != nil {
		return nil, err
	}
	defer at.cancel()
	b, err := p.readBody(ctx, at, resp)
	if err != nil {
		return nil, err
	}
	out, err := DecodeResponse(b)
	if err != nil {
		return nil, p.malformed(resp.StatusCode, b, err)
	}
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
	resp, at, err := p.send(ctx, body, true, nil)
	if err != nil {
		return nil, err
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/json" {
		defer at.cancel()
		b, err := p.readBody(ctx, at, resp)
		if err != nil {
			return nil, err
		}
		out, err := DecodeResponse(b)
		if err != nil {
			return nil, p.malformed(resp.StatusCode, b, err)
		}
		return &eventStream{events: responseEvents(out)}, nil
	}
	return newMessagesStream(ctx, p.name, at, newIdleBody(resp.Body, p.idle, p.name)), nil
}

// attempt is one upstream call's context, bounded by Config.Timeout.
type attempt struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// send posts body and returns a 2xx response, or the failure classified.
func (p *Provider) send(ctx context.Context, body []byte, stream bool, in http.Header) (*http.Response, *attempt, error) {
	at := &attempt{ctx: ctx, cancel: func() {}}
	if p.timeout > 0 {
		at.ctx, at.cancel = context.WithTimeoutCause(ctx, p.timeout, ErrAttemptTimeout)
	}
	req, err := http.NewRequestWithContext(at.ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		at.cancel()
		return nil, nil, fmt.Errorf("provider %s: building request: %w", p.name, err)
	}
	for _, k := range forwardedHeaders {
		if v := in.Values(k); len(v) > 0 {
			req.Header[k] = v
		}
	}
	for k, v := range p.header {
		req.Header[k] = v
	}
	if stream {
		req.Header.Set("Accept", "text/event-stream")
	} else {
		req.Header.Set("Accept", "application/json")
	}
	resp, err := p.client.Do(req)
	if err != nil {
		at.cancel()
		return nil, nil, transportError(p.name, ctx, at.ctx, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return resp, at, nil
	}
	// A partial body still classifies, so a read error here is not worth reporting.
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_ = resp.Body.Close()
	at.cancel()
	if ctx.Err() != nil {
		return nil, nil, transportError(p.name, ctx, at.ctx, ctx.Err())
	}
	return nil, nil, ParseError(p.name, resp.StatusCode, resp.Header, p.redact(b), p.keySet)
}

// readBody reads a whole non-streamed answer.
func (p *Provider) readBody(ctx context.Context, at *attempt, resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody+1))
	if err != nil {
		return nil, transportError(p.name, ctx, at.ctx, err)
	}
	if len(b) > maxResponseBody {
		return nil, &providers.UpstreamError{
			Provider: p.name, Status: resp.StatusCode, Category: providers.CategoryServerError,
			Message: fmt.Sprintf("response larger than %d bytes", maxResponseBody),
		}
	}
	return b, nil
}

// malformed classifies a 2xx body that is not a message: an error object sent with 200 by
// some compatible servers, or garbage.
func (p *Provider) malformed(status int, body []byte, err error) *providers.UpstreamError {
	var probe struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(body, &probe) == nil && probe.Type == "error" {
		return streamError(p.name, p.redact(body))
	}
	return &providers.UpstreamError{
		Provider:  p.name,
		Status:    status,
		Category:  providers.CategoryServerError,
		Retryable: true,
		Message:   ErrMalformedResponse.Error(),
		Payload:   providers.Preview(p.redact(body)),
		Err:       fmt.Errorf("%w: %w", ErrMalformedResponse, err),
	}
}

// redact removes the adapter's key from an upstream body before it is kept anywhere.
func (p *Provider) redact(b []byte) []byte {
	if p.key == "" || !bytes.Contains(b, []byte(p.key)) {
		return b
	}
	return bytes.ReplaceAll(b, []byte(p.key), []byte("[redacted]"))
}

// attemptBody is a forwarded body: read errors are classified like transport errors, and
// closing it ends the attempt.
type attemptBody struct {
	rc       io.ReadCloser
	provider string
	ctx      context.Context
	at       *attempt
}

func (b *attemptBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = transportError(b.provider, b.ctx, b.at.ctx, err)
	}
	return n, err
}

func (b *attemptBody) Close() error {
	err := b.rc.Close()
	b.at.cancel()
	return err
}

// Interface guards.
var (
	_ providers.Provider     = (*Provider)(nil)
	_ providers.Forwarder    = (*Provider)(nil)
	_ providers.ChatProvider = (*Provider)(nil)
)
