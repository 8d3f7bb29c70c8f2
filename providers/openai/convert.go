package openai

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelgateway/caddy-modelgateway/internal/bufs"
	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/providers"
)

// DecodeChatRequest reads a chat completions request body into the neutral model, for the
// gateway's chat surface. System and developer messages become Request.System, joined with
// a blank line; their position in the conversation is lost. Fields the neutral model has no
// place for (n, seed, logprobs, penalties...) are ignored. The model is not required here:
// the caller checks Request.Model.
//
// Any error is the client's: a body that is not JSON (a *json.SyntaxError is wrapped), a
// field of the wrong type, an unknown role, or content the neutral model cannot carry
// (audio, files).
func DecodeChatRequest(body []byte) (*providers.Request, error) {
	var cr ChatRequest
	if !cr.fastDecode(body) {
		// The fast path (fastdecode.go) takes the usual bodies and leaves the rest, errors
		// included, to json.Unmarshal, from a zero struct: it may have filled part of cr
		// (UnmarshalFresh, which keeps cr on the stack).
		if err := rawjson.UnmarshalFresh(body, &cr); err != nil {
			return nil, fmt.Errorf("decoding chat request: %w", err)
		}
	}
	if len(cr.Messages) == 0 {
		return nil, errors.New("messages: at least one message is required")
	}
	req := &providers.Request{
		Model:             cr.Model,
		ParallelToolCalls: cr.ParallelToolCalls,
		MaxTokens:         cr.MaxCompletionTokens,
		Temperature:       cr.Temperature,
		TopP:              cr.TopP,
		Stop:              cr.Stop,
		Stream:            cr.Stream,
		ReasoningEffort:   cr.ReasoningEffort,
		User:              cr.User,
	}
	if req.MaxTokens == nil {
		req.MaxTokens = cr.MaxTokens
	}
	if req.User == "" {
		req.User = cr.SafetyIdentifier
	}
	var system []string
	req.Messages = make([]providers.Message, 0, len(cr.Messages))
	for i, m := range cr.Messages {
		switch m.Role {
		case "system", "developer":
			parts, err := decodeContent(m.Content, m.Role)
			if err != nil {
				return nil, fmt.Errorf("messages[%d].%w", i, err)
			}
			for _, p := range parts {
				system = append(system, p.Text)
			}
		case "user", "assistant", "tool":
			msg, err := decodeMessage(m)
			if err != nil {
				return nil, fmt.Errorf("messages[%d]%w", i, err)
			}
			req.Messages = append(req.Messages, msg)
		case "":
			return nil, fmt.Errorf("messages[%d].role: required", i)
		default:
			return nil, fmt.Errorf("messages[%d].role: unknown role %q", i, m.Role)
		}
	}
	req.System = strings.Join(system, "\n\n")
	for i, t := range cr.Tools {
		if t.Type != "" && t.Type != "function" {
			return nil, fmt.Errorf("tools[%d].type: unsupported tool type %q", i, t.Type)
		}
		if t.Function.Name == "" {
			return nil, fmt.Errorf("tools[%d].function.name: required", i)
		}
		tool := providers.Tool{Name: t.Function.Name, Description: t.Function.Description}
		if !isNull(t.Function.Parameters) {
			tool.Parameters = t.Function.Parameters
		}
		req.Tools = append(req.Tools, tool)
	}
	var err error
	if req.ToolChoice, err = decodeToolChoice(cr.ToolChoice, "tool_choice.function.name"); err != nil {
		return nil, err
	}
	if rf := cr.ResponseFormat; rf != nil {
		switch rf.Type {
		case "", "text":
		case "json_object":
			req.ResponseFormat = "json_object"
		case "json_schema":
			req.ResponseFormat = "json_schema"
			if rf.JSONSchema != nil && !isNull(rf.JSONSchema.Schema) {
				req.JSONSchema = rf.JSONSchema.Schema
			}
		default:
			return nil, fmt.Errorf("response_format.type: unsupported type %q", rf.Type)
		}
	}
	return req, nil
}

// decodeMessage reads a user, assistant or tool message. Errors start with the field path
// after messages[i].
func decodeMessage(m ChatMessage) (providers.Message, error) {
	msg := providers.Message{Role: providers.Role(m.Role), Name: m.Name}
	var err error
	if msg.Content, err = decodeContent(m.Content, m.Role); err != nil {
		return msg, fmt.Errorf(".%w", err)
	}
	switch m.Role {
	case "assistant":
		for j, tc := range m.ToolCalls {
			if tc.Type != "" && tc.Type != "function" {
				return msg, fmt.Errorf(".tool_calls[%d].type: unsupported type %q", j, tc.Type)
			}
			if tc.Function.Name == "" {
				return msg, fmt.Errorf(".tool_calls[%d].function.name: required", j)
			}
			msg.ToolCalls = append(msg.ToolCalls, providers.ToolCall{
				ID:        tc.ID,
				Name:      tc.Function.Name,
				Arguments: string(tc.Function.Arguments),
			})
		}
	case "tool":
		if m.ToolCallID == "" {
			return msg, errors.New(".tool_call_id: required for role tool")
		}
		msg.ToolCallID = m.ToolCallID
	}
	return msg, nil
}

// decodeContent reads a content field: a string, an array of parts or null. Empty texts are
// dropped, so that no writer ever has to send an empty text block. Images are allowed in
// user messages only, as in the API; refusal parts of assistant messages are kept as text.
func decodeContent(raw json.RawMessage, role string) ([]providers.Part, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return nil, nil
	}
	switch raw[0] {
	case '"':
		// The request was decoded whole, so raw is a well-formed string.
		s, ok := rawjson.String(raw)
		if !ok {
			return nil, errors.New("content: not a string")
		}
		if s == "" {
			return nil, nil
		}
		return []providers.Part{{Type: providers.PartText, Text: s}}, nil
	case '[':
		var parts []ContentPart
		if err := json.Unmarshal(raw, &parts); err != nil {
			return nil, fmt.Errorf("content: %w", err)
		}
		out := make([]providers.Part, 0, len(parts))
		for j, p := range parts {
			switch {
			case p.Type == "text":
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
			case p.Type == "image_url" && role == "user":
				if p.ImageURL == nil || p.ImageURL.URL == "" {
					return nil, fmt.Errorf("content[%d].image_url.url: required", j)
				}
				part, err := DecodeImageURL(p.ImageURL.URL)
				if err != nil {
					return nil, fmt.Errorf("content[%d].image_url.url: %w", j, err)
				}
				out = append(out, part)
			case p.Type == "":
				return nil, fmt.Errorf("content[%d].type: required", j)
			default:
				return nil, fmt.Errorf("content[%d].type: part type %q is not supported in %s messages", j, p.Type, role)
			}
		}
		return out, nil
	default:
		return nil, errors.New("content: must be a string, an array of content parts or null")
	}
}

// DecodeImageURL reads an image_url.url: an http(s) URL, or a data URL parsed strictly as
// data:<media type>;base64,<payload>.
func DecodeImageURL(u string) (providers.Part, error) {
	if len(u) > 5 && strings.EqualFold(u[:5], "data:") {
		meta, payload, ok := strings.Cut(u[5:], ",")
		mediaType, isBase64 := strings.CutSuffix(meta, ";base64")
		if !ok || !isBase64 || mediaType == "" || strings.ContainsAny(mediaType, ";, ") {
			return providers.Part{}, errors.New("data URL must be data:<media type>;base64,<data>")
		}
		data, err := base64.StdEncoding.DecodeString(payload)
		if err != nil {
			// Unpadded base64 is common enough in the wild to accept.
			if data, err = base64.RawStdEncoding.DecodeString(payload); err != nil {
				return providers.Part{}, errors.New("data URL payload is not valid base64")
			}
		}
		if len(data) == 0 {
			return providers.Part{}, errors.New("data URL has no data")
		}
		return providers.Part{Type: providers.PartImage, MediaType: strings.ToLower(mediaType), Data: data}, nil
	}
	lower := strings.ToLower(u)
	if !strings.HasPrefix(lower, "https://") && !strings.HasPrefix(lower, "http://") {
		return providers.Part{}, errors.New("must be an http(s) URL or a data URL")
	}
	return providers.Part{Type: providers.PartImage, ImageURL: u}, nil
}

// decodeToolChoice reads tool_choice: "auto", "none", "required", or a named function in
// either API's shape: chat's {"type":"function","function":{"name"}} or Responses'
// {"type":"function","name"}. namePath names the missing name in errors. allowed_tools and
// hosted tool choices are refused.
func decodeToolChoice(raw json.RawMessage, namePath string) (string, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return "", nil
	}
	if raw[0] == '"' {
		s, err := rawjson.UnmarshalString(raw)
		if err != nil {
			return "", fmt.Errorf("tool_choice: %w", err)
		}
		switch s {
		case "auto", "none", "required":
			return s, nil
		}
		return "", fmt.Errorf("tool_choice: unknown value %q", s)
	}
	var obj struct {
		Type     string `json:"type"`
		Name     string `json:"name"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", fmt.Errorf("tool_choice: must be a string or an object: %w", err)
	}
	if obj.Type != "function" {
		return "", fmt.Errorf("tool_choice.type: unsupported type %q", obj.Type)
	}
	if obj.Name == "" {
		obj.Name = obj.Function.Name
	}
	if obj.Name == "" {
		return "", errors.New(namePath + ": required")
	}
	return obj.Name, nil
}

// EncodeChatRequest writes the neutral request as a chat completions body. The output
// limit goes in max_tokens, which every OpenAI-compatible server reads; OpenAI's reasoning
// models reject it and need max_completion_tokens, which Config.MaxTokensField selects for
// the adapter's own calls. A streaming request asks for the usage chunk
// (stream_options.include_usage). Images in tool results, which the format does not allow,
// move to a user message right after the tool message. Reasoning parts and TopK have no
// place in the format and are dropped; a ThinkingBudget without ReasoningEffort becomes an
// effort (≤2048 low, ≤8192 medium, above high).
func EncodeChatRequest(req *providers.Request) ([]byte, error) {
	return encodeChatRequest(req, false)
}

func encodeChatRequest(req *providers.Request, maxCompletionTokens bool) ([]byte, error) {
	cr := ChatRequest{
		Model:             req.Model,
		ParallelToolCalls: req.ParallelToolCalls,
		Temperature:       req.Temperature,
		TopP:              req.TopP,
		Stop:              req.Stop,
		Stream:            req.Stream,
		ReasoningEffort:   req.ReasoningEffort,
		User:              req.User,
	}
	if maxCompletionTokens {
		cr.MaxCompletionTokens = req.MaxTokens
	} else {
		cr.MaxTokens = req.MaxTokens
	}
	if req.Stream {
		cr.StreamOptions = &StreamOptions{IncludeUsage: true}
	}
	if cr.ReasoningEffort == "" && req.ThinkingBudget > 0 {
		cr.ReasoningEffort = effortForBudget(req.ThinkingBudget)
	}
	cr.Messages = make([]ChatMessage, 0, len(req.Messages)+1)
	if req.System != "" {
		cr.Messages = append(cr.Messages, ChatMessage{Role: "system", Content: jsonString(req.System)})
	}
	for i, m := range req.Messages {
		var err error
		switch m.Role {
		case providers.RoleUser:
			msg := ChatMessage{Role: "user", Name: m.Name}
			if msg.Content, err = encodeContent(m.Content, true); err != nil {
				return nil, fmt.Errorf("message %d: %w", i, err)
			}
			cr.Messages = append(cr.Messages, msg)
		case providers.RoleAssistant:
			msg := ChatMessage{Role: "assistant", Name: m.Name}
			if len(m.Content) > 0 || len(m.ToolCalls) == 0 {
				if msg.Content, err = encodeContent(m.Content, false); err != nil {
					return nil, fmt.Errorf("message %d: %w", i, err)
				}
			}
			for _, tc := range m.ToolCalls {
				msg.ToolCalls = append(msg.ToolCalls, ChatToolCall{
					ID:       tc.ID,
					Type:     "function",
					Function: ChatFunctionCall{Name: tc.Name, Arguments: Arguments(orEmptyObject(tc.Arguments))},
				})
			}
			cr.Messages = append(cr.Messages, msg)
		case providers.RoleTool:
			var text, images []providers.Part
			for _, p := range m.Content {
				if p.Type == providers.PartImage {
					images = append(images, p)
				} else {
					text = append(text, p)
				}
			}
			msg := ChatMessage{Role: "tool", ToolCallID: m.ToolCallID}
			if msg.Content, err = encodeContent(text, false); err != nil {
				return nil, fmt.Errorf("message %d: %w", i, err)
			}
			cr.Messages = append(cr.Messages, msg)
			if len(images) > 0 {
				content, err := encodeContent(images, true)
				if err != nil {
					return nil, fmt.Errorf("message %d: %w", i, err)
				}
				cr.Messages = append(cr.Messages, ChatMessage{Role: "user", Content: content})
			}
		default:
			return nil, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
	}
	for _, t := range req.Tools {
		cr.Tools = append(cr.Tools, ChatTool{
			Type:     "function",
			Function: ChatFunction{Name: t.Name, Description: t.Description, Parameters: t.Parameters},
		})
	}
	switch req.ToolChoice {
	case "":
	case "auto", "none", "required":
		cr.ToolChoice = jsonString(req.ToolChoice)
	default:
		cr.ToolChoice = appendNamedToolChoice(make([]byte, 0, len(req.ToolChoice)+48), req.ToolChoice)
	}
	switch req.ResponseFormat {
	case "":
	case "json_object":
		cr.ResponseFormat = &ResponseFormat{Type: "json_object"}
	case "json_schema":
		// The neutral model keeps only the schema; the API requires a name.
		cr.ResponseFormat = &ResponseFormat{Type: "json_schema", JSONSchema: &JSONSchema{Name: "response", Schema: req.JSONSchema}}
	default:
		return nil, fmt.Errorf("unsupported response format %q", req.ResponseFormat)
	}
	if b, ok := appendChatRequest(make([]byte, 0, chatRequestSize(&cr)), &cr); ok {
		return b, nil
	}
	// The fast path refuses what json.Marshal fails on (a NaN temperature, a schema that
	// is not JSON): its error is the one to return.
	return json.Marshal(cr)
}

// effortForBudget maps an explicit reasoning budget (Anthropic, Gemini) to an effort
// (translation map §3.9).
func effortForBudget(budget int64) string {
	switch {
	case budget <= 2048:
		return "low"
	case budget <= 8192:
		return "medium"
	}
	return "high"
}

// encodeContent writes message content: a plain string when it is a single text (or
// nothing), an array of parts otherwise. Reasoning parts are dropped: the format has no
// place for them, and another provider's reasoning must not be replayed as text.
func encodeContent(parts []providers.Part, allowImages bool) (json.RawMessage, error) {
	parts = withoutReasoning(parts)
	if len(parts) == 0 {
		return jsonString(""), nil
	}
	if len(parts) == 1 && parts[0].Type == providers.PartText {
		return jsonString(parts[0].Text), nil
	}
	out := make([]ContentPart, 0, len(parts))
	for _, p := range parts {
		switch p.Type {
		case providers.PartText:
			out = append(out, ContentPart{Type: "text", Text: &p.Text})
		case providers.PartImage:
			if !allowImages {
				return nil, errors.New("image content is only allowed in user messages")
			}
			u := p.ImageURL
			if u == "" {
				if p.MediaType == "" || len(p.Data) == 0 {
					return nil, errors.New("image part has neither a URL nor data")
				}
				u = "data:" + p.MediaType + ";base64," + base64.StdEncoding.EncodeToString(p.Data)
			}
			out = append(out, ContentPart{Type: "image_url", ImageURL: &ImageURL{URL: u}})
		default:
			return nil, fmt.Errorf("unsupported content part type %q", p.Type)
		}
	}
	if b, ok := appendContentParts(make([]byte, 0, contentPartsSize(out)), out); ok {
		return b, nil
	}
	return json.Marshal(out) // not reached today: nothing in a ContentPart can fail to encode
}

func withoutReasoning(parts []providers.Part) []providers.Part {
	for i, p := range parts {
		if p.Type != providers.PartReasoning {
			continue
		}
		// Copy only when there is something to drop.
		out := append(make([]providers.Part, 0, len(parts)-1), parts[:i]...)
		for _, q := range parts[i+1:] {
			if q.Type != providers.PartReasoning {
				out = append(out, q)
			}
		}
		return out
	}
	return parts
}

// DecodeChatResponse reads a chat.completion body into the neutral model. Only the first
// choice is read. A refusal becomes the text when there is no content. The reasoning text
// of compatible servers (reasoning_content, reasoning) becomes Response.Reasoning. A "stop" with tool
// calls becomes "tool_calls", since some compatible servers say "stop" there and agent loops
// stop on it.
func DecodeChatResponse(body []byte) (*providers.Response, error) {
	var cr ChatResponse
	if !cr.fastDecode(body) {
		// As in DecodeChatRequest.
		if err := rawjson.UnmarshalFresh(body, &cr); err != nil {
			return nil, fmt.Errorf("decoding chat response: %w", err)
		}
	}
	if len(cr.Choices) == 0 {
		return nil, errors.New("decoding chat response: no choices")
	}
	ch := cr.Choices[0]
	text, err := contentText(ch.Message.Content)
	if err != nil {
		return nil, fmt.Errorf("decoding chat response: %w", err)
	}
	if text == "" && ch.Message.Refusal != nil {
		text = *ch.Message.Refusal
	}
	resp := &providers.Response{ID: cr.ID, Model: cr.Model, Text: text,
		Reasoning: reasoningText(ch.Message.ReasoningContent, ch.Message.Reasoning)}
	for _, tc := range ch.Message.ToolCalls {
		resp.ToolCalls = append(resp.ToolCalls, providers.ToolCall{
			ID:        tc.ID,
			Name:      tc.Function.Name,
			Arguments: string(tc.Function.Arguments),
		})
	}
	finish := ""
	if ch.FinishReason != nil {
		finish = *ch.FinishReason
	}
	resp.FinishReason = finishReason(finish, len(resp.ToolCalls) > 0)
	if cr.Usage != nil {
		resp.Usage = usageFromChat(cr.Usage)
	}
	return resp, nil
}

// contentText reads a response content: a string, null, or (Mistral's reasoning models) an
// array of parts whose "text" parts make the answer; thinking parts are dropped, never
// inlined into the answer.
func contentText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return "", nil
	}
	switch raw[0] {
	case '"':
		return rawjson.UnmarshalString(raw)
	case '[':
		var parts []ContentPart
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", err
		}
		var b strings.Builder
		for _, p := range parts {
			if p.Type == "text" && p.Text != nil {
				b.WriteString(*p.Text)
			}
		}
		return b.String(), nil
	default:
		return "", errors.New("content must be a string, an array or null")
	}
}

// reasoningText reads the first of the reasoning fields that is a non-empty string; other
// shapes (OpenRouter's reasoning_details objects) are ignored.
func reasoningText(fields ...json.RawMessage) string {
	for _, raw := range fields {
		if len(raw) > 0 && raw[0] == '"' {
			// A reasoning model's stream reads one of these per chunk.
			if s, err := rawjson.UnmarshalString(raw); err == nil && s != "" {
				return s
			}
		}
	}
	return ""
}

// finishReason maps a chat finish_reason to the neutral one. Unknown values of compatible
// servers ("eos", "end_turn"...) mean a normal stop.
func finishReason(s string, sawToolCall bool) providers.FinishReason {
	switch s {
	case "length", "max_tokens":
		return providers.FinishLength
	case "tool_calls", "function_call":
		return providers.FinishToolCalls
	case "content_filter":
		return providers.FinishContentFilter
	}
	if sawToolCall {
		return providers.FinishToolCalls
	}
	return providers.FinishStop
}

// EncodeChatResponse writes a neutral response as a chat.completion object with the given
// id (resp.ID when empty) and creation time in Unix seconds.
func EncodeChatResponse(resp *providers.Response, id string, created int64) ([]byte, error) {
	return AppendChatResponse(nil, resp, id, created)
}

// AppendChatResponse appends what EncodeChatResponse returns to dst, so that a caller can
// encode into a buffer it reuses.
func AppendChatResponse(dst []byte, resp *providers.Response, id string, created int64) ([]byte, error) {
	b, _, err := AppendChatResponseWith(dst, resp, id, created, providers.Additions{})
	return b, err
}

// AppendChatResponseWith is AppendChatResponse with add's members at the end of the usage
// object and of the answer; added reports whether they are there (false only for an answer
// the fast encoder cannot write, which is then written without them).
func AppendChatResponseWith(dst []byte, resp *providers.Response, id string, created int64, add providers.Additions) (b []byte, added bool, err error) {
	var room chatResponseRoom
	room.fill(resp, id, created, add)
	// link's assignments, made on the local itself: through a pointer, even inlined, they
	// sent the room to the heap.
	room.usage.PromptTokensDetails, room.usage.CompletionTokensDetails = &room.prompt, &room.completion
	room.choice[0].FinishReason = &room.finish
	room.cr.Choices, room.cr.Usage = room.choice[:], &room.usage
	cr := &room.cr
	if b, ok := appendChatResponse(bufs.Grow(dst, chatResponseSize(cr)), cr); ok {
		return b, true, nil
	}
	m, err := marshalChatResponse(resp, id, created, add)
	return append(dst, m...), false, err
}

// marshalChatResponse is json.Marshal of the answer AppendChatResponseWith writes, for what
// its fast encoder refuses, from a room of its own: handing the fast path's to json.Marshal
// sent it to the heap on every call, its answer, usage and finish reason five allocations.
func marshalChatResponse(resp *providers.Response, id string, created int64, add providers.Additions) ([]byte, error) {
	room := new(chatResponseRoom)
	room.fill(resp, id, created, add)
	return json.Marshal(room.link())
}

// chatResponseRoom holds a chat answer and what it points to, so that it can live on its
// writer's stack: fill writes the values, and link the pointers between them
// (AppendChatResponseWith makes link's assignments on its local room itself: a function
// that stores the room's own addresses in it sends the room to the heap).
type chatResponseRoom struct {
	cr         ChatResponse
	choice     [1]ChatChoice
	finish     string
	usage      ChatUsage
	prompt     PromptTokensDetails
	completion CompletionTokensDetails
}

// fill makes the room the chat answer for resp, but for its pointers (link): id (resp's own
// when empty), created, and add's members at the end of the usage object and of the answer.
func (r *chatResponseRoom) fill(resp *providers.Response, id string, created int64, add providers.Additions) {
	if id == "" {
		id = resp.ID
	}
	msg := ChatResponseMessage{Role: "assistant"}
	if resp.Text != "" || len(resp.ToolCalls) == 0 {
		msg.Content = jsonString(resp.Text)
	}
	for _, tc := range resp.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, ChatToolCall{
			ID:       tc.ID,
			Type:     "function",
			Function: ChatFunctionCall{Name: tc.Name, Arguments: Arguments(orEmptyObject(tc.Arguments))},
		})
	}
	r.finish = string(resp.FinishReason)
	if r.finish == "" {
		r.finish = string(finishReason("", len(resp.ToolCalls) > 0))
	}
	// Neutral usage with the chat names (translation map §2.3).
	u := resp.Usage
	r.prompt = PromptTokensDetails{CachedTokens: TokenCount(u.CacheRead), CacheWriteTokens: TokenCount(u.CacheWrite)}
	r.completion = CompletionTokensDetails{ReasoningTokens: TokenCount(u.Reasoning)}
	r.usage = ChatUsage{
		PromptTokens:     TokenCount(u.PromptTokens()),
		CompletionTokens: TokenCount(u.CompletionTokens()),
		TotalTokens:      TokenCount(u.Total()),
	}
	r.choice[0] = ChatChoice{Index: 0, Message: msg}
	r.cr = ChatResponse{ID: id, Object: "chat.completion", Created: created, Model: resp.Model, add: add}
}

// link points the answer fill wrote at its choice, finish reason and usage, and returns it.
func (r *chatResponseRoom) link() *ChatResponse {
	r.usage.PromptTokensDetails, r.usage.CompletionTokensDetails = &r.prompt, &r.completion
	r.choice[0].FinishReason = &r.finish
	r.cr.Choices, r.cr.Usage = r.choice[:], &r.usage
	return &r.cr
}

// ParseChatUsage reads a chat usage object into the five disjoint neutral counters
// (translation map §2.2): cached and cache-write tokens come out of prompt_tokens, reasoning
// tokens out of completion_tokens. Null or absent fields count 0, and no counter is ever
// negative. Empty input or null is zero usage.
func ParseChatUsage(usage []byte) (providers.Usage, error) {
	usage = bytes.TrimSpace(usage)
	if isNull(usage) {
		return providers.Usage{}, nil
	}
	var u ChatUsage
	if !validJSON(usage) || !u.fastDecode(usage) {
		// The fast decoder (fastdecode.go) reads the usual objects, encoding/json the rest.
		if err := rawjson.UnmarshalFresh(usage, &u); err != nil {
			return providers.Usage{}, fmt.Errorf("decoding chat usage: %w", err)
		}
	}
	return usageFromChat(&u), nil
}

func usageFromChat(u *ChatUsage) providers.Usage {
	prompt := nonNegative(u.PromptTokens)
	completion := nonNegative(u.CompletionTokens)
	var cacheRead, cacheWrite, reasoning int64
	if d := u.PromptTokensDetails; d != nil {
		cacheRead = nonNegative(d.CachedTokens)
		cacheWrite = nonNegative(d.CacheWriteTokens)
	}
	if cacheRead == 0 && u.PromptCacheHitTokens != nil {
		cacheRead = nonNegative(*u.PromptCacheHitTokens)
	}
	if d := u.CompletionTokensDetails; d != nil {
		reasoning = nonNegative(d.ReasoningTokens)
	}
	return providers.Usage{
		Input:      max(prompt-cacheRead-cacheWrite, 0),
		CacheRead:  cacheRead,
		CacheWrite: cacheWrite,
		Output:     max(completion-reasoning, 0),
		Reasoning:  reasoning,
	}
}

func nonNegative(c TokenCount) int64 { return max(int64(c), 0) }

func isNull(raw []byte) bool { return len(raw) == 0 || string(raw) == "null" }

// jsonString is s quoted as json.Marshal quotes it, in a buffer with room for its escapes
// (quotedRoom): sized to s alone, a model's answer with new lines in it grew its buffer once
// more, to about twice its size.
func jsonString(s string) json.RawMessage {
	return rawjson.AppendStringLikeMarshal(make([]byte, 0, quotedRoom(len(s))), s)
}

// quotedRoom is the room n bytes of usual text take quoted: the quotes, and an escape every
// 16 bytes or so (prose has a new line every 60-80 bytes and a few quotes; code more).
func quotedRoom(n int) int { return n + n/16 + 8 }

// orEmptyObject keeps a call's arguments valid JSON for clients that parse them.
func orEmptyObject(args string) string {
	if strings.TrimSpace(args) == "" {
		return "{}"
	}
	return args
}
