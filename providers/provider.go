// Package providers holds the neutral request, response and stream model that every
// surface (chat completions, responses, messages) and every upstream adapter meet in,
// and the small interfaces an adapter implements. It knows nothing of Caddy.
//
// An adapter lives in its own sub-package (providers/openai, providers/mock, ...) and
// implements Provider plus whichever optional capabilities it has: ChatProvider for the
// neutral model, Forwarder when it can take a request body already in its own wire format.
//
// Reasoning signatures are tagged with the provider that issued them when an adapter decodes
// an upstream answer ("gw1:<origin>:<raw>", see Tag and Untag). Surface encoders emit a
// token of their own native origin raw and any other token as is; surface decoders keep
// what clients send; upstream encoders send untagged signatures and their own (untagged),
// and drop signatures of another origin, with the reasoning part when the upstream requires
// a valid signature on it. See signature.go.
package providers

import (
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/modelgateway/caddy-modelgateway/internal/meter"
)

// WireFormat names an HTTP API dialect spoken by a surface or an upstream.
type WireFormat string

// The wire formats the gateway knows.
const (
	FormatOpenAIChat      WireFormat = "openai_chat"
	FormatOpenAIResponses WireFormat = "openai_responses"
	FormatAnthropic       WireFormat = "anthropic_messages"
	FormatGemini          WireFormat = "gemini"
)

// Provider is what every upstream adapter implements.
type Provider interface {
	// Name is the operator's name for this provider instance ("openai", "groq"...).
	Name() string
}

// CredentialChecker is an adapter that can tell, without calling its upstream, that it has
// no credential to send: the operator configured one that resolved empty (an unset
// environment variable), so that every call is refused with credentials_not_configured.
type CredentialChecker interface {
	CredentialMissing() bool
}

// ChatProvider generates text from the neutral model.
type ChatProvider interface {
	Chat(ctx context.Context, req *Request) (*Response, error)
	ChatStream(ctx context.Context, req *Request) (Stream, error)
}

// Forwarder sends a request body that is already in one of the provider's own wire
// formats, byte for byte, and hands back the upstream body untouched. It is the fast path
// used when the surface and the upstream speak the same format.
type Forwarder interface {
	// Formats lists the wire formats Forward accepts. Callers only read the slice, which an
	// implementation may share between calls.
	Formats() []WireFormat
	// Forward returns the upstream response when its status is 2xx. Any other status, a
	// connection failure or a timeout before the response headers is an *UpstreamError.
	Forward(ctx context.Context, req *RawRequest) (*RawResponse, error)
}

// RawRequest is a request body in a provider's wire format.
type RawRequest struct {
	Format WireFormat
	// Body is the complete JSON body, model already rewritten to the upstream id.
	Body []byte
	// Reader, when set, is the body instead of Body: read once as it is sent (a multipart
	// upload streamed from the client, never held whole), Length bytes or -1 when unknown,
	// of ContentType.
	Reader      io.Reader
	Length      int64
	ContentType string
	// Accept is the media type asked of the upstream when the answer is neither JSON nor an
	// event stream ("application/octet-stream" for audio).
	Accept string
	Stream bool
	// Header carries client headers worth passing on (never credentials).
	Header http.Header
}

// RawResponse is a successful upstream answer whose body has not been read yet.
type RawResponse struct {
	Status int
	Header http.Header
	Body   io.ReadCloser
	// ContentLength is the body's announced length; 0 or less when unknown.
	ContentLength int64
}

// Request is the neutral text-generation request.
type Request struct {
	// Model is the upstream model id.
	Model    string
	System   string
	Messages []Message
	Tools    []Tool
	// ToolChoice is "auto", "none", "required" or a tool name; empty means unset.
	ToolChoice        string
	ParallelToolCalls *bool
	MaxTokens         *int64
	Temperature       *float64
	TopP              *float64
	Stop              []string
	Stream            bool
	// ResponseFormat is the JSON-mode request: "", "json_object" or "json_schema".
	ResponseFormat string
	JSONSchema     json.RawMessage
	// ReasoningEffort is "", "minimal", "low", "medium" or "high".
	ReasoningEffort string
	// ThinkingBudget is an explicit reasoning token budget (Anthropic thinking.budget_tokens,
	// Gemini thinkingBudget); 0 means unset.
	ThinkingBudget int64
	// TopK is Anthropic's and Gemini's top_k; nil means unset.
	TopK *int64
	// User is an end-user id for abuse tracking, passed on where the upstream has it.
	User string
}

// Role of a message in the neutral model.
type Role string

// Neutral roles. System instructions live in Request.System, not in messages.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one turn of the conversation.
type Message struct {
	Role    Role
	Content []Part
	// ToolCalls are the calls an assistant turn made.
	ToolCalls []ToolCall
	// ToolCallID names the call a tool turn answers.
	ToolCallID string
	Name       string
}

// PartType is the kind of a content part.
type PartType string

// Content part kinds.
const (
	PartText  PartType = "text"
	PartImage PartType = "image"
	// PartReasoning is an assistant's earlier reasoning (Anthropic thinking block), carried back
	// in multi-turn history with its Signature.
	PartReasoning PartType = "reasoning"
)

// Part is one piece of message content.
type Part struct {
	Type PartType
	Text string
	// ImageURL is an http(s) URL; for inline images Data and MediaType are set instead.
	ImageURL  string
	MediaType string
	Data      []byte
	// Signature authenticates a reasoning part to the provider that produced it.
	Signature string
}

// Tool is a function the model may call.
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage
}

// ToolCall is a call the model made.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}

// FinishReason is the neutral reason a generation stopped.
type FinishReason string

// Neutral finish reasons, named after the chat completions values.
const (
	FinishStop          FinishReason = "stop"
	FinishLength        FinishReason = "length"
	FinishToolCalls     FinishReason = "tool_calls"
	FinishContentFilter FinishReason = "content_filter"
)

// Response is a complete neutral answer.
type Response struct {
	ID    string
	Model string
	// Reasoning is the reasoning text the provider returned (possibly a summary), before Text.
	Reasoning          string
	ReasoningSignature string
	Text               string
	ToolCalls          []ToolCall
	FinishReason       FinishReason
	// StopSequence is the stop sequence that ended the answer, when one did.
	StopSequence string
	Usage        Usage
}

// Additions are members a caller adds to an answer an encoder writes (AppendChatResponseWith
// and AppendResponsesResponseWith of the openai package, AppendResponseWith of the anthropic
// one): raw JSON members, each "key":value, comma-separated, with no leading or trailing
// comma, whose keys the encoder does not write itself. Usage goes at the end of the answer's
// usage object, Top at the end of the answer. The gateway adds its cost and meta this way to
// the answers it encodes, rather than reading each answer back to add them.
type Additions struct {
	Usage, Top []byte
}

// Usage counts tokens in five disjoint counters, so that each token is counted once:
// the prompt is Input + CacheRead + CacheWrite, the completion is Output + Reasoning.
type Usage struct {
	Input      int64
	CacheRead  int64
	CacheWrite int64
	Output     int64
	Reasoning  int64
}

// PromptTokens is the whole prompt.
func (u Usage) PromptTokens() int64 { return u.Input + u.CacheRead + u.CacheWrite }

// CompletionTokens is the whole completion, reasoning included.
func (u Usage) CompletionTokens() int64 { return u.Output + u.Reasoning }

// Total is every token of the request.
func (u Usage) Total() int64 { return u.PromptTokens() + u.CompletionTokens() }

// Metered is the usage by dimension of a text call's token counts, as pricing prices it.
func (u Usage) Metered() meter.Usage {
	return meter.Usage{Input: u.Input, CachedInput: u.CacheRead, CacheWrite: u.CacheWrite, Output: u.Output, Reasoning: u.Reasoning}
}

// EventType is the kind of a neutral stream event.
type EventType int

// Stream event kinds.
const (
	// EventText carries a piece of answer text in Text.
	EventText EventType = iota + 1
	// EventToolCall carries a piece of a tool call: Index identifies the call; ID and Name
	// arrive with its first piece, Arguments is appended piece by piece.
	EventToolCall
	// EventFinish carries FinishReason; it comes once, after the last content event.
	EventFinish
	// EventUsage carries the usage so far in Usage; the last one wins.
	EventUsage
	// EventReasoning carries a piece of reasoning text in Text, or its Signature.
	EventReasoning
)

// Event is one neutral stream event.
type Event struct {
	Type         EventType
	Text         string
	Index        int
	ToolCall     ToolCall
	FinishReason FinishReason
	// StopSequence comes with EventFinish when a stop sequence ended the answer.
	StopSequence string
	// Signature comes with EventReasoning when the provider signs its reasoning.
	Signature string
	Usage     Usage
}

// Stream is an iterator over neutral events, tied to the context of the call that opened
// it. Next blocks until an event is there, the stream ends (false, Err nil) or fails
// (false, Err set). Close releases the upstream connection and may be called at any time.
type Stream interface {
	Next() bool
	Current() Event
	Err() error
	Close() error
}

// Waiter is what a Stream may also implement: OnWait(f) has f called each time Next is
// about to wait for more of the upstream's stream (after it has given out every event of
// what it already read). A relay that holds its flushes flushes there, so that events the
// upstream sent together reach the client together (see sse.Reader.OnWait).
type Waiter interface {
	OnWait(f func())
}
