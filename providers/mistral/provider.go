// Package mistral is the adapter for Mistral's API (https://api.mistral.ai/v1).
//
// Chat completions and embeddings speak OpenAI's wire: the Provider embeds the openai
// adapter, built for Mistral's base URL, which serves them (ChatProvider, and Forward of
// FormatOpenAIChat and FormatOpenAIEmbeddings). Mistral's other endpoints are forwarded by
// this package:
//
//   - OCR, FormatMistralOCR: POST {base}/ocr with Mistral's own JSON body, whose answer
//     is handed back as it is.
//   - Voxtral transcription, FormatOpenAITranscriptions: POST {base}/audio/transcriptions
//     with the client's multipart body streamed as it is (Mistral reads OpenAI's fields:
//     model, file, language, temperature, timestamp_granularities[], stream). The answer is
//     normalised to OpenAI's transcription wire: the usage of a complete answer becomes
//     OpenAI's union ({"type":"duration","seconds"} or {"type":"tokens",...}), and a stream
//     of Mistral's transcription.* events becomes OpenAI's transcript.text.* events, event
//     by event as they arrive (see transcription.go).
//
// Formats lists only what Mistral serves: not speech, translations, images nor
// moderations, whose Mistral API (where there is one) has another shape.
package mistral

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
	"github.com/modelgateway/caddy-modelgateway/providers/openai"
)

// DefaultBaseURL is Mistral's API.
const DefaultBaseURL = "https://api.mistral.ai/v1"

// forwardedHeaders are the client headers passed on to the OCR and transcription endpoints
// (canonical keys): tracing only, never credentials.
var forwardedHeaders = []string{"X-Client-Request-Id", "Traceparent", "Tracestate"}

// Config configures one Mistral upstream; its fields are those of every HTTP adapter
// (upstreamhttp.Config). Name defaults to "mistral", BaseURL (the API root, with its
// version) to DefaultBaseURL, StreamIdleTimeout to openai.DefaultStreamIdleTimeout. APIKey
// is sent as "Authorization: Bearer <APIKey>".
type Config upstreamhttp.Config

// openaiProvider names the embedded adapter without exporting it as a field.
type openaiProvider = openai.Provider

// Provider calls Mistral's API. It is safe for concurrent use.
type Provider struct {
	// The openai adapter serves chat completions and embeddings: its Name, Chat and
	// ChatStream are the Provider's.
	*openaiProvider

	name string
	base string // the base URL without a trailing slash
	up   *upstreamhttp.Client
	idle time.Duration
}

// New checks cfg and returns its Provider.
func New(cfg Config) (*Provider, error) {
	up, err := upstreamhttp.Config(cfg).NewUpstream(upstreamhttp.Adapter{
		Name: "mistral", BaseURL: DefaultBaseURL, StreamIdleTimeout: openai.DefaultStreamIdleTimeout,
		KeyHeader: "Authorization", KeyPrefix: "Bearer ", Forwarded: forwardedHeaders,
		// Mistral's error bodies ({"object":"error","message","type","code"}, its validation
		// errors {"message":{"detail":[...]}}, {"detail":...}) are shapes the openai
		// adapter's parser reads.
		ParseError: openai.ParseError,
	})
	if err != nil {
		return nil, err
	}
	name := up.Client.Provider
	oa, err := openai.New(openai.Config{
		Name: name, BaseURL: up.Base, APIKey: cfg.APIKey, RequireKey: cfg.RequireKey,
		Headers: cfg.Headers, Transport: cfg.Transport, Timeout: cfg.Timeout, StreamIdleTimeout: cfg.StreamIdleTimeout,
		// Mistral refuses max_completion_tokens as an unknown field.
		MaxTokensField: "max_tokens", API: "chat",
	})
	if err != nil {
		return nil, fmt.Errorf("mistral provider %s: %w", name, err)
	}
	return &Provider{
		openaiProvider: oa,
		name:           name,
		base:           up.Base,
		up:             up.Client,
		idle:           up.StreamIdleTimeout,
	}, nil
}

// formats is what Mistral serves of the gateway's wire formats. The slice is shared by
// every call: callers only read it.
var formats = []providers.WireFormat{
	providers.FormatOpenAIChat, providers.FormatOpenAIEmbeddings,
	providers.FormatOpenAITranscriptions, providers.FormatMistralOCR,
}

// Formats lists the wire formats Forward accepts: chat completions, embeddings,
// transcriptions and OCR.
func (p *Provider) Formats() []providers.WireFormat { return formats }

// Forward posts a body of one of Formats as it is: chat completions and embeddings through
// the openai adapter, OCR to /ocr and transcriptions to /audio/transcriptions, a
// RawRequest.Reader (the multipart upload) streamed as it is read. A transcription's answer
// is rewritten to OpenAI's wire (see the package documentation); an OCR answer is
// Mistral's own. Errors are as for openai.Provider.Forward.
func (p *Provider) Forward(ctx context.Context, req *providers.RawRequest) (*providers.RawResponse, error) {
	switch req.Format {
	case providers.FormatOpenAIChat, providers.FormatOpenAIEmbeddings:
		return p.openaiProvider.Forward(ctx, req)
	case providers.FormatMistralOCR:
		resp, at, err := p.send(ctx, "/ocr", req)
		if err != nil {
			return nil, err
		}
		return p.up.RawResponse(ctx, at, resp, req.Stream, p.idle), nil
	case providers.FormatOpenAITranscriptions:
		resp, at, err := p.send(ctx, "/audio/transcriptions", req)
		if err != nil {
			return nil, err
		}
		return p.transcription(ctx, at, resp)
	}
	return nil, fmt.Errorf("provider %s: cannot forward format %q", p.name, req.Format)
}

// send posts req's body, or its Reader, to the endpoint at path under the base URL.
func (p *Provider) send(ctx context.Context, path string, req *providers.RawRequest) (*http.Response, *upstreamhttp.Attempt, error) {
	return p.up.SendRaw(ctx, p.base+path, req)
}

// transcription hands on a transcription answer in OpenAI's wire: an event stream
// translated as it is read, a JSON answer with its usage rewritten, anything else as it is.
func (p *Provider) transcription(ctx context.Context, at *upstreamhttp.Attempt, resp *http.Response) (*providers.RawResponse, error) {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch mt {
	case "text/event-stream":
		raw := p.up.RawResponse(ctx, at, resp, true, p.idle)
		raw.Header = raw.Header.Clone()
		raw.Header.Del("Content-Length")
		raw.Body, raw.ContentLength = newTranscriptStream(raw.Body, p.name, p.up.Redact), -1
		return raw, nil
	case "application/json":
		b, err := p.up.ReadBody(ctx, at, resp)
		if err != nil {
			return nil, err
		}
		out, err := normaliseTranscription(b)
		if err != nil {
			return nil, p.up.Malformed(resp.StatusCode, b, err)
		}
		h := resp.Header.Clone()
		h.Del("Content-Length")
		return &providers.RawResponse{
			Status: resp.StatusCode, Header: h,
			Body: io.NopCloser(bytes.NewReader(out)), ContentLength: int64(len(out)),
		}, nil
	}
	return p.up.RawResponse(ctx, at, resp, true, p.idle), nil
}

// Interface guards.
var (
	_ providers.Provider          = (*Provider)(nil)
	_ providers.Forwarder         = (*Provider)(nil)
	_ providers.ChatProvider      = (*Provider)(nil)
	_ providers.CredentialChecker = (*Provider)(nil)
)
