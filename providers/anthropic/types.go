package anthropic

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// MessagesRequest is the body of POST /v1/messages, limited to the fields the gateway reads
// or writes. Unknown fields are ignored when decoding.
type MessagesRequest struct {
	Model string `json:"model"`
	// MaxTokens is required by the API; a pointer tells an absent value from 0, which the API
	// allows (to pre-warm the cache).
	MaxTokens *int64         `json:"max_tokens,omitempty"`
	Messages  []MessageParam `json:"messages"`
	// System is a string or an array of text blocks.
	System        json.RawMessage `json:"system,omitempty"`
	Tools         []Tool          `json:"tools,omitempty"`
	ToolChoice    *ToolChoice     `json:"tool_choice,omitempty"`
	Temperature   *float64        `json:"temperature,omitempty"`
	TopP          *float64        `json:"top_p,omitempty"`
	TopK          *int64          `json:"top_k,omitempty"`
	StopSequences []string        `json:"stop_sequences,omitempty"`
	Stream        bool            `json:"stream,omitempty"`
	Thinking      *Thinking       `json:"thinking,omitempty"`
	Metadata      *Metadata       `json:"metadata,omitempty"`
	OutputConfig  *OutputConfig   `json:"output_config,omitempty"`
}

// MessageParam is one entry of messages. Content is a string or an array of content blocks;
// it is kept raw on decoding because of that.
type MessageParam struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// ContentBlock is any content block of a request or a response: text, image, tool_use,
// tool_result, thinking, redacted_thinking. Only the fields of its Type are set; pointers
// keep the fields a type requires on the wire even when empty ("text":"").
type ContentBlock struct {
	Type string `json:"type"`
	// Text is the text of a text block.
	Text *string `json:"text,omitempty"`
	// Source is the source of an image block.
	Source *ImageSource `json:"source,omitempty"`
	// ID, Name and Input make a tool_use block; Input is a JSON object.
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// ToolUseID, Content and IsError make a tool_result block; Content is a string or an
	// array of text and image blocks.
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	// Thinking and Signature make a thinking block.
	Thinking  *string `json:"thinking,omitempty"`
	Signature *string `json:"signature,omitempty"`
	// Data is the opaque payload of a redacted_thinking block.
	Data string `json:"data,omitempty"`
}

// ImageSource is the source of an image block: base64 data with its media type, or a URL.
type ImageSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
	FileID    string `json:"file_id,omitempty"`
}

// SystemBlock is an element of an array system prompt.
type SystemBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// Tool is an entry of tools. Type is empty or "custom" for client tools; server tools
// (web_search_20250305...) have their own types.
type Tool struct {
	Type        string          `json:"type,omitempty"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// ToolChoice is tool_choice: {"type":"auto"|"any"|"none"} or {"type":"tool","name":...}.
type ToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name,omitempty"`
	DisableParallelToolUse *bool  `json:"disable_parallel_tool_use,omitempty"`
}

// Thinking is the thinking configuration: {"type":"enabled","budget_tokens":N},
// {"type":"adaptive"} or {"type":"disabled"}.
type Thinking struct {
	Type         string `json:"type"`
	BudgetTokens *int64 `json:"budget_tokens,omitempty"`
}

// Metadata is the request metadata.
type Metadata struct {
	UserID string `json:"user_id,omitempty"`
}

// OutputConfig is output_config: the effort of adaptive-thinking models and the structured
// output format.
type OutputConfig struct {
	Effort string        `json:"effort,omitempty"`
	Format *OutputFormat `json:"format,omitempty"`
}

// OutputFormat is output_config.format: {"type":"json_schema","schema":{...}}.
type OutputFormat struct {
	Type   string          `json:"type"`
	Schema json.RawMessage `json:"schema,omitempty"`
}

// Message is the response object of the Messages API.
type Message struct {
	ID           string          `json:"id"`
	Type         string          `json:"type"`
	Role         string          `json:"role"`
	Model        string          `json:"model"`
	Content      []ContentBlock  `json:"content"`
	StopReason   *string         `json:"stop_reason"`
	StopSequence *string         `json:"stop_sequence"`
	Usage        json.RawMessage `json:"usage"`
	// add is what AppendResponseWith adds (the fast encoder only; never decoded).
	add providers.Additions
}

// Usage is the usage object of a message, of message_start and of message_delta. Every
// counter is a pointer: in a stream, an absent or null counter is one the event does not
// update.
type Usage struct {
	InputTokens              *TokenCount          `json:"input_tokens,omitempty"`
	CacheCreationInputTokens *TokenCount          `json:"cache_creation_input_tokens,omitempty"`
	CacheReadInputTokens     *TokenCount          `json:"cache_read_input_tokens,omitempty"`
	OutputTokens             *TokenCount          `json:"output_tokens,omitempty"`
	OutputTokensDetails      *OutputTokensDetails `json:"output_tokens_details,omitempty"`
}

// OutputTokensDetails is usage.output_tokens_details.
type OutputTokensDetails struct {
	ThinkingTokens *TokenCount `json:"thinking_tokens,omitempty"`
}

// TokenCount is a token counter that tolerates numbers written as floats ("12.0"), which
// some Anthropic-compatible servers send.
type TokenCount int64

// UnmarshalJSON accepts a number. Null leaves the pointer that holds it nil.
func (c *TokenCount) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*c = 0
		return nil
	}
	if n, err := strconv.ParseInt(string(b), 10, 64); err == nil {
		*c = TokenCount(n)
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || math.IsNaN(f) {
		return fmt.Errorf("token count %.32s is not a number", b)
	}
	*c = TokenCount(max(min(f, math.MaxInt64/2), math.MinInt64/2))
	return nil
}

// ErrorResponse is the body of an error answer and the data of an in-stream error event.
type ErrorResponse struct {
	Type      string      `json:"type"`
	Error     ErrorDetail `json:"error"`
	RequestID *string     `json:"request_id,omitempty"`
}

// ErrorDetail is the error object of an ErrorResponse.
type ErrorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	// Details carries error_code on spend-limit 429s (enforced_spend_limit_reached).
	Details *struct {
		ErrorCode string `json:"error_code"`
	} `json:"details,omitempty"`
}

// streamEvent is the data of any stream event; the fields of its Type are set.
type streamEvent struct {
	Type         string          `json:"type"`
	Message      *streamMessage  `json:"message"`
	Index        *int            `json:"index"`
	ContentBlock *ContentBlock   `json:"content_block"`
	Delta        *streamDelta    `json:"delta"`
	Usage        json.RawMessage `json:"usage"`

	// room, when set, is where fastDecode puts the index and the delta instead of new
	// values: a stream decodes one event per token, and is done with each before the next.
	room *eventRoom
}

type eventRoom struct {
	index int
	delta streamDelta
}

// indexRoom and deltaRoom are where an event's index and delta go: nil without a room.
func (r *eventRoom) indexRoom() *int {
	if r == nil {
		return nil
	}
	return &r.index
}

func (r *eventRoom) deltaRoom() *streamDelta {
	if r == nil {
		return nil
	}
	return &r.delta
}

// streamMessage is the message of message_start, as far as the stream reads it.
type streamMessage struct {
	ID    string          `json:"id"`
	Model string          `json:"model"`
	Usage json.RawMessage `json:"usage"`
}

// streamDelta is the delta of content_block_delta (Type set) and of message_delta
// (StopReason and StopSequence set).
type streamDelta struct {
	Type         string  `json:"type"`
	Text         string  `json:"text"`
	PartialJSON  string  `json:"partial_json"`
	Thinking     string  `json:"thinking"`
	Signature    string  `json:"signature"`
	StopReason   *string `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
}
