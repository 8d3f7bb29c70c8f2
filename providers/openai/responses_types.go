package openai

import (
	"encoding/json"
)

// ResponsesRequest is the body of POST /responses, limited to the fields the gateway reads
// or writes. Fields whose shape varies (input, instructions, tool_choice) are kept raw on
// decoding. Unknown fields are ignored when decoding.
type ResponsesRequest struct {
	Model             string              `json:"model"`
	Instructions      json.RawMessage     `json:"instructions,omitempty"`
	Input             json.RawMessage     `json:"input,omitempty"`
	Tools             []ResponsesTool     `json:"tools,omitempty"`
	ToolChoice        json.RawMessage     `json:"tool_choice,omitempty"`
	ParallelToolCalls *bool               `json:"parallel_tool_calls,omitempty"`
	MaxOutputTokens   *int64              `json:"max_output_tokens,omitempty"`
	Temperature       *float64            `json:"temperature,omitempty"`
	TopP              *float64            `json:"top_p,omitempty"`
	Stream            bool                `json:"stream,omitempty"`
	Text              *ResponsesText      `json:"text,omitempty"`
	Reasoning         *ResponsesReasoning `json:"reasoning,omitempty"`
	Include           []string            `json:"include,omitempty"`
	Store             *bool               `json:"store,omitempty"`
	User              string              `json:"user,omitempty"`
	SafetyIdentifier  string              `json:"safety_identifier,omitempty"`
	// The fields below need state kept by the server; the gateway keeps none and rejects
	// them. They are only read.
	PreviousResponseID string          `json:"previous_response_id,omitempty"`
	Conversation       json.RawMessage `json:"conversation,omitempty"`
	Background         *bool           `json:"background,omitempty"`
	Prompt             json.RawMessage `json:"prompt,omitempty"`
}

// ResponsesTool is an entry of tools. Function tools are flat: no "function" wrapper as in
// chat completions.
type ResponsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name,omitempty"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// ResponsesText is the text configuration of a request.
type ResponsesText struct {
	Format *ResponsesTextFormat `json:"format,omitempty"`
}

// ResponsesTextFormat is text.format: text, json_object, or a flat json_schema.
type ResponsesTextFormat struct {
	Type   string          `json:"type"`
	Name   string          `json:"name,omitempty"`
	Schema json.RawMessage `json:"schema,omitempty"`
	Strict *bool           `json:"strict,omitempty"`
}

// ResponsesReasoning is the reasoning configuration of a request.
type ResponsesReasoning struct {
	Effort  string `json:"effort,omitempty"`
	Summary string `json:"summary,omitempty"`
}

// ResponsesItem is an input or output item, read as the union of the fields the gateway
// understands: message (role, content), function_call (call_id, name, arguments),
// function_call_output (call_id, output) and reasoning (summary, content,
// encrypted_content). Content is kept raw because its shape depends on the item type.
type ResponsesItem struct {
	Type             string                 `json:"type"`
	ID               string                 `json:"id"`
	Role             string                 `json:"role"`
	Status           string                 `json:"status"`
	Content          json.RawMessage        `json:"content"`
	CallID           string                 `json:"call_id"`
	Name             string                 `json:"name"`
	Arguments        Arguments              `json:"arguments"`
	Output           json.RawMessage        `json:"output"`
	Summary          []ResponsesSummaryPart `json:"summary"`
	EncryptedContent string                 `json:"encrypted_content"`
}

// ResponsesSummaryPart is an element of a reasoning item's summary (summary_text) or
// content (reasoning_text).
type ResponsesSummaryPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// ResponsesContentPart is a content part of a message item or of a function call output:
// input_text, input_image, input_file, output_text or refusal. ImageURL is kept raw so
// that the chat-style {"url": ...} object some clients send is accepted too.
type ResponsesContentPart struct {
	Type     string          `json:"type"`
	Text     *string         `json:"text"`
	ImageURL json.RawMessage `json:"image_url"`
	FileID   string          `json:"file_id"`
	Refusal  *string         `json:"refusal"`
}

// ResponsesResponse is a response object, limited to what the gateway reads from an
// upstream.
type ResponsesResponse struct {
	ID                string                      `json:"id"`
	Object            string                      `json:"object"`
	Status            string                      `json:"status"`
	Model             string                      `json:"model"`
	Output            []ResponsesItem             `json:"output"`
	IncompleteDetails *ResponsesIncompleteDetails `json:"incomplete_details"`
	Error             json.RawMessage             `json:"error"`
	Usage             json.RawMessage             `json:"usage"`
}

// ResponsesIncompleteDetails tells why a response is incomplete.
type ResponsesIncompleteDetails struct {
	Reason string `json:"reason"`
}

// ResponsesUsage is the ResponseUsage object.
type ResponsesUsage struct {
	InputTokens        TokenCount `json:"input_tokens"`
	InputTokensDetails *struct {
		CachedTokens     TokenCount `json:"cached_tokens"`
		CacheWriteTokens TokenCount `json:"cache_write_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        TokenCount `json:"output_tokens"`
	OutputTokensDetails *struct {
		ReasoningTokens TokenCount `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens TokenCount `json:"total_tokens"`
}

// Request-side items as the gateway writes them to an upstream. Each has its own type so
// that the fields every item needs (arguments, summary, output) are never omitted.
type (
	responsesMessageItem struct {
		Type    string          `json:"type"`
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	responsesCallItem struct {
		Type      string `json:"type"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	responsesCallOutputItem struct {
		Type   string          `json:"type"`
		CallID string          `json:"call_id"`
		Output json.RawMessage `json:"output"`
	}
	responsesReasoningItem struct {
		Type             string                 `json:"type"`
		Summary          []ResponsesSummaryPart `json:"summary"`
		EncryptedContent string                 `json:"encrypted_content,omitempty"`
	}
	responsesInputPart struct {
		Type        string  `json:"type"`
		Text        *string `json:"text,omitempty"`
		ImageURL    string  `json:"image_url,omitempty"`
		Detail      string  `json:"detail,omitempty"`
		Annotations *[]any  `json:"annotations,omitempty"`
	}
)
