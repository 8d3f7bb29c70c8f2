package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/providers"
)

// ChatRequest is the body of POST /chat/completions, limited to the fields the gateway reads
// or writes. Unknown fields are ignored when decoding.
type ChatRequest struct {
	Model               string          `json:"model"`
	Messages            []ChatMessage   `json:"messages"`
	Tools               []ChatTool      `json:"tools,omitempty"`
	ToolChoice          json.RawMessage `json:"tool_choice,omitempty"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls,omitempty"`
	MaxTokens           *int64          `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens,omitempty"`
	Temperature         *float64        `json:"temperature,omitempty"`
	TopP                *float64        `json:"top_p,omitempty"`
	Stop                StopList        `json:"stop,omitempty"`
	Stream              bool            `json:"stream,omitempty"`
	StreamOptions       *StreamOptions  `json:"stream_options,omitempty"`
	ResponseFormat      *ResponseFormat `json:"response_format,omitempty"`
	ReasoningEffort     string          `json:"reasoning_effort,omitempty"`
	User                string          `json:"user,omitempty"`
	SafetyIdentifier    string          `json:"safety_identifier,omitempty"`
}

// ChatMessage is one entry of messages. Content is kept raw on decoding because its shape
// (string, array of parts or null) depends on the role.
type ChatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name,omitempty"`
	ToolCalls  []ChatToolCall  `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

// ContentPart is one element of an array content.
type ContentPart struct {
	Type     string    `json:"type"`
	Text     *string   `json:"text,omitempty"`
	ImageURL *ImageURL `json:"image_url,omitempty"`
	Refusal  *string   `json:"refusal,omitempty"`
}

// ImageURL is the image_url of an image part: an http(s) URL or a data: URL.
type ImageURL struct {
	URL    string `json:"url"`
	Detail string `json:"detail,omitempty"`
}

// ChatTool is an entry of tools.
type ChatTool struct {
	Type     string       `json:"type"`
	Function ChatFunction `json:"function"`
}

// ChatFunction is the function a ChatTool describes.
type ChatFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// ChatToolCall is a call in an assistant message's tool_calls.
type ChatToolCall struct {
	ID       string           `json:"id"`
	Type     string           `json:"type"`
	Function ChatFunctionCall `json:"function"`
}

// ChatFunctionCall names the function of a ChatToolCall and carries its arguments.
type ChatFunctionCall struct {
	Name      string    `json:"name"`
	Arguments Arguments `json:"arguments"`
}

// Arguments is the JSON text of a call's arguments. The API sends a string; some clients
// send the object itself, which is accepted and kept as its JSON text.
type Arguments string

// UnmarshalJSON accepts a string, an object, an array or null. b is a value of a document
// already checked, as encoding/json and the fast decoders (fastdecode.go) hand it over: a
// string, every fragment of a streamed call, is read by rawjson.UnmarshalString, without
// encoding/json's reflective decoder.
func (a *Arguments) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || string(b) == "null":
		*a = ""
	case b[0] == '"':
		s, err := rawjson.UnmarshalString(b)
		if err != nil {
			return err
		}
		*a = Arguments(s)
	case b[0] == '{' || b[0] == '[':
		var buf bytes.Buffer
		if err := json.Compact(&buf, b); err != nil {
			return err
		}
		*a = Arguments(buf.String())
	default:
		return fmt.Errorf("arguments must be a JSON string")
	}
	return nil
}

// StopList is stop: a string or an array of strings on the wire.
type StopList []string

// UnmarshalJSON accepts a string, an array of strings or null.
func (s *StopList) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || string(b) == "null":
		*s = nil
		return nil
	case b[0] == '"':
		var one string
		if err := json.Unmarshal(b, &one); err != nil {
			return err
		}
		*s = StopList{one}
		return nil
	case b[0] == '[':
		var many []string
		if err := json.Unmarshal(b, &many); err != nil {
			return fmt.Errorf("stop must be a string or an array of strings")
		}
		*s = many
		return nil
	default:
		return fmt.Errorf("stop must be a string or an array of strings")
	}
}

// StreamOptions is stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ResponseFormat is response_format.
type ResponseFormat struct {
	Type       string      `json:"type"`
	JSONSchema *JSONSchema `json:"json_schema,omitempty"`
}

// JSONSchema is response_format.json_schema.
type JSONSchema struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// ChatResponse is a chat.completion object.
type ChatResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []ChatChoice `json:"choices"`
	Usage             *ChatUsage   `json:"usage,omitempty"`
	SystemFingerprint *string      `json:"system_fingerprint,omitempty"`
	// add is what AppendChatResponseWith adds (the fast encoder only; never decoded).
	add providers.Additions
}

// ChatChoice is an element of a chat.completion's choices.
type ChatChoice struct {
	Index        int                 `json:"index"`
	Message      ChatResponseMessage `json:"message"`
	FinishReason *string             `json:"finish_reason"`
	Logprobs     json.RawMessage     `json:"logprobs"`
}

// ChatResponseMessage is the assistant message of a ChatChoice. Content is a JSON string,
// or null when the answer is only tool calls; some compatible servers send an array of parts.
type ChatResponseMessage struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	Refusal   *string         `json:"refusal"`
	ToolCalls []ChatToolCall  `json:"tool_calls,omitempty"`
	// ReasoningContent (DeepSeek, vLLM) and Reasoning (Groq, OpenRouter) carry the reasoning
	// text of compatible servers; only read.
	ReasoningContent json.RawMessage `json:"reasoning_content,omitempty"`
	Reasoning        json.RawMessage `json:"reasoning,omitempty"`
}

// ChatUsage is the CompletionUsage object.
type ChatUsage struct {
	PromptTokens            TokenCount               `json:"prompt_tokens"`
	CompletionTokens        TokenCount               `json:"completion_tokens"`
	TotalTokens             TokenCount               `json:"total_tokens"`
	PromptTokensDetails     *PromptTokensDetails     `json:"prompt_tokens_details,omitempty"`
	CompletionTokensDetails *CompletionTokensDetails `json:"completion_tokens_details,omitempty"`
	// PromptCacheHitTokens is DeepSeek's name for cached prompt tokens; only read.
	PromptCacheHitTokens *TokenCount `json:"prompt_cache_hit_tokens,omitempty"`
}

// PromptTokensDetails is usage.prompt_tokens_details.
type PromptTokensDetails struct {
	CachedTokens     TokenCount `json:"cached_tokens"`
	CacheWriteTokens TokenCount `json:"cache_write_tokens"`
}

// CompletionTokensDetails is usage.completion_tokens_details.
type CompletionTokensDetails struct {
	ReasoningTokens TokenCount `json:"reasoning_tokens"`
}

// TokenCount is a token counter that tolerates what compatible servers send: null (0),
// and numbers written as floats ("12.0").
type TokenCount int64

// UnmarshalJSON accepts a number or null.
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

// ChatChunk is what the gateway reads of a chat.completion.chunk, or an in-stream error
// when Error is set. The chunk's id and model are not read: the neutral events carry
// neither (the surfaces answer with their own), and decoding them cost two strings per
// frame of every stream.
type ChatChunk struct {
	Choices []ChunkChoice   `json:"choices"`
	Usage   json.RawMessage `json:"usage"`
	Error   json.RawMessage `json:"error"`
	// XGroq carries Groq's usage, sent there instead of a usage chunk.
	XGroq *struct {
		Usage json.RawMessage `json:"usage"`
	} `json:"x_groq"`
}

// ChunkChoice is an element of a chunk's choices.
type ChunkChoice struct {
	Index        int        `json:"index"`
	Delta        ChunkDelta `json:"delta"`
	FinishReason *string    `json:"finish_reason"`
}

// ChunkDelta is the delta of a ChunkChoice.
type ChunkDelta struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	Refusal   *string         `json:"refusal"`
	ToolCalls []ChunkToolCall `json:"tool_calls"`
	// ReasoningContent and Reasoning are compatible servers' reasoning deltas.
	ReasoningContent json.RawMessage `json:"reasoning_content"`
	Reasoning        json.RawMessage `json:"reasoning"`
}

// ChunkToolCall is a piece of a tool call in a delta.
type ChunkToolCall struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string    `json:"name"`
		Arguments Arguments `json:"arguments"`
	} `json:"function"`
}

// ErrorBody is the error object of OpenAI's error responses and in-stream errors, as the
// gateway writes it: {"error": ErrorBody}. Param and Code are null when nil.
type ErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}
