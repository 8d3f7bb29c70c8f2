// Package openai is the adapter for OpenAI's chat completions API and every server that
// speaks it (vLLM, Ollama, Groq, Together, DeepSeek, Mistral...). It also owns the chat
// completions wire format: the converters between it and the neutral model (DecodeChatRequest,
// EncodeChatResponse, ChunkEncoder...) that the gateway's chat surface uses in the other
// direction, so that each format is translated in one package only.
//
// The chat completions stream skips a malformed frame (data that is not JSON, or JSON of the
// wrong shape) instead of failing, and counts it: the stream has a SkippedFrames() int
// method, which the gateway reads through the optional interface
// interface{ SkippedFrames() int }. Error frames still end it with an error. A body that
// ends cleanly without [DONE] ends the stream cleanly, with a finish and the last usage
// known; a body that breaks off (transport error, idle timeout) is an error.
package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
)

// DefaultBaseURL is OpenAI's API.
const DefaultBaseURL = "https://api.openai.com/v1"

// DefaultStreamIdleTimeout is the longest silence allowed on a stream by default.
const DefaultStreamIdleTimeout = 30 * time.Second

// forwardedHeaders are the client headers Forward passes on (canonical keys): the beta
// feature flag and tracing.
// Anything else, and credentials above all (Authorization, api-key, x-api-key, cookies,
// OpenAI-Organization, OpenAI-Project), stays at the gateway.
var forwardedHeaders = []string{"Openai-Beta", "X-Client-Request-Id", "Traceparent", "Tracestate"}

// Config configures one OpenAI or OpenAI-compatible upstream.
type Config struct {
	// Name is the operator's name for the provider; it defaults to "openai".
	Name string
	// BaseURL is the API root that /chat/completions is appended to, with its version
	// (http://localhost:11434/v1 for Ollama); it defaults to DefaultBaseURL.
	BaseURL string
	// APIKey is sent as "Authorization: Bearer <APIKey>"; empty sends no Authorization,
	// for local servers.
	APIKey string
	// RequireKey says the operator configured a credential: when APIKey is empty all the
	// same (the environment variable it named is unset) and no header carries one, every
	// call is refused at once with credentials_not_configured instead of reaching the
	// upstream.
	RequireKey bool
	// Organization and Project are sent as OpenAI-Organization and OpenAI-Project when set.
	Organization string
	Project      string
	// Headers are extra headers sent with every request (set before the credentials).
	Headers map[string]string
	// Transport makes the requests; nil means http.DefaultTransport.
	Transport http.RoundTripper
	// Timeout bounds one attempt from the request to the end of the response body, streams
	// included; zero means no limit.
	Timeout time.Duration
	// StreamIdleTimeout is the longest silence allowed on a stream before it fails with a
	// timeout; zero means DefaultStreamIdleTimeout, a negative value disables the check.
	StreamIdleTimeout time.Duration
	// MaxTokensField is the request field that carries the output limit: "max_tokens" or
	// "max_completion_tokens". It defaults to max_completion_tokens for api.openai.com,
	// whose reasoning models reject max_tokens, and to max_tokens elsewhere, the field every
	// compatible server reads.
	MaxTokensField string
	// API is the endpoint Chat and ChatStream use: "chat" (/chat/completions) or
	// "responses" (/responses, for models served only there); it defaults to "chat".
	// Forward takes both formats whatever it is.
	API string
	// BatchAPI says whether the upstream has OpenAI's Batch API (/files and /batches), on
	// which the gateway runs batches natively (providers.BatchRunner). Nil means true for
	// api.openai.com and false elsewhere: compatible servers mostly lack it, and the gateway
	// runs their batches itself.
	BatchAPI *bool
}

// Provider calls one OpenAI-compatible upstream. It is safe for concurrent use.
type Provider struct {
	name          string
	url           string
	up            *upstreamhttp.Client
	idle          time.Duration
	maxCompletion bool
	responsesURL  string
	responses     bool // Chat and ChatStream use /responses
	batchAPI      bool // the upstream runs batches (Config.BatchAPI)
	// base is the base URL without a trailing slash, under which the other endpoints are.
	base string
}

// New checks cfg and returns its Provider.
func New(cfg Config) (*Provider, error) {
	up, err := upstreamhttp.Config{
		Name: cfg.Name, BaseURL: cfg.BaseURL, APIKey: cfg.APIKey, RequireKey: cfg.RequireKey, Headers: cfg.Headers,
		Transport: cfg.Transport, Timeout: cfg.Timeout, StreamIdleTimeout: cfg.StreamIdleTimeout,
	}.NewUpstream(upstreamhttp.Adapter{
		Name: "openai", BaseURL: DefaultBaseURL, StreamIdleTimeout: DefaultStreamIdleTimeout,
		KeyHeader: "Authorization", KeyPrefix: "Bearer ", Forwarded: forwardedHeaders,
		ParseError: ParseError,
	})
	if err != nil {
		return nil, err
	}
	name := up.Client.Provider
	maxCompletion := up.URL.Hostname() == "api.openai.com"
	switch cfg.MaxTokensField {
	case "":
	case "max_tokens":
		maxCompletion = false
	case "max_completion_tokens":
		maxCompletion = true
	default:
		return nil, fmt.Errorf("openai provider %s: max tokens field must be max_tokens or max_completion_tokens", name)
	}
	if cfg.API != "" && cfg.API != "chat" && cfg.API != "responses" {
		return nil, fmt.Errorf("openai provider %s: api must be chat or responses", name)
	}
	batchAPI := up.URL.Hostname() == "api.openai.com"
	if cfg.BatchAPI != nil {
		batchAPI = *cfg.BatchAPI
	}
	if cfg.Organization != "" {
		up.Client.Header.Set("OpenAI-Organization", cfg.Organization)
	}
	if cfg.Project != "" {
		up.Client.Header.Set("OpenAI-Project", cfg.Project)
	}
	return &Provider{
		name:          name,
		url:           up.Base + "/chat/completions",
		up:            up.Client,
		idle:          up.StreamIdleTimeout,
		maxCompletion: maxCompletion,
		responsesURL:  up.Base + "/responses",
		base:          up.Base,
		responses:     cfg.API == "responses",
		batchAPI:      batchAPI,
	}, nil
}

// Name is the operator's name for the provider.
func (p *Provider) Name() string { return p.name }

// CredentialMissing tells whether the api_key configured resolved empty, with no header
// carrying one instead: every call is refused without reaching the upstream.
func (p *Provider) CredentialMissing() bool { return p.up.NoCredential }

// Formats lists the wire formats Forward accepts: chat completions or responses, embeddings
// and moderations.
//
// An upstream speaks the one text API its Config.API names: compatible servers (vLLM,
// Ollama...) have no /responses, and some models exist only there. Text requests in the
// other format are translated through ChatProvider.
//
// The slice is shared by every call (routing asks on every request): callers only read it.
func (p *Provider) Formats() []providers.WireFormat {
	if p.responses {
		return responsesFormats
	}
	return chatFormats
}

var (
	chatFormats      = append([]providers.WireFormat{providers.FormatOpenAIChat}, mediaFormats...)
	responsesFormats = append([]providers.WireFormat{providers.FormatOpenAIResponses}, mediaFormats...)
	mediaFormats     = []providers.WireFormat{
		providers.FormatOpenAIEmbeddings, providers.FormatOpenAIModerations, providers.FormatOpenAISpeech,
		providers.FormatOpenAITranscriptions, providers.FormatOpenAITranslations, providers.FormatOpenAIImages, providers.FormatOpenAIImageEdits,
	}
	// mediaPaths are the endpoints of the formats forwarded as they are, under the base URL.
	mediaPaths = map[providers.WireFormat]string{
		providers.FormatOpenAIEmbeddings: "/embeddings", providers.FormatOpenAIModerations: "/moderations",
		providers.FormatOpenAISpeech: "/audio/speech", providers.FormatOpenAITranscriptions: "/audio/transcriptions",
		providers.FormatOpenAITranslations: "/audio/translations", providers.FormatOpenAIImages: "/images/generations",
		providers.FormatOpenAIImageEdits: "/images/edits",
	}
)

// Forward posts a body of one of Formats to its endpoint (/chat/completions, /responses,
// /embeddings, /audio/speech...) as it is; a RawRequest.Reader (a multipart upload) is
// streamed as it is read. The body of a streamed answer, and of an answer that is not JSON
// (audio), fails with an *UpstreamError when it stays silent longer than the idle timeout;
// a read error of the body is an *UpstreamError too, except the caller's own cancellation.
func (p *Provider) Forward(ctx context.Context, req *providers.RawRequest) (*providers.RawResponse, error) {
	var u string
	switch req.Format {
	case providers.FormatOpenAIChat:
		u = p.url
	case providers.FormatOpenAIResponses:
		u = p.responsesURL
	default:
		path, ok := mediaPaths[req.Format]
		if !ok {
			return nil, fmt.Errorf("provider %s: cannot forward format %q", p.name, req.Format)
		}
		u = p.base + path
	}
	resp, at, err := p.up.SendRaw(ctx, u, req)
	if err != nil {
		return nil, err
	}
	// Audio arrives over time like a stream: the idle timeout applies to it too.
	return p.up.RawResponse(ctx, at, resp, req.Stream || req.Accept != "", p.idle), nil
}

// Chat sends the neutral request and waits for the whole answer.
func (p *Provider) Chat(ctx context.Context, req *providers.Request) (*providers.Response, error) {
	if p.responses {
		return p.responsesChat(ctx, req)
	}
	r := *req
	r.Stream = false
	body, err := encodeChatRequest(&r, p.maxCompletion)
	if err != nil {
		return nil, fmt.Errorf("provider %s: encoding request: %w", p.name, err)
	}
	ans, err := p.up.CallAnswer(ctx, p.url, body)
	if err != nil {
		return nil, err
	}
	out, err := DecodeChatResponse(ans.Body)
	if err != nil {
		return nil, p.malformed(ans.Status, ans.Body, err) // the error may quote the body: not released
	}
	ans.Release() // out holds copies of what it read
	return out, nil
}

// ChatStream sends the neutral request with stream set and returns the answer's events as
// they arrive. A server that ignores stream and answers with one JSON body is read whole
// and its answer replayed as events.
func (p *Provider) ChatStream(ctx context.Context, req *providers.Request) (providers.Stream, error) {
	if p.responses {
		return p.responsesChatStream(ctx, req)
	}
	r := *req
	r.Stream = true
	body, err := encodeChatRequest(&r, p.maxCompletion)
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
		out, err := DecodeChatResponse(b)
		if err != nil {
			return nil, p.malformed(resp.StatusCode, b, err)
		}
		return upstreamhttp.NewEventStream(responseEvents(out)), nil
	}
	return newChatStream(ctx, p.name, at, upstreamhttp.NewIdleBody(resp.Body, p.idle, p.name)), nil
}

// malformed classifies a 2xx body that is not a chat completion: an error object some
// compatible servers send with 200, or garbage.
func (p *Provider) malformed(status int, body []byte, err error) *providers.UpstreamError {
	var probe struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &probe) == nil && !isFalsy(probe.Error) {
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
