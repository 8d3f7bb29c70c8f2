// Package gemini is the adapter for Google's Gemini Developer API (v1beta
// generateContent and streamGenerateContent). Gemini is an upstream only: the package
// turns the neutral model into generateContent bodies and Gemini's answers, whole or
// streamed, back into neutral responses and events. It implements providers.Provider,
// providers.ChatProvider and providers.Embedder, and the media capabilities
// providers.SpeechSynthesizer (speech.go: streamGenerateContent with AUDIO, PCM decoded as it
// streams, wav or pcm only) and providers.ImageGenerator (images.go: Imagen's :predict, or
// generateContent with IMAGE for Gemini's image models); their policies are on Synthesize
// and GenerateImages.
//
// Policies, where the formats do not meet one to one (translation map §3, §4):
//
//   - Auth is the x-goog-api-key header, never the ?key= query parameter, because URLs end
//     up in error messages and logs. The key is redacted from every upstream body kept.
//   - System text goes to systemInstruction. Roles become user and model; consecutive
//     turns of one role are merged, since Gemini wants them to alternate. Empty and
//     whitespace-only text parts, and turns left empty, are dropped.
//   - Images: inline data goes as inlineData; an https (or gs://) URL goes as fileData
//     with the media type given or guessed from the extension, and Gemini fetches it. A
//     plain http URL is refused before any call, with an *UpstreamError of category
//     invalid_request (Status 0) wrapping ErrUnsupportedRequest, on which the gateway
//     tries a provider that takes it: Gemini only fetches https and signed URLs, and
//     the adapter does not download anything on a client's behalf.
//   - Tool results become functionResponse parts in one user turn, in the order of the
//     calls they answer, named after the function (recovered from the assistant turn with
//     the call's id, never the id itself). A JSON-object result is the response as is,
//     anything else is {"output": text}; images of results follow in the same turn. A call
//     the history never answered gets {"error":"tool call was not executed"}.
//   - Call arguments that are not a JSON object are sent as {"_raw": "<string>"}.
//   - Tool schemas (and the JSON-mode response schema) are rewritten into Gemini's
//     OpenAPI subset: see schema.go. Tool names Gemini would reject are rewritten and
//     restored in the answer.
//   - tool_choice auto, none, required and a tool name become AUTO, NONE, ANY and ANY with
//     allowedFunctionNames. parallel_tool_calls=false and user have no Gemini field:
//     Unsupported lists them, and more than five stop sequences, for the gateway's meta.
//   - Thinking: ThinkingBudget (it wins) or ReasoningEffort (minimal 512, low 1024, medium
//     8192, high 24576 tokens, none 0) become thinkingConfig, with includeThoughts.
//   - Thought signatures: thought parts of an answer become Reasoning (events
//     EventReasoning); the answer's signature is that of its first function call, else the
//     last one seen (Response.ReasoningSignature; the last signature event of a stream),
//     tagged with its origin (providers.Tag, providers.SigGemini). In history, the
//     signature of an assistant turn's parts (untagged, or Gemini's own, sent raw; one
//     tagged by another provider is dropped) goes back on its first
//     function call, or its last text part; reasoning text itself is not sent back. A
//     function call of the current turn with no Gemini signature (history from another provider
//     or from chat completions) gets the placeholder Gemini accepts for calls it did not
//     make, since Gemini 3 rejects it otherwise.
//   - Function calls Gemini sends without an id get "call_gemini_<12 random base62>_<n>",
//     n the call's position in the answer: stable for the answer, unique across the
//     conversation. Such ids are not sent back to Gemini; real ones are, on the call and
//     on its response.
//   - Finish reasons: STOP (and OTHER, unspecified, unknown) is tool_calls when the answer
//     called a function, stop otherwise; MAX_TOKENS is length; SAFETY, RECITATION,
//     BLOCKLIST, PROHIBITED_CONTENT, SPII, LANGUAGE and the image ones are content_filter.
//     A blocked prompt (promptFeedback.blockReason, no candidates) is an empty answer with
//     content_filter, a terminal result and not an error. MALFORMED_FUNCTION_CALL,
//     UNEXPECTED_TOOL_CALL and TOO_MANY_TOOL_CALLS are a retryable *UpstreamError
//     (ErrUnusableAnswer), since the call cannot be used.
//   - Usage: input is promptTokenCount − cachedContentTokenCount + toolUsePromptTokenCount,
//     cache read the cached count, output candidatesTokenCount, reasoning
//     thoughtsTokenCount. In a stream the last usageMetadata wins and is sent once, at the
//     end, after the finish.
//   - Streams: a malformed frame (data that is not JSON, or JSON of the wrong shape) is
//     skipped instead of failing, and counted: the stream has a SkippedFrames() int method,
//     which the gateway reads through the optional interface
//     interface{ SkippedFrames() int }. Error frames still end it with an error. A body that
//     ends cleanly without a finish reason ends the stream cleanly, with a finish (stop, or
//     tool_calls after function calls) and the last usage known, zero when none came; a
//     body that breaks off (transport error, idle timeout) is an error.
package gemini

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
)

// DefaultBaseURL is the Gemini Developer API.
const DefaultBaseURL = "https://generativelanguage.googleapis.com/v1beta"

// DefaultStreamIdleTimeout is the longest wait for a stream event by default.
const DefaultStreamIdleTimeout = 30 * time.Second

// Config configures one Gemini upstream; its fields are those of every HTTP adapter
// (upstreamhttp.Config). Name defaults to "gemini", BaseURL (the API root, with its
// version, that /models/{model}:generateContent is appended to) to DefaultBaseURL. APIKey
// is sent as the x-goog-api-key header; credentials set through Headers (x-goog-api-key
// or Authorization: a proxy's, an OAuth token) count as a key and are redacted too.
type Config upstreamhttp.Config

// Provider calls one Gemini upstream. It is safe for concurrent use.
type Provider struct {
	name string
	base string
	up   *upstreamhttp.Client
	idle time.Duration
}

// adapter is what upstreamhttp sets a Gemini upstream up with.
var adapter = upstreamhttp.Adapter{
	Name: "gemini", BaseURL: DefaultBaseURL, StreamIdleTimeout: DefaultStreamIdleTimeout,
	KeyHeader: "X-Goog-Api-Key", RefuseQuery: true, RedactHeaderKeys: true, ParseError: ParseError,
}

// New checks cfg and returns its Provider.
func New(cfg Config) (*Provider, error) {
	up, err := upstreamhttp.Config(cfg).NewUpstream(adapter)
	if err != nil {
		return nil, err
	}
	return &Provider{name: up.Client.Provider, base: up.Base, up: up.Client, idle: up.StreamIdleTimeout}, nil
}

// Name is the operator's name for the provider.
func (p *Provider) Name() string { return p.name }

// CredentialMissing tells whether the api_key configured resolved empty, with no header
// carrying one instead: every call is refused without reaching the upstream.
func (p *Provider) CredentialMissing() bool { return p.up.NoCredential }

// Unsupported lists the parameters of req this provider drops; see the package function.
// As a method it lets the gateway ask any adapter through a small interface.
func (p *Provider) Unsupported(req *providers.Request) []string { return Unsupported(req) }

// Chat sends the neutral request to generateContent and waits for the whole answer.
func (p *Provider) Chat(ctx context.Context, req *providers.Request) (*providers.Response, error) {
	target, body, names, err := p.prepare(req, false)
	if err != nil {
		return nil, err
	}
	ans, err := p.up.CallAnswer(ctx, target, body)
	if err != nil {
		return nil, err
	}
	// The errors below may quote the body, which is then not released.
	var r GenerateContentResponse
	if err := json.Unmarshal(ans.Body, &r); err != nil {
		return nil, p.up.Malformed(ans.Status, ans.Body, err)
	}
	if !isFalsy(r.Error) {
		return nil, streamError(p.name, p.up.Redact(ans.Body))
	}
	out, fail, err := responseFrom(&r, names)
	if err != nil {
		return nil, p.up.Malformed(ans.Status, ans.Body, err)
	}
	ans.Release() // out holds copies of what it read
	if fail != nil {
		return nil, finishFailure(p.name, fail.FinishReason, fail.FinishMessage)
	}
	return out, nil
}

// ChatStream sends the neutral request to streamGenerateContent?alt=sse and returns the
// answer's events as they arrive. A server that answers with one JSON body instead (an
// object, or the array streamGenerateContent sends without alt=sse) is read whole and its
// answer replayed as events.
func (p *Provider) ChatStream(ctx context.Context, req *providers.Request) (providers.Stream, error) {
	target, body, names, err := p.prepare(req, true)
	if err != nil {
		return nil, err
	}
	resp, at, err := p.up.Send(ctx, target, body, true, nil)
	if err != nil {
		return nil, err
	}
	if upstreamhttp.IsJSON(resp.Header) {
		b, err := p.up.ReadBody(ctx, at, resp)
		if err != nil {
			return nil, err
		}
		frames, err := splitFrames(b)
		if err != nil {
			return nil, p.up.Malformed(resp.StatusCode, b, err)
		}
		return newReplayStream(ctx, p.name, frames, names, p.up.Redact), nil
	}
	return newStream(ctx, p.name, at, resp.Body, p.idle, names, p.up.Redact), nil
}

// prepare encodes the request and builds its URL.
func (p *Provider) prepare(req *providers.Request, stream bool) (string, []byte, *toolNames, error) {
	model, err := modelPath(req.Model)
	if err != nil {
		return "", nil, nil, &providers.UpstreamError{
			Provider: p.name, Category: providers.CategoryModelUnavailable, Message: err.Error(), Err: err,
		}
	}
	body, names, err := encodeRequest(req)
	if err != nil {
		return "", nil, nil, requestError(p.name, fmt.Errorf("encoding request: %w", err))
	}
	target := p.base + "/" + model + ":generateContent"
	if stream {
		target = p.base + "/" + model + ":streamGenerateContent?alt=sse"
	}
	return target, body, names, nil
}

// modelPath is the resource name of a model id: "models/<id>", or the id itself when it
// already names a models/ or tunedModels/ resource. The id must be a plain name, so that it
// cannot change the method or path of the URL.
func modelPath(model string) (string, error) {
	collection, id := "models/", model
	if rest, ok := strings.CutPrefix(model, "models/"); ok {
		id = rest
	} else if rest, ok := strings.CutPrefix(model, "tunedModels/"); ok {
		collection, id = "tunedModels/", rest
	}
	if id == "" || len(id) > 256 || id == "." || id == ".." {
		return "", fmt.Errorf("invalid model id %q", upstreamhttp.Truncate(model, 300))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return "", fmt.Errorf("invalid model id %q", upstreamhttp.Truncate(model, 300))
		}
	}
	return collection + id, nil
}

// splitFrames reads a whole JSON answer: one GenerateContentResponse or an array of them.
func splitFrames(b []byte) ([]json.RawMessage, error) {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '[' {
		var frames []json.RawMessage
		if err := json.Unmarshal(b, &frames); err != nil {
			return nil, err
		}
		return frames, nil
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("response body is not JSON")
	}
	return []json.RawMessage{b}, nil
}

// isFalsy tells whether a JSON value is absent or falsy.
func isFalsy(raw json.RawMessage) bool {
	switch string(bytes.TrimSpace(raw)) {
	case "", "null", "false", `""`, "0", "{}":
		return true
	}
	return false
}

// Interface guards.
var (
	_ providers.Provider          = (*Provider)(nil)
	_ providers.ChatProvider      = (*Provider)(nil)
	_ providers.CredentialChecker = (*Provider)(nil)
)
