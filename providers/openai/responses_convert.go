package openai

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
)

// The Responses API converters. The gateway is stateless: it keeps no response, item or
// conversation, so a Responses client must send its whole conversation in input, as it does
// with store:false. Everything that needs server-side state is refused with an error that
// says so (see DecodeResponsesRequest).

// ErrResponseFailed is the cause of DecodeResponsesResponse's error for a response whose
// status is "failed".
var ErrResponseFailed = errors.New("upstream response failed")

// errPreviousResponse is the policy message for the stateful fields.
const errPreviousResponse = "previous_response_id is not supported by this gateway; send the full input"

// DecodeResponsesRequest reads a Responses API request body into the neutral model, for the
// gateway's responses surface.
//
//   - instructions, then system and developer messages of input, in order, become
//     Request.System, joined with a blank line; their position in the conversation is lost.
//   - input is a string (one user message) or a list of items: messages (role user,
//     assistant, system or developer; content a string or input_text, input_image,
//     output_text and refusal parts), function_call, function_call_output and reasoning.
//   - A run of consecutive assistant-side items (reasoning, assistant messages,
//     function_call) becomes one assistant turn: reasoning and text first, then every call,
//     which is what chat completions and Anthropic require of a turn with several calls.
//   - A reasoning item becomes a reasoning part: its summary texts (or, without a summary,
//     its reasoning_text content) joined with a blank line, and its encrypted_content as the
//     Signature. A reasoning item with neither (a reference to a stored item) is dropped.
//   - Only function tools are accepted; any other tool type (web_search, file_search, mcp,
//     custom...) is an error, because silently dropping a tool the client relies on would
//     change the answer.
//
// Fields that need state the gateway does not keep are refused: previous_response_id,
// conversation, store:true, background:true, prompt (stored prompt templates) and
// item_reference items. Files (input_file, input_image with file_id) are refused too.
// Fields the neutral model has no place for (include, metadata, truncation, service_tier,
// prompt_cache_key, reasoning.summary, text.verbosity, strict...) are ignored. The model
// is not required here: the caller checks Request.Model.
//
// Any error is the client's: a body that is not JSON (a *json.SyntaxError is wrapped), a
// field of the wrong type, an unknown item type or role, or a refused field.
func DecodeResponsesRequest(body []byte) (*providers.Request, error) {
	var rr ResponsesRequest
	if err := json.Unmarshal(body, &rr); err != nil {
		return nil, fmt.Errorf("decoding responses request: %w", err)
	}
	switch {
	case rr.PreviousResponseID != "":
		return nil, errors.New(errPreviousResponse)
	case !isNull(bytes.TrimSpace(rr.Conversation)):
		return nil, errors.New("conversation is not supported by this gateway; send the full input")
	case rr.Store != nil && *rr.Store:
		return nil, errors.New("store is not supported by this gateway, which keeps no responses; omit store or set it to false and send the full input")
	case rr.Background != nil && *rr.Background:
		return nil, errors.New("background is not supported by this gateway")
	case !isNull(bytes.TrimSpace(rr.Prompt)):
		return nil, errors.New("prompt is not supported by this gateway; send instructions and input")
	}
	req := &providers.Request{
		Model:             rr.Model,
		ParallelToolCalls: rr.ParallelToolCalls,
		MaxTokens:         rr.MaxOutputTokens,
		Temperature:       rr.Temperature,
		TopP:              rr.TopP,
		Stream:            rr.Stream,
		User:              rr.User,
	}
	if req.User == "" {
		req.User = rr.SafetyIdentifier
	}
	if rr.Reasoning != nil {
		req.ReasoningEffort = rr.Reasoning.Effort
	}
	var system []string
	if raw := bytes.TrimSpace(rr.Instructions); !isNull(raw) {
		s, err := rawjson.UnmarshalString(raw)
		if err != nil {
			return nil, errors.New("instructions: must be a string")
		}
		if s != "" {
			system = append(system, s)
		}
	}
	var err error
	if req.Messages, system, err = decodeResponsesInput(rr.Input, system); err != nil {
		return nil, err
	}
	req.System = strings.Join(system, "\n\n")
	for i, t := range rr.Tools {
		switch t.Type {
		case "function":
		case "":
			return nil, fmt.Errorf("tools[%d].type: required", i)
		default:
			return nil, fmt.Errorf("tools[%d].type: tool type %q is not supported by this gateway; only function tools are", i, t.Type)
		}
		if t.Name == "" {
			return nil, fmt.Errorf("tools[%d].name: required", i)
		}
		tool := providers.Tool{Name: t.Name, Description: t.Description}
		if !isNull(t.Parameters) {
			tool.Parameters = t.Parameters
		}
		req.Tools = append(req.Tools, tool)
	}
	if req.ToolChoice, err = decodeToolChoice(rr.ToolChoice, "tool_choice.name"); err != nil {
		return nil, err
	}
	if rr.Text != nil && rr.Text.Format != nil {
		switch f := rr.Text.Format; f.Type {
		case "", "text":
		case "json_object":
			req.ResponseFormat = "json_object"
		case "json_schema":
			req.ResponseFormat = "json_schema"
			if !isNull(f.Schema) {
				req.JSONSchema = f.Schema
			}
		default:
			return nil, fmt.Errorf("text.format.type: unsupported type %q", f.Type)
		}
	}
	return req, nil
}

// decodeResponsesInput reads input, appending the system and developer texts it holds to
// system.
func decodeResponsesInput(raw json.RawMessage, system []string) ([]providers.Message, []string, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return nil, nil, errors.New("input: required")
	}
	switch raw[0] {
	case '"':
		s, err := rawjson.UnmarshalString(raw)
		if err != nil {
			return nil, nil, fmt.Errorf("input: %w", err)
		}
		if s == "" {
			return nil, nil, errors.New("input: must not be empty")
		}
		return []providers.Message{{Role: providers.RoleUser, Content: []providers.Part{{Type: providers.PartText, Text: s}}}}, system, nil
	case '[':
	default:
		return nil, nil, errors.New("input: must be a string or an array of items")
	}
	var items []ResponsesItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, nil, fmt.Errorf("input: %w", err)
	}
	if len(items) == 0 {
		return nil, nil, errors.New("input: at least one item is required")
	}
	msgs := make([]providers.Message, 0, len(items))
	turn := -1 // index in msgs of the assistant turn being built, -1 when none
	assistant := func() *providers.Message {
		if turn < 0 {
			msgs = append(msgs, providers.Message{Role: providers.RoleAssistant})
			turn = len(msgs) - 1
		}
		return &msgs[turn]
	}
	for i, it := range items {
		typ := it.Type
		if typ == "" && it.Role != "" {
			typ = "message" // EasyInputMessage: {role, content} without a type
		}
		switch typ {
		case "message":
			parts, err := decodeResponsesContent(it.Content, it.Role)
			if err != nil {
				return nil, nil, fmt.Errorf("input[%d].%w", i, err)
			}
			switch it.Role {
			case "system", "developer":
				for _, p := range parts {
					system = append(system, p.Text)
				}
			case "user":
				turn = -1
				msgs = append(msgs, providers.Message{Role: providers.RoleUser, Content: parts})
			case "assistant":
				m := assistant()
				m.Content = append(m.Content, parts...)
			case "":
				return nil, nil, fmt.Errorf("input[%d].role: required", i)
			default:
				return nil, nil, fmt.Errorf("input[%d].role: unknown role %q", i, it.Role)
			}
		case "function_call":
			if it.CallID == "" {
				return nil, nil, fmt.Errorf("input[%d].call_id: required", i)
			}
			if it.Name == "" {
				return nil, nil, fmt.Errorf("input[%d].name: required", i)
			}
			m := assistant()
			m.ToolCalls = append(m.ToolCalls, providers.ToolCall{ID: it.CallID, Name: it.Name, Arguments: string(it.Arguments)})
		case "function_call_output":
			if it.CallID == "" {
				return nil, nil, fmt.Errorf("input[%d].call_id: required", i)
			}
			parts, err := decodeResponsesOutput(it.Output)
			if err != nil {
				return nil, nil, fmt.Errorf("input[%d].%w", i, err)
			}
			turn = -1
			msgs = append(msgs, providers.Message{Role: providers.RoleTool, ToolCallID: it.CallID, Content: parts})
		case "reasoning":
			part, err := decodeReasoningItem(it)
			if err != nil {
				return nil, nil, fmt.Errorf("input[%d].%w", i, err)
			}
			if part.Text != "" || part.Signature != "" {
				m := assistant()
				m.Content = append(m.Content, part)
			}
		case "item_reference":
			return nil, nil, fmt.Errorf("input[%d]: item_reference is not supported by this gateway, which keeps no items; send the item itself", i)
		case "":
			return nil, nil, fmt.Errorf("input[%d].type: required", i)
		default:
			return nil, nil, fmt.Errorf("input[%d].type: item type %q is not supported by this gateway", i, typ)
		}
	}
	return msgs, system, nil
}

// decodeReasoningItem reads a reasoning item into a reasoning part. Errors start with the
// field path after input[i].
func decodeReasoningItem(it ResponsesItem) (providers.Part, error) {
	texts := make([]string, 0, len(it.Summary))
	for j, s := range it.Summary {
		if s.Type != "" && s.Type != "summary_text" {
			return providers.Part{}, fmt.Errorf("summary[%d].type: unsupported type %q", j, s.Type)
		}
		if s.Text != "" {
			texts = append(texts, s.Text)
		}
	}
	if len(texts) == 0 {
		if raw := bytes.TrimSpace(it.Content); !isNull(raw) {
			var content []ResponsesSummaryPart
			if err := json.Unmarshal(raw, &content); err != nil {
				return providers.Part{}, fmt.Errorf("content: %w", err)
			}
			for _, c := range content {
				if c.Type == "reasoning_text" && c.Text != "" {
					texts = append(texts, c.Text)
				}
			}
		}
	}
	return providers.Part{Type: providers.PartReasoning, Text: strings.Join(texts, "\n\n"), Signature: it.EncryptedContent}, nil
}

// decodeResponsesContent reads a message's content: a string or an array of parts. Empty
// texts are dropped. Images are allowed in user messages only. Errors start with the field
// path after input[i].
func decodeResponsesContent(raw json.RawMessage, role string) ([]providers.Part, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return nil, errors.New("content: required")
	}
	switch raw[0] {
	case '"':
		s, err := rawjson.UnmarshalString(raw)
		if err != nil {
			return nil, fmt.Errorf("content: %w", err)
		}
		if s == "" {
			return nil, nil
		}
		return []providers.Part{{Type: providers.PartText, Text: s}}, nil
	case '[':
	default:
		return nil, errors.New("content: must be a string or an array of content parts")
	}
	var parts []ResponsesContentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, fmt.Errorf("content: %w", err)
	}
	out := make([]providers.Part, 0, len(parts))
	for j, p := range parts {
		switch {
		case p.Type == "input_text" || (p.Type == "output_text" && role == "assistant"):
			if p.Text == nil {
				return nil, fmt.Errorf("content[%d].text: required", j)
			}
			if *p.Text != "" {
				out = append(out, providers.Part{Type: providers.PartText, Text: *p.Text})
			}
		case p.Type == "refusal" && role == "assistant":
			if p.Refusal != nil && *p.Refusal != "" {
				out = append(out, providers.Part{Type: providers.PartText, Text: *p.Refusal})
			}
		case p.Type == "input_image" && role == "user":
			part, err := decodeResponsesImage(p)
			if err != nil {
				return nil, fmt.Errorf("content[%d].%w", j, err)
			}
			out = append(out, part)
		case p.Type == "input_file":
			return nil, fmt.Errorf("content[%d]: file inputs are not supported", j)
		case p.Type == "":
			return nil, fmt.Errorf("content[%d].type: required", j)
		default:
			return nil, fmt.Errorf("content[%d].type: part type %q is not supported in %s messages", j, p.Type, role)
		}
	}
	return out, nil
}

// decodeResponsesOutput reads a function_call_output's output: a string or an array of
// input_text and input_image parts.
func decodeResponsesOutput(raw json.RawMessage) ([]providers.Part, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return nil, errors.New("output: required")
	}
	switch raw[0] {
	case '"':
		s, err := rawjson.UnmarshalString(raw)
		if err != nil {
			return nil, fmt.Errorf("output: %w", err)
		}
		if s == "" {
			return nil, nil
		}
		return []providers.Part{{Type: providers.PartText, Text: s}}, nil
	case '[':
	default:
		return nil, errors.New("output: must be a string or an array of content parts")
	}
	var parts []ResponsesContentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, fmt.Errorf("output: %w", err)
	}
	out := make([]providers.Part, 0, len(parts))
	for j, p := range parts {
		switch p.Type {
		case "input_text":
			if p.Text == nil {
				return nil, fmt.Errorf("output[%d].text: required", j)
			}
			if *p.Text != "" {
				out = append(out, providers.Part{Type: providers.PartText, Text: *p.Text})
			}
		case "input_image":
			part, err := decodeResponsesImage(p)
			if err != nil {
				return nil, fmt.Errorf("output[%d].%w", j, err)
			}
			out = append(out, part)
		case "input_file":
			return nil, fmt.Errorf("output[%d]: file inputs are not supported", j)
		case "":
			return nil, fmt.Errorf("output[%d].type: required", j)
		default:
			return nil, fmt.Errorf("output[%d].type: part type %q is not supported", j, p.Type)
		}
	}
	return out, nil
}

// decodeResponsesImage reads an input_image part: image_url is an http(s) URL or a data URL
// (a chat-style {"url": ...} object is accepted too); file_id is refused.
func decodeResponsesImage(p ResponsesContentPart) (providers.Part, error) {
	raw := bytes.TrimSpace(p.ImageURL)
	if isNull(raw) {
		if p.FileID != "" {
			return providers.Part{}, errors.New("file_id: file inputs are not supported")
		}
		return providers.Part{}, errors.New("image_url: required")
	}
	var u string
	if raw[0] == '{' {
		var obj struct {
			URL string `json:"url"`
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			return providers.Part{}, fmt.Errorf("image_url: %w", err)
		}
		u = obj.URL
	} else if err := json.Unmarshal(raw, &u); err != nil {
		return providers.Part{}, errors.New("image_url: must be a string")
	}
	if u == "" {
		return providers.Part{}, errors.New("image_url: required")
	}
	part, err := DecodeImageURL(u)
	if err != nil {
		return providers.Part{}, fmt.Errorf("image_url: %w", err)
	}
	if part.ImageURL == "" && len(part.Data) == 0 {
		return providers.Part{}, errors.New("image_url: data URL has no data")
	}
	return part, nil
}

// minOutputTokens is the smallest max_output_tokens the Responses API accepts.
const minOutputTokens = 16

// EncodeResponsesRequest writes the neutral request as a Responses API body for an OpenAI
// upstream. It sets store:false, so that the upstream keeps nothing, and asks for
// reasoning.encrypted_content (include) when the history carries signed reasoning or
// reasoning is requested, so that reasoning can be replayed statelessly on the next turn.
//
// System becomes instructions. Assistant turns become, in order, a reasoning item per
// signed reasoning part (unsigned ones cannot be replayed and are dropped, never inlined as
// text), an assistant message with the text, and a function_call item per call; tool turns
// become function_call_output items. Function tools are sent with strict:false, the chat
// completions default, since the Responses API defaults to strict schemas that ordinary
// schemas fail. max_output_tokens is raised to the API's minimum of 16. Stop and TopK have
// no place in the format and are dropped; a ThinkingBudget without ReasoningEffort becomes
// an effort, as for chat completions.
func EncodeResponsesRequest(req *providers.Request) ([]byte, error) {
	store := false
	rr := ResponsesRequest{
		Model:             req.Model,
		ParallelToolCalls: req.ParallelToolCalls,
		MaxOutputTokens:   req.MaxTokens,
		Temperature:       req.Temperature,
		TopP:              req.TopP,
		Stream:            req.Stream,
		Store:             &store,
		User:              req.User,
	}
	if req.MaxTokens != nil && *req.MaxTokens < minOutputTokens {
		n := int64(minOutputTokens)
		rr.MaxOutputTokens = &n
	}
	if req.System != "" {
		rr.Instructions = jsonString(req.System)
	}
	effort := req.ReasoningEffort
	if effort == "" && req.ThinkingBudget > 0 {
		effort = effortForBudget(req.ThinkingBudget)
	}
	if effort != "" {
		rr.Reasoning = &ResponsesReasoning{Effort: effort}
	}
	items := make([]any, 0, len(req.Messages)+2)
	signed := false
	for i, m := range req.Messages {
		var err error
		switch m.Role {
		case providers.RoleUser:
			var content json.RawMessage
			if content, err = encodeResponsesContent(m.Content, "input_text", true); err != nil {
				return nil, fmt.Errorf("message %d: %w", i, err)
			}
			items = append(items, responsesMessageItem{Type: "message", Role: "user", Content: content})
		case providers.RoleAssistant:
			var text []providers.Part
			flush := func() error {
				if len(text) == 0 {
					return nil
				}
				content, err := encodeResponsesContent(text, "output_text", false)
				if err != nil {
					return err
				}
				items = append(items, responsesMessageItem{Type: "message", Role: "assistant", Content: content})
				text = nil
				return nil
			}
			for _, p := range m.Content {
				if p.Type != providers.PartReasoning {
					text = append(text, p)
					continue
				}
				// A reasoning item is sent only with its encrypted_content, which must be
				// OpenAI's own (see providers.ReplaySignature).
				sig, ok := providers.ReplaySignature(providers.SigOpenAI, p.Signature)
				if !ok || sig == "" {
					continue
				}
				if err := flush(); err != nil {
					return nil, fmt.Errorf("message %d: %w", i, err)
				}
				signed = true
				ri := responsesReasoningItem{Type: "reasoning", Summary: []ResponsesSummaryPart{}, EncryptedContent: sig}
				if p.Text != "" {
					ri.Summary = append(ri.Summary, ResponsesSummaryPart{Type: "summary_text", Text: p.Text})
				}
				items = append(items, ri)
			}
			if err := flush(); err != nil {
				return nil, fmt.Errorf("message %d: %w", i, err)
			}
			for _, tc := range m.ToolCalls {
				items = append(items, responsesCallItem{Type: "function_call", CallID: tc.ID, Name: tc.Name, Arguments: orEmptyObject(tc.Arguments)})
			}
		case providers.RoleTool:
			var output json.RawMessage
			if output, err = encodeResponsesContent(m.Content, "input_text", true); err != nil {
				return nil, fmt.Errorf("message %d: %w", i, err)
			}
			items = append(items, responsesCallOutputItem{Type: "function_call_output", CallID: m.ToolCallID, Output: output})
		default:
			return nil, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
	}
	input, err := json.Marshal(items)
	if err != nil {
		return nil, err
	}
	rr.Input = input
	if signed || (effort != "" && effort != "none") {
		rr.Include = []string{"reasoning.encrypted_content"}
	}
	strict := false
	for _, t := range req.Tools {
		params := t.Parameters
		if len(params) == 0 {
			params = json.RawMessage("null") // a required key, nullable
		}
		rr.Tools = append(rr.Tools, ResponsesTool{Type: "function", Name: t.Name, Description: t.Description, Parameters: params, Strict: &strict})
	}
	switch req.ToolChoice {
	case "":
	case "auto", "none", "required":
		rr.ToolChoice = jsonString(req.ToolChoice)
	default:
		b, err := json.Marshal(struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}{"function", req.ToolChoice})
		if err != nil {
			return nil, err
		}
		rr.ToolChoice = b
	}
	switch req.ResponseFormat {
	case "":
	case "json_object":
		rr.Text = &ResponsesText{Format: &ResponsesTextFormat{Type: "json_object"}}
	case "json_schema":
		// The neutral model keeps only the schema; the API requires a name.
		rr.Text = &ResponsesText{Format: &ResponsesTextFormat{Type: "json_schema", Name: "response", Schema: req.JSONSchema}}
	default:
		return nil, fmt.Errorf("unsupported response format %q", req.ResponseFormat)
	}
	return json.Marshal(rr)
}

// encodeResponsesContent writes message content or a function call output: a plain string
// when it is a single text (or nothing), an array of parts otherwise, texts typed textType.
// Reasoning parts are dropped.
func encodeResponsesContent(parts []providers.Part, textType string, allowImages bool) (json.RawMessage, error) {
	parts = withoutReasoning(parts)
	if len(parts) == 0 {
		return jsonString(""), nil
	}
	if len(parts) == 1 && parts[0].Type == providers.PartText {
		return jsonString(parts[0].Text), nil
	}
	out := make([]responsesInputPart, 0, len(parts))
	for _, p := range parts {
		switch p.Type {
		case providers.PartText:
			part := responsesInputPart{Type: textType, Text: &p.Text}
			if textType == "output_text" {
				part.Annotations = &[]any{}
			}
			out = append(out, part)
		case providers.PartImage:
			if !allowImages {
				return nil, errors.New("image content is only allowed in user messages and tool results")
			}
			u := p.ImageURL
			if u == "" {
				if p.MediaType == "" || len(p.Data) == 0 {
					return nil, errors.New("image part has neither a URL nor data")
				}
				u = "data:" + p.MediaType + ";base64," + base64.StdEncoding.EncodeToString(p.Data)
			}
			// The schema lists detail as required.
			out = append(out, responsesInputPart{Type: "input_image", ImageURL: u, Detail: "auto"})
		default:
			return nil, fmt.Errorf("unsupported content part type %q", p.Type)
		}
	}
	return json.Marshal(out)
}

// DecodeResponsesResponse reads a response object into the neutral model: the output_text
// of every message item makes the text (a refusal when there is none), the summaries of the
// reasoning items (joined with a blank line; their reasoning_text content when there is no
// summary) the reasoning, the first encrypted_content the reasoning signature (tagged with
// providers.SigOpenAI, see providers.Tag), and each
// function_call item a tool call whose ID is its call_id. Other output items (hosted tools)
// are ignored. Status completed is a stop, or tool_calls when there are calls; incomplete
// maps incomplete_details.reason (content_filter, otherwise length). A failed response is
// an error wrapping ErrResponseFailed; an unfinished one (queued, in_progress) or a
// cancelled one is an error too.
func DecodeResponsesResponse(body []byte) (*providers.Response, error) {
	var r ResponsesResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("decoding responses response: %w", err)
	}
	if r.Object != "response" && r.Output == nil {
		return nil, errors.New("decoding responses response: not a response object")
	}
	if r.Status == "failed" {
		return nil, fmt.Errorf("%w: %s", ErrResponseFailed, responseErrorText(r.Error))
	}
	out, err := responseFromItems(r.Output)
	if err != nil {
		return nil, fmt.Errorf("decoding responses response: %w", err)
	}
	out.ID, out.Model = r.ID, r.Model
	if out.FinishReason, err = responsesFinish(r.Status, r.IncompleteDetails, len(out.ToolCalls) > 0); err != nil {
		return nil, fmt.Errorf("decoding responses response: %w", err)
	}
	if out.Usage, err = ParseResponsesUsage(r.Usage); err != nil {
		return nil, fmt.Errorf("decoding responses response: %w", err)
	}
	return out, nil
}

// responseFromItems reads output items into a neutral response without finish or usage.
func responseFromItems(items []ResponsesItem) (*providers.Response, error) {
	out := &providers.Response{}
	var text, refusal strings.Builder
	var reasoning []string
	for i, it := range items {
		switch it.Type {
		case "message":
			raw := bytes.TrimSpace(it.Content)
			if isNull(raw) {
				continue
			}
			if raw[0] == '"' {
				s, err := rawjson.UnmarshalString(raw)
				if err != nil {
					return nil, fmt.Errorf("output[%d].content: %w", i, err)
				}
				text.WriteString(s)
				continue
			}
			var parts []ResponsesContentPart
			if err := json.Unmarshal(raw, &parts); err != nil {
				return nil, fmt.Errorf("output[%d].content: %w", i, err)
			}
			for _, p := range parts {
				switch {
				case p.Type == "output_text" && p.Text != nil:
					text.WriteString(*p.Text)
				case p.Type == "refusal" && p.Refusal != nil:
					refusal.WriteString(*p.Refusal)
				}
			}
		case "reasoning":
			part, err := decodeReasoningItem(it)
			if err != nil {
				return nil, fmt.Errorf("output[%d].%w", i, err)
			}
			if part.Text != "" {
				reasoning = append(reasoning, part.Text)
			}
			if out.ReasoningSignature == "" {
				out.ReasoningSignature = providers.Tag(providers.SigOpenAI, part.Signature)
			}
		case "function_call":
			out.ToolCalls = append(out.ToolCalls, providers.ToolCall{ID: it.CallID, Name: it.Name, Arguments: string(it.Arguments)})
		}
	}
	out.Text = text.String()
	if out.Text == "" {
		out.Text = refusal.String()
	}
	out.Reasoning = strings.Join(reasoning, "\n\n")
	return out, nil
}

// responsesFinish maps a final status to the neutral finish reason.
func responsesFinish(status string, details *ResponsesIncompleteDetails, sawToolCall bool) (providers.FinishReason, error) {
	switch status {
	case "completed", "":
		if sawToolCall {
			return providers.FinishToolCalls, nil
		}
		return providers.FinishStop, nil
	case "incomplete":
		if details != nil && details.Reason == "content_filter" {
			return providers.FinishContentFilter, nil
		}
		return providers.FinishLength, nil
	}
	return "", fmt.Errorf("response status %q is not final", status)
}

// responseErrorText is the code and message of a response's error object, for messages.
func responseErrorText(raw json.RawMessage) string {
	var e struct {
		Code    looseString `json:"code"`
		Message looseString `json:"message"`
	}
	_ = json.Unmarshal(raw, &e)
	switch {
	case e.Code != "" && e.Message != "":
		return string(e.Code) + ": " + upstreamhttp.Truncate(string(e.Message), upstreamhttp.MaxMessage)
	case e.Message != "":
		return upstreamhttp.Truncate(string(e.Message), upstreamhttp.MaxMessage)
	case e.Code != "":
		return string(e.Code)
	}
	return "no error details"
}

// EncodeResponsesResponse writes a neutral response as a response object with the given id
// (resp.ID when empty), creation time in Unix seconds and model (resp.Model when empty). Its
// output is a reasoning item when there is reasoning (its text as one summary_text, the
// signature as encrypted_content), a message item with one output_text when there is text,
// and a function_call item per call. Status is completed, or incomplete for a length or
// content_filter finish, with incomplete_details.reason max_output_tokens or
// content_filter; the last item is then incomplete too. Request settings the neutral
// response does not carry are written as their defaults (tools [], tool_choice "auto",
// temperature and top_p null), and store is false: the gateway keeps nothing.
func EncodeResponsesResponse(resp *providers.Response, id string, createdAt int64, model string) ([]byte, error) {
	return AppendResponsesResponseWith(nil, resp, id, createdAt, model, providers.Additions{}), nil
}

// AppendResponsesResponseWith appends what EncodeResponsesResponse returns to dst, with add's
// members at the end of the usage object and of the response.
func AppendResponsesResponseWith(dst []byte, resp *providers.Response, id string, createdAt int64, model string, add providers.Additions) []byte {
	if id == "" {
		id = resp.ID
	}
	if model == "" {
		model = resp.Model
	}
	ids := newItemIDs(id)
	var items []*outputItem
	if resp.Reasoning != "" || resp.ReasoningSignature != "" {
		it := ids.item(itemReasoning, len(items))
		it.text.WriteString(resp.Reasoning)
		it.signature = resp.ReasoningSignature
		items = append(items, it)
	}
	if resp.Text != "" {
		it := ids.item(itemMessage, len(items))
		it.text.WriteString(resp.Text)
		items = append(items, it)
	}
	for i, tc := range resp.ToolCalls {
		it := ids.item(itemCall, len(items))
		it.callID = tc.ID
		if it.callID == "" {
			it.callID = ids.callID(i)
		}
		it.name = tc.Name
		it.args = append(it.args, tc.Arguments...)
		items = append(items, it)
	}
	status, reason := responsesStatus(resp.FinishReason)
	for _, it := range items {
		it.status = "completed"
	}
	if status == "incomplete" && len(items) > 0 {
		items[len(items)-1].status = "incomplete"
	}
	u := resp.Usage
	return appendResponse(dst, id, createdAt, model, status, reason, items, &u, add)
}

// responsesStatus maps a neutral finish reason to a response status and incomplete reason.
func responsesStatus(reason providers.FinishReason) (status, incomplete string) {
	switch reason {
	case providers.FinishLength:
		return "incomplete", "max_output_tokens"
	case providers.FinishContentFilter:
		return "incomplete", "content_filter"
	}
	return "completed", ""
}

// ParseResponsesUsage reads a ResponseUsage object into the five disjoint neutral counters
// (translation map §2.2): cached and cache-write tokens come out of input_tokens, reasoning
// tokens out of output_tokens. Null or absent fields count 0, and no counter is ever
// negative. Empty input or null is zero usage.
func ParseResponsesUsage(raw []byte) (providers.Usage, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return providers.Usage{}, nil
	}
	var u ResponsesUsage
	if err := json.Unmarshal(raw, &u); err != nil {
		return providers.Usage{}, fmt.Errorf("decoding responses usage: %w", err)
	}
	input, output := nonNegative(u.InputTokens), nonNegative(u.OutputTokens)
	var cacheRead, cacheWrite, reasoning int64
	if d := u.InputTokensDetails; d != nil {
		cacheRead, cacheWrite = nonNegative(d.CachedTokens), nonNegative(d.CacheWriteTokens)
	}
	if d := u.OutputTokensDetails; d != nil {
		reasoning = nonNegative(d.ReasoningTokens)
	}
	return providers.Usage{
		Input:      max(input-cacheRead-cacheWrite, 0),
		CacheRead:  cacheRead,
		CacheWrite: cacheWrite,
		Output:     max(output-reasoning, 0),
		Reasoning:  reasoning,
	}, nil
}

// AppendResponsesUsage appends neutral usage as a ResponseUsage object (translation map
// §2.3): input_tokens is the whole prompt, output_tokens the whole completion.
func AppendResponsesUsage(b []byte, u providers.Usage) []byte {
	b = append(b, `{"input_tokens":`...)
	b = strconv.AppendInt(b, u.PromptTokens(), 10)
	b = append(b, `,"input_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, u.CacheRead, 10)
	b = append(b, `,"cache_write_tokens":`...)
	b = strconv.AppendInt(b, u.CacheWrite, 10)
	b = append(b, `},"output_tokens":`...)
	b = strconv.AppendInt(b, u.CompletionTokens(), 10)
	b = append(b, `,"output_tokens_details":{"reasoning_tokens":`...)
	b = strconv.AppendInt(b, u.Reasoning, 10)
	b = append(b, `},"total_tokens":`...)
	b = strconv.AppendInt(b, u.Total(), 10)
	return append(b, '}')
}

// itemKind is the kind of an output item the gateway writes.
type itemKind int

const (
	itemMessage itemKind = iota + 1
	itemReasoning
	itemCall
)

// outputItem is an output item being written, by EncodeResponsesResponse and the stream
// encoder alike, so that both write the same objects.
type outputItem struct {
	kind      itemKind
	index     int // output_index
	id        string
	text      strings.Builder // message text, or reasoning summary
	signature string          // reasoning encrypted_content
	callID    string
	name      string
	args      []byte
	status    string // in_progress, completed or incomplete
	// Stream state.
	partOpen bool // the content part (message) or summary part (reasoning) was added
	done     bool
}

// itemIDs makes the ids of a response's items from the response id: msg_, rs_ and fc_
// followed by the response id's suffix and the output index, unique within the response
// and as unique across responses as the response ids are.
type itemIDs struct{ suffix string }

func newItemIDs(responseID string) itemIDs {
	s := strings.TrimPrefix(responseID, "resp_")
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s) && len(b) < 48; i++ {
		if c := s[i]; c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b = append(b, c)
		}
	}
	if len(b) == 0 {
		b = append(b, '0')
	}
	return itemIDs{suffix: string(b)}
}

func (ids itemIDs) item(kind itemKind, index int) *outputItem {
	prefix := "msg_"
	switch kind {
	case itemReasoning:
		prefix = "rs_"
	case itemCall:
		prefix = "fc_"
	}
	return &outputItem{kind: kind, index: index, id: prefix + ids.suffix + "_" + strconv.Itoa(index), status: "in_progress"}
}

// callID is the call_id given to a call that came without one.
func (ids itemIDs) callID(n int) string { return "call_" + ids.suffix + "_" + strconv.Itoa(n) }

// appendItem appends the item object as output_item.added (in progress, empty content)
// or output_item.done and the final response (complete) show it.
func appendItem(b []byte, it *outputItem, complete bool) []byte {
	status := it.status
	if !complete {
		status = "in_progress"
	}
	b = append(b, `{"id":`...)
	b = rawjson.AppendString(b, it.id)
	switch it.kind {
	case itemMessage:
		b = append(b, `,"type":"message","status":`...)
		b = rawjson.AppendString(b, status)
		b = append(b, `,"role":"assistant","content":[`...)
		if complete {
			b = appendTextPart(b, it.text.String())
		}
		b = append(b, "]}"...)
	case itemReasoning:
		b = append(b, `,"type":"reasoning","summary":[`...)
		if complete && it.text.Len() > 0 {
			b = appendSummaryPart(b, it.text.String())
		}
		b = append(b, ']')
		if complete && it.signature != "" {
			b = append(b, `,"encrypted_content":`...)
			b = rawjson.AppendString(b, providers.NativeSignature(providers.SigOpenAI, it.signature))
		}
		b = append(b, '}')
	case itemCall:
		b = append(b, `,"type":"function_call","status":`...)
		b = rawjson.AppendString(b, status)
		b = append(b, `,"call_id":`...)
		b = rawjson.AppendString(b, it.callID)
		b = append(b, `,"name":`...)
		b = rawjson.AppendString(b, it.name)
		b = append(b, `,"arguments":`...)
		if complete {
			b = rawjson.AppendString(b, string(it.args))
		} else {
			b = append(b, `""`...)
		}
		b = append(b, '}')
	}
	return b
}

func appendTextPart(b []byte, text string) []byte {
	b = append(b, `{"type":"output_text","text":`...)
	b = rawjson.AppendString(b, text)
	return append(b, `,"annotations":[],"logprobs":[]}`...)
}

func appendSummaryPart(b []byte, text string) []byte {
	b = append(b, `{"type":"summary_text","text":`...)
	b = rawjson.AppendString(b, text)
	return append(b, '}')
}

// appendResponse appends a response object. u nil writes usage null (a response in
// progress), and then add.Usage is left out; incomplete is the incomplete_details.reason,
// empty for none.
func appendResponse(b []byte, id string, createdAt int64, model, status, incomplete string, items []*outputItem, u *providers.Usage, add providers.Additions) []byte {
	b = append(b, `{"id":`...)
	b = rawjson.AppendString(b, id)
	b = append(b, `,"object":"response","created_at":`...)
	b = strconv.AppendInt(b, createdAt, 10)
	b = append(b, `,"status":`...)
	b = rawjson.AppendString(b, status)
	b = append(b, `,"background":false,"error":null,"incomplete_details":`...)
	if incomplete != "" {
		b = append(b, `{"reason":`...)
		b = rawjson.AppendString(b, incomplete)
		b = append(b, '}')
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"instructions":null,"max_output_tokens":null,"metadata":{},"model":`...)
	b = rawjson.AppendString(b, model)
	b = append(b, `,"output":[`...)
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendItem(b, it, true)
	}
	b = append(b, `],"parallel_tool_calls":true,"previous_response_id":null,"store":false,"temperature":null,"tool_choice":"auto","tools":[],"top_p":null,"truncation":"disabled","usage":`...)
	if u != nil {
		// Into the usage object, which ends b (AppendResponsesUsage writes one).
		b, _ = rawjson.AppendMembersInto(AppendResponsesUsage(b, *u), add.Usage)
	} else {
		b = append(b, "null"...)
	}
	return append(rawjson.AppendMembers(b, add.Top), '}')
}
