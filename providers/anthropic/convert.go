package anthropic

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/modelgateway/caddy-modelgateway/internal/bufs"
	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/providers"
)

// DefaultMaxTokens is the max_tokens sent when the neutral request has none: the API
// requires the field. Config.DefaultMaxTokens overrides it per provider.
const DefaultMaxTokens = 4096

// Thinking budgets that stand for a reasoning effort when the request has no explicit
// ThinkingBudget (translation map §3.9). "" and "minimal" mean no thinking. 1024 is the
// API's minimum budget.
const (
	BudgetLow    = 1024
	BudgetMedium = 4096
	BudgetHigh   = 16384
)

// minThinkingBudget is the smallest budget_tokens the API accepts.
const minThinkingBudget = 1024

// minThinkingTopP is the smallest top_p the API accepts with thinking on.
const minThinkingTopP = 0.95

// EffortBudget is the thinking budget that stands for a neutral reasoning effort: low 1024,
// medium 4096, high 16384 tokens; 0 (no thinking) for "", "minimal" and unknown values.
func EffortBudget(effort string) int64 {
	switch effort {
	case "low":
		return BudgetLow
	case "medium":
		return BudgetMedium
	case "high":
		return BudgetHigh
	}
	return 0
}

// unsupportedBlocks are block types of the Messages API that the neutral model has no place
// for: they are rejected with a clear error rather than dropped silently.
var unsupportedBlocks = map[string]bool{
	"document": true, "search_result": true, "server_tool_use": true, "container_upload": true,
	"web_search_tool_result": true, "web_fetch_tool_result": true, "code_execution_tool_result": true,
	"bash_code_execution_tool_result": true, "text_editor_code_execution_tool_result": true,
	"tool_search_tool_result": true, "mcp_tool_use": true, "mcp_tool_result": true, "tool_reference": true,
}

// DecodeRequest reads a Messages request body into the neutral model, for the gateway's
// messages surface.
//
//   - system (a string or text blocks, joined with a blank line) becomes Request.System;
//     cache_control markers are dropped.
//   - A user turn's tool_result blocks become RoleTool messages, in order, each named after
//     the tool_use it answers; the turn's other blocks stay in user messages around them. A
//     tool_result with is_error has its text wrapped as {"error":"<text>"}, which
//     EncodeRequest turns back into is_error (the neutral model has no error flag).
//   - thinking blocks become PartReasoning parts with their signature; redacted_thinking
//     blocks are dropped (the neutral model cannot carry them).
//   - thinking {type:enabled} sets ThinkingBudget; {type:adaptive} sets ReasoningEffort from
//     output_config.effort (xhigh and max become high), "medium" when absent. The effort is
//     ignored without thinking. output_config.format json_schema sets ResponseFormat.
//   - tool_choice any becomes "required", tool becomes the tool's name, and
//     disable_parallel_tool_use sets ParallelToolCalls to false.
//
// A missing max_tokens is accepted (MaxTokens nil). Any error is the client's: a body that is
// not JSON, a field of the wrong type, an unknown role, or a block the neutral model cannot
// carry (documents, server tools, files), named by its path ("messages[2].content[0]: ...").
func DecodeRequest(body []byte) (*providers.Request, error) {
	var mr MessagesRequest
	if !mr.fastDecode(body) {
		// A shape the fast path leaves to encoding/json, invalid input included.
		if err := rawjson.UnmarshalFresh(body, &mr); err != nil {
			return nil, fmt.Errorf("decoding messages request: %w", err)
		}
	}
	if len(mr.Messages) == 0 {
		return nil, errors.New("messages: at least one message is required")
	}
	req := &providers.Request{
		Model:       mr.Model,
		MaxTokens:   mr.MaxTokens,
		Temperature: mr.Temperature,
		TopP:        mr.TopP,
		TopK:        mr.TopK,
		Stop:        mr.StopSequences,
		Stream:      mr.Stream,
	}
	var err error
	if req.System, err = decodeSystem(mr.System); err != nil {
		return nil, err
	}
	names := make(map[string]string)
	req.Messages = make([]providers.Message, 0, len(mr.Messages))
	for i, m := range mr.Messages {
		msgs, err := decodeMessage(m, names)
		if err != nil {
			return nil, fmt.Errorf("messages[%d]%w", i, err)
		}
		req.Messages = append(req.Messages, msgs...)
	}
	for i, t := range mr.Tools {
		if t.Type != "" && t.Type != "custom" {
			return nil, fmt.Errorf("tools[%d].type: unsupported tool type %q", i, t.Type)
		}
		if t.Name == "" {
			return nil, fmt.Errorf("tools[%d].name: required", i)
		}
		req.Tools = append(req.Tools, providers.Tool{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
	}
	if tc := mr.ToolChoice; tc != nil {
		switch tc.Type {
		case "auto":
			req.ToolChoice = "auto"
		case "any":
			req.ToolChoice = "required"
		case "none":
			req.ToolChoice = "none"
		case "tool":
			if tc.Name == "" {
				return nil, errors.New("tool_choice.name: required when type is tool")
			}
			req.ToolChoice = tc.Name
		case "":
			return nil, errors.New("tool_choice.type: required")
		default:
			return nil, fmt.Errorf("tool_choice.type: unknown type %q", tc.Type)
		}
		if tc.DisableParallelToolUse != nil && *tc.DisableParallelToolUse {
			no := false
			req.ParallelToolCalls = &no
		}
	}
	effort := ""
	if oc := mr.OutputConfig; oc != nil {
		switch oc.Effort {
		case "":
		case "low", "medium", "high":
			effort = oc.Effort
		case "xhigh", "max":
			effort = "high"
		default:
			return nil, fmt.Errorf("output_config.effort: unknown value %q", oc.Effort)
		}
		if f := oc.Format; f != nil {
			if f.Type != "json_schema" {
				return nil, fmt.Errorf("output_config.format.type: unsupported type %q", f.Type)
			}
			req.ResponseFormat = "json_schema"
			if !isNull(f.Schema) {
				req.JSONSchema = f.Schema
			}
		}
	}
	if th := mr.Thinking; th != nil {
		switch th.Type {
		case "enabled":
			if th.BudgetTokens == nil {
				return nil, errors.New("thinking.budget_tokens: required when type is enabled")
			}
			if *th.BudgetTokens <= 0 {
				return nil, errors.New("thinking.budget_tokens: must be positive")
			}
			req.ThinkingBudget = *th.BudgetTokens
			req.ReasoningEffort = effort
		case "adaptive":
			req.ReasoningEffort = effort
			if effort == "" {
				req.ReasoningEffort = "medium"
			}
		case "disabled":
		case "":
			return nil, errors.New("thinking.type: required")
		default:
			return nil, fmt.Errorf("thinking.type: unknown type %q", th.Type)
		}
	}
	if mr.Metadata != nil {
		req.User = mr.Metadata.UserID
	}
	return req, nil
}

// decodeSystem reads system: a string, or an array of text blocks joined with a blank line.
func decodeSystem(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return "", nil
	}
	switch raw[0] {
	case '"':
		s, err := rawjson.UnmarshalString(raw)
		if err != nil {
			return "", fmt.Errorf("system: %w", err)
		}
		return s, nil
	case '[':
		var blocks []SystemBlock
		if err := json.Unmarshal(raw, &blocks); err != nil {
			return "", fmt.Errorf("system: %w", err)
		}
		texts := make([]string, 0, len(blocks))
		for j, b := range blocks {
			if b.Type != "text" {
				return "", fmt.Errorf("system[%d].type: system blocks must be text, not %q", j, b.Type)
			}
			if b.Text != "" {
				texts = append(texts, b.Text)
			}
		}
		return strings.Join(texts, "\n\n"), nil
	}
	return "", errors.New("system: must be a string or an array of text blocks")
}

// decodeMessage reads one message into one or more neutral messages (a user turn with tool
// results splits into RoleTool messages). names maps tool_use ids seen so far to their tool
// names. Errors start with the field path after messages[i].
func decodeMessage(m MessageParam, names map[string]string) ([]providers.Message, error) {
	var role providers.Role
	switch m.Role {
	case "user":
		role = providers.RoleUser
	case "assistant":
		role = providers.RoleAssistant
	case "":
		return nil, errors.New(".role: required")
	default:
		return nil, fmt.Errorf(".role: unknown role %q", m.Role)
	}
	raw := bytes.TrimSpace(m.Content)
	if isNull(raw) {
		return nil, errors.New(".content: required")
	}
	cur := providers.Message{Role: role}
	switch raw[0] {
	case '"':
		s, err := rawjson.UnmarshalString(raw)
		if err != nil {
			return nil, fmt.Errorf(".content: %w", err)
		}
		if s != "" {
			cur.Content = []providers.Part{{Type: providers.PartText, Text: s}}
		}
		return []providers.Message{cur}, nil
	case '[':
	default:
		return nil, errors.New(".content: must be a string or an array of content blocks")
	}
	// raw is of a body already checked: its blocks are read where they lie.
	blocks, err := rawjson.Elements(raw)
	if err != nil {
		return nil, fmt.Errorf(".content: %w", err)
	}
	var out []providers.Message
	for j, rb := range blocks {
		// The body was decoded whole, so each block is well-formed JSON: the fast decoder
		// (fastdecode.go) takes the usual blocks, encoding/json the rest and their errors.
		var b ContentBlock
		if !b.fastDecode(rb) {
			b = ContentBlock{}
			if err := json.Unmarshal(rb, &b); err != nil {
				return nil, fmt.Errorf(".content[%d]: %w", j, err)
			}
		}
		notIn := func() error {
			return fmt.Errorf(".content[%d]: %s blocks are not allowed in %s messages", j, b.Type, m.Role)
		}
		switch b.Type {
		case "text":
			if b.Text == nil {
				return nil, fmt.Errorf(".content[%d].text: required", j)
			}
			if *b.Text != "" {
				cur.Content = append(cur.Content, providers.Part{Type: providers.PartText, Text: *b.Text})
			}
		case "image":
			if role != providers.RoleUser {
				return nil, notIn()
			}
			p, err := decodeImage(b.Source)
			if err != nil {
				return nil, fmt.Errorf(".content[%d].source%w", j, err)
			}
			cur.Content = append(cur.Content, p)
		case "tool_use":
			if role != providers.RoleAssistant {
				return nil, notIn()
			}
			if b.ID == "" {
				return nil, fmt.Errorf(".content[%d].id: required", j)
			}
			if b.Name == "" {
				return nil, fmt.Errorf(".content[%d].name: required", j)
			}
			args, err := decodeInput(b.Input)
			if err != nil {
				return nil, fmt.Errorf(".content[%d].input: %w", j, err)
			}
			names[b.ID] = b.Name
			cur.ToolCalls = append(cur.ToolCalls, providers.ToolCall{ID: b.ID, Name: b.Name, Arguments: args})
		case "tool_result":
			if role != providers.RoleUser {
				return nil, notIn()
			}
			if b.ToolUseID == "" {
				return nil, fmt.Errorf(".content[%d].tool_use_id: required", j)
			}
			parts, err := decodeToolResult(b.Content, b.IsError)
			if err != nil {
				return nil, fmt.Errorf(".content[%d].content%w", j, err)
			}
			if len(cur.Content) > 0 {
				out = append(out, cur)
				cur = providers.Message{Role: role}
			}
			out = append(out, providers.Message{
				Role:       providers.RoleTool,
				Content:    parts,
				ToolCallID: b.ToolUseID,
				Name:       names[b.ToolUseID],
			})
		case "thinking":
			if role != providers.RoleAssistant {
				return nil, notIn()
			}
			p := providers.Part{Type: providers.PartReasoning}
			if b.Thinking != nil {
				p.Text = *b.Thinking
			}
			if b.Signature != nil {
				p.Signature = *b.Signature
			}
			if p.Text != "" || p.Signature != "" {
				cur.Content = append(cur.Content, p)
			}
		case "redacted_thinking":
			if role != providers.RoleAssistant {
				return nil, notIn()
			}
			// Dropped: the neutral model has no place for the opaque payload.
		case "":
			return nil, fmt.Errorf(".content[%d].type: required", j)
		default:
			if unsupportedBlocks[b.Type] {
				return nil, fmt.Errorf(".content[%d]: block type %q is not supported", j, b.Type)
			}
			return nil, fmt.Errorf(".content[%d]: unknown block type %q", j, b.Type)
		}
	}
	if len(out) == 0 || len(cur.Content) > 0 || len(cur.ToolCalls) > 0 {
		out = append(out, cur)
	}
	return out, nil
}

// decodeImage reads an image source: base64 data or a URL. Errors start after "source".
func decodeImage(src *ImageSource) (providers.Part, error) {
	if src == nil {
		return providers.Part{}, errors.New(": required")
	}
	switch src.Type {
	case "base64":
		if src.MediaType == "" {
			return providers.Part{}, errors.New(".media_type: required")
		}
		data, err := decodeBase64(src.Data)
		if err != nil || len(data) == 0 {
			return providers.Part{}, errors.New(".data: must be non-empty base64")
		}
		return providers.Part{Type: providers.PartImage, MediaType: strings.ToLower(src.MediaType), Data: data}, nil
	case "url":
		lower := strings.ToLower(src.URL)
		if !strings.HasPrefix(lower, "https://") && !strings.HasPrefix(lower, "http://") {
			return providers.Part{}, errors.New(".url: must be an http(s) URL")
		}
		return providers.Part{Type: providers.PartImage, ImageURL: src.URL}, nil
	case "":
		return providers.Part{}, errors.New(".type: required")
	}
	return providers.Part{}, fmt.Errorf(".type: image source type %q is not supported", src.Type)
}

func decodeBase64(s string) ([]byte, error) {
	data, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		// Unpadded base64 is common enough in the wild to accept.
		return base64.RawStdEncoding.DecodeString(s)
	}
	return data, nil
}

// decodeInput reads a tool_use input, a JSON object, as compact arguments text; absent or
// null is "{}".
func decodeInput(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return "{}", nil
	}
	if raw[0] != '{' {
		return "", errors.New("must be a JSON object")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return "", err
	}
	return buf.String(), nil
}

// decodeToolResult reads a tool_result's content: a string or text and image blocks. An
// error result has its text wrapped as {"error":"<text>"}. Errors start after "content".
func decodeToolResult(raw json.RawMessage, isError bool) ([]providers.Part, error) {
	raw = bytes.TrimSpace(raw)
	var parts []providers.Part
	switch {
	case isNull(raw):
	case raw[0] == '"':
		s, err := rawjson.UnmarshalString(raw)
		if err != nil {
			return nil, fmt.Errorf(": %w", err)
		}
		if s != "" {
			parts = append(parts, providers.Part{Type: providers.PartText, Text: s})
		}
	case raw[0] == '[':
		var blocks []ContentBlock
		if err := json.Unmarshal(raw, &blocks); err != nil {
			return nil, fmt.Errorf(": %w", err)
		}
		for k, b := range blocks {
			switch b.Type {
			case "text":
				if b.Text == nil {
					return nil, fmt.Errorf("[%d].text: required", k)
				}
				if *b.Text != "" {
					parts = append(parts, providers.Part{Type: providers.PartText, Text: *b.Text})
				}
			case "image":
				p, err := decodeImage(b.Source)
				if err != nil {
					return nil, fmt.Errorf("[%d].source%w", k, err)
				}
				parts = append(parts, p)
			case "":
				return nil, fmt.Errorf("[%d].type: required", k)
			default:
				if unsupportedBlocks[b.Type] {
					return nil, fmt.Errorf("[%d]: block type %q is not supported", k, b.Type)
				}
				return nil, fmt.Errorf("[%d]: unknown block type %q", k, b.Type)
			}
		}
	default:
		return nil, errors.New(": must be a string or an array of content blocks")
	}
	if !isError {
		return parts, nil
	}
	var texts []string
	rest := make([]providers.Part, 0, len(parts))
	for _, p := range parts {
		if p.Type == providers.PartText {
			texts = append(texts, p.Text)
		} else {
			rest = append(rest, p)
		}
	}
	wrapped, _ := json.Marshal(map[string]string{"error": strings.Join(texts, "\n")}) // a map of strings always marshals
	return append([]providers.Part{{Type: providers.PartText, Text: string(wrapped)}}, rest...), nil
}

// requestPlan is what EncodeRequest decides about the parameters the API constrains, and
// what it could not honour.
type requestPlan struct {
	maxTokens   int64
	budget      int64 // 0: no thinking
	temperature *float64
	topP        *float64
	topK        *int64
	instruction string // appended to the system prompt
	unsupported []string
}

func (p *requestPlan) note(param string) {
	for _, u := range p.unsupported {
		if u == param {
			return
		}
	}
	p.unsupported = append(p.unsupported, param)
}

// planRequest applies the policies documented on EncodeRequest.
func planRequest(req *providers.Request, defaultMax int64) requestPlan {
	var p requestPlan
	budget, source := req.ThinkingBudget, "thinking_budget"
	explicit := budget > 0
	if !explicit {
		budget, source = EffortBudget(req.ReasoningEffort), "reasoning_effort"
	}
	forced := len(req.Tools) > 0 && req.ToolChoice != "" && req.ToolChoice != "auto" && req.ToolChoice != "none"
	if budget > 0 && forced {
		// The API rejects thinking with forced tool use; forcing is usually deliberate
		// (structured output through a tool), so thinking goes.
		p.note(source)
		budget = 0
	}
	if budget > 0 && !thinkingReplayable(req.Messages) {
		// The API wants the last assistant turn of a tool loop to start with its signed
		// thinking block; history from a client or provider without one cannot have it.
		p.note(source)
		budget = 0
	}
	if req.MaxTokens != nil {
		p.maxTokens = max(*req.MaxTokens, 0)
		if budget > 0 && !explicit {
			// max_tokens caps thinking and answer together: leave the answer half.
			budget = min(budget, max(minThinkingBudget, p.maxTokens/2))
			if budget >= p.maxTokens {
				p.note(source)
				budget = 0
			}
		}
	} else {
		p.maxTokens = defaultMax + budget
	}
	p.budget = budget
	if t := req.Temperature; t != nil {
		switch {
		case budget > 0 && *t != 1:
			p.note("temperature")
		case *t < 0 || *t > 1:
			p.note("temperature")
			c := min(max(*t, 0), 1)
			p.temperature = &c
		default:
			p.temperature = t
		}
	}
	if req.TopK != nil {
		if budget > 0 {
			p.note("top_k")
		} else {
			p.topK = req.TopK
		}
	}
	if req.TopP != nil {
		if budget > 0 && *req.TopP < minThinkingTopP {
			p.note("top_p")
		} else {
			p.topP = req.TopP
		}
	}
	switch req.ResponseFormat {
	case "json_object":
		p.note("response_format")
		p.instruction = "Respond only with a single valid JSON object. Do not wrap it in a Markdown code block and do not write anything before or after it."
	case "json_schema":
		p.note("response_format")
		p.instruction = "Respond only with a single valid JSON value. Do not wrap it in a Markdown code block and do not write anything before or after it."
		if !isNull(bytes.TrimSpace(req.JSONSchema)) {
			var schema bytes.Buffer
			if json.Compact(&schema, req.JSONSchema) == nil {
				p.instruction = "Respond only with a single valid JSON value that conforms to this JSON Schema: " +
					schema.String() + "\nDo not wrap it in a Markdown code block and do not write anything before or after it."
			}
		}
	}
	return p
}

// thinkingReplayable tells whether thinking can be on for this conversation: the last
// assistant turn, when it called tools, must carry a signed reasoning part.
func thinkingReplayable(msgs []providers.Message) bool {
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if m.Role != providers.RoleAssistant {
			continue
		}
		if len(m.ToolCalls) == 0 {
			return true
		}
		for _, p := range m.Content {
			if p.Type == providers.PartReasoning {
				if sig, ok := providers.ReplaySignature(providers.SigAnthropic, p.Signature); ok && sig != "" {
					return true
				}
			}
		}
		return false
	}
	return true
}

// Unsupported lists the neutral parameters (in snake_case) that an Anthropic upstream cannot
// honour as asked, so that the gateway can report them; nil when there are none. They are
// the ones EncodeRequest clamps, drops or emulates:
//
//   - "temperature": clamped to [0,1] (not scaled: 0.7 keeps its meaning), or dropped with
//     thinking on, which requires the default.
//   - "top_k", and "top_p" below 0.95: dropped with thinking on.
//   - "reasoning_effort" or "thinking_budget": thinking dropped, because tool_choice forces a
//     tool (the API rejects both together), because the last assistant turn called tools
//     without a signed thinking block (history from a client or provider that has none,
//     which the API rejects with thinking on), or because max_tokens leaves no room for the
//     minimum budget of 1024.
//   - "response_format": the API has no JSON mode; a JSON instruction (with the schema, for
//     json_schema) is appended to the system prompt instead.
//
// It assumes the default max_tokens of DefaultMaxTokens; Provider.Unsupported uses the
// provider's own.
func Unsupported(req *providers.Request) []string {
	return planRequest(req, DefaultMaxTokens).unsupported
}

// EncodeRequest writes the neutral request as a Messages body for an Anthropic upstream.
//
//   - max_tokens is MaxTokens, or DefaultMaxTokens (plus the thinking budget) when unset.
//   - Thinking is {type:enabled, budget_tokens: ThinkingBudget}, or the budget of
//     ReasoningEffort (EffortBudget: low 1024, medium 4096, high 16384; none for "" and
//     "minimal"), capped at half an explicit MaxTokens (at least 1024).
//   - Messages alternate as the API requires: consecutive same-role turns are merged, and the
//     RoleTool messages after an assistant turn become tool_result blocks of ONE user
//     message, placed before any other block of that message. A tool call left without a
//     result before the next turn gets a synthetic is_error result. A tool message whose
//     text is exactly {"error":"<text>"} becomes an is_error result of <text>.
//   - Empty and whitespace-only text is dropped, as are messages left empty; a final
//     assistant turn (prefill) loses its trailing whitespace, which the API rejects.
//   - Reasoning parts become thinking blocks, first in their turn, only when signed: the API
//     rejects thinking it did not sign.
//   - Tool call arguments become the tool_use input object; empty, invalid or non-object
//     JSON becomes {}. Tool call ids outside [a-zA-Z0-9_-] are rewritten the same way in
//     calls and results (t_ + base64url).
//   - Images by URL use a url source, inline images (and data: URLs) a base64 source;
//     media types other than JPEG, PNG, GIF and WebP are an error.
//   - Parameters the API cannot honour are clamped, dropped or emulated as Unsupported
//     describes.
func EncodeRequest(req *providers.Request) ([]byte, error) {
	return encodeRequest(req, DefaultMaxTokens)
}

func encodeRequest(req *providers.Request, defaultMax int64) ([]byte, error) {
	plan := planRequest(req, defaultMax)
	mr := MessagesRequest{
		Model:         req.Model,
		MaxTokens:     &plan.maxTokens,
		Temperature:   plan.temperature,
		TopP:          plan.topP,
		TopK:          plan.topK,
		StopSequences: req.Stop,
		Stream:        req.Stream,
	}
	system := req.System
	if plan.instruction != "" {
		if strings.TrimSpace(system) != "" {
			system += "\n\n"
		}
		system += plan.instruction
	}
	if strings.TrimSpace(system) != "" {
		mr.System = jsonString(system)
	}
	var err error
	if mr.Messages, err = encodeMessages(req.Messages); err != nil {
		return nil, err
	}
	for _, t := range req.Tools {
		schema := bytes.TrimSpace(t.Parameters)
		if isNull(schema) {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		mr.Tools = append(mr.Tools, Tool{Name: t.Name, Description: t.Description, InputSchema: schema})
	}
	if len(req.Tools) > 0 {
		var tc *ToolChoice
		switch req.ToolChoice {
		case "":
		case "auto":
			tc = &ToolChoice{Type: "auto"}
		case "none":
			tc = &ToolChoice{Type: "none"}
		case "required":
			tc = &ToolChoice{Type: "any"}
		default:
			tc = &ToolChoice{Type: "tool", Name: req.ToolChoice}
		}
		if p := req.ParallelToolCalls; p != nil && !*p {
			if tc == nil {
				tc = &ToolChoice{Type: "auto"}
			}
			if tc.Type != "none" {
				yes := true
				tc.DisableParallelToolUse = &yes
			}
		}
		mr.ToolChoice = tc
	}
	if plan.budget > 0 {
		mr.Thinking = &Thinking{Type: "enabled", BudgetTokens: &plan.budget}
	}
	if req.User != "" {
		mr.Metadata = &Metadata{UserID: req.User}
	}
	return marshalRequest(&mr)
}

// wireMessage is a message being built: its blocks are marshalled at the end.
type wireMessage struct {
	role   string
	blocks []ContentBlock
}

// encodeMessages writes the conversation with the API's turn rules (see EncodeRequest).
func encodeMessages(msgs []providers.Message) ([]MessageParam, error) {
	var out []wireMessage
	add := func(role string, blocks []ContentBlock) {
		if len(blocks) == 0 {
			return
		}
		if n := len(out); n > 0 && out[n-1].role == role {
			out[n-1].blocks = append(out[n-1].blocks, blocks...)
			return
		}
		out = append(out, wireMessage{role: role, blocks: blocks})
	}
	for i, m := range msgs {
		switch m.Role {
		case providers.RoleUser:
			blocks, err := encodeParts(m.Content)
			if err != nil {
				return nil, fmt.Errorf("message %d: %w", i, err)
			}
			add("user", blocks)
		case providers.RoleAssistant:
			var thinking []ContentBlock
			for _, p := range m.Content {
				if p.Type != providers.PartReasoning {
					continue
				}
				// A thinking block needs a valid signature: one from another provider
				// drops the block (see providers.ReplaySignature).
				if sig, ok := providers.ReplaySignature(providers.SigAnthropic, p.Signature); ok && sig != "" {
					thinking = append(thinking, ContentBlock{Type: "thinking", Thinking: ptr(p.Text), Signature: ptr(sig)})
				}
			}
			blocks, err := encodeParts(m.Content)
			if err != nil {
				return nil, fmt.Errorf("message %d: %w", i, err)
			}
			blocks = append(thinking, blocks...)
			for j, tc := range m.ToolCalls {
				if tc.ID == "" {
					return nil, fmt.Errorf("message %d: tool call %d: id required", i, j)
				}
				blocks = append(blocks, ContentBlock{Type: "tool_use", ID: toolID(tc.ID), Name: tc.Name, Input: toolInput(tc.Arguments)})
			}
			add("assistant", blocks)
		case providers.RoleTool:
			if m.ToolCallID == "" {
				return nil, fmt.Errorf("message %d: tool message without a tool call id", i)
			}
			b, err := encodeToolResult(m)
			if err != nil {
				return nil, fmt.Errorf("message %d: %w", i, err)
			}
			add("user", []ContentBlock{b})
		default:
			return nil, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
	}
	for i := range out {
		if out[i].role == "user" {
			out[i].blocks = resultsFirst(out[i].blocks)
		}
	}
	out = answerCalls(out)
	if n := len(out); n > 0 && out[n-1].role == "assistant" {
		out[n-1].blocks = trimPrefill(out[n-1].blocks)
		if len(out[n-1].blocks) == 0 {
			out = out[:n-1]
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no message has content to send")
	}
	params := make([]MessageParam, len(out))
	for i, m := range out {
		content, err := marshalBlocks(m.blocks)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		params[i] = MessageParam{Role: m.role, Content: content}
	}
	return params, nil
}

// encodeParts writes text and image parts as blocks, dropping whitespace-only text (the API
// rejects it) and reasoning (written by the caller where it belongs).
func encodeParts(parts []providers.Part) ([]ContentBlock, error) {
	blocks := make([]ContentBlock, 0, len(parts))
	for _, p := range parts {
		switch p.Type {
		case providers.PartText:
			if strings.TrimSpace(p.Text) != "" {
				blocks = append(blocks, ContentBlock{Type: "text", Text: ptr(p.Text)})
			}
		case providers.PartImage:
			b, err := encodeImage(p)
			if err != nil {
				return nil, err
			}
			blocks = append(blocks, b)
		case providers.PartReasoning:
		default:
			return nil, fmt.Errorf("unsupported content part type %q", p.Type)
		}
	}
	return blocks, nil
}

// imageTypes are the media types the API accepts for images.
var imageTypes = map[string]bool{"image/jpeg": true, "image/png": true, "image/gif": true, "image/webp": true}

func encodeImage(p providers.Part) (ContentBlock, error) {
	data, mediaType := p.Data, strings.ToLower(strings.TrimSpace(p.MediaType))
	if u := p.ImageURL; u != "" {
		if len(u) <= 5 || !strings.EqualFold(u[:5], "data:") {
			return ContentBlock{Type: "image", Source: &ImageSource{Type: "url", URL: u}}, nil
		}
		meta, payload, ok := strings.Cut(u[5:], ",")
		mt, isBase64 := strings.CutSuffix(meta, ";base64")
		if !ok || !isBase64 || mt == "" {
			return ContentBlock{}, errors.New("image data URL must be data:<media type>;base64,<data>")
		}
		d, err := decodeBase64(payload)
		if err != nil {
			return ContentBlock{}, errors.New("image data URL payload is not valid base64")
		}
		data, mediaType = d, strings.ToLower(mt)
	}
	if len(data) == 0 {
		return ContentBlock{}, errors.New("image part has neither a URL nor data")
	}
	if mediaType == "image/jpg" {
		mediaType = "image/jpeg"
	}
	if !imageTypes[mediaType] {
		return ContentBlock{}, fmt.Errorf("image media type %q is not supported (JPEG, PNG, GIF or WebP)", p.MediaType)
	}
	return ContentBlock{Type: "image", Source: &ImageSource{
		Type: "base64", MediaType: mediaType, Data: base64.StdEncoding.EncodeToString(data),
	}}, nil
}

// encodeToolResult writes a RoleTool message as a tool_result block: a single text as a
// string, several parts as blocks, no content when empty.
func encodeToolResult(m providers.Message) (ContentBlock, error) {
	b := ContentBlock{Type: "tool_result", ToolUseID: toolID(m.ToolCallID)}
	parts := m.Content
	if len(parts) == 1 && parts[0].Type == providers.PartText {
		if msg, ok := unwrapError(parts[0].Text); ok {
			b.IsError = true
			parts = []providers.Part{{Type: providers.PartText, Text: msg}}
		}
	}
	blocks, err := encodeParts(parts)
	if err != nil {
		return b, err
	}
	switch {
	case len(blocks) == 0:
	case len(blocks) == 1 && blocks[0].Type == "text":
		b.Content = jsonString(*blocks[0].Text)
	default:
		if b.Content, err = marshalBlocks(blocks); err != nil {
			return b, err
		}
	}
	return b, nil
}

// unwrapError recognises the {"error":"<text>"} wrapping of DecodeRequest.
func unwrapError(s string) (string, bool) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, `{"error":`) {
		return "", false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(s), &m) != nil || len(m) != 1 {
		return "", false
	}
	var msg string
	if json.Unmarshal(m["error"], &msg) != nil {
		return "", false
	}
	return msg, true
}

// resultsFirst moves tool_result blocks to the front of a user message, keeping the order
// within each kind: the API wants them right after the assistant's tool_use.
func resultsFirst(blocks []ContentBlock) []ContentBlock {
	sorted := true
	for i := 1; i < len(blocks); i++ {
		if blocks[i].Type == "tool_result" && blocks[i-1].Type != "tool_result" {
			sorted = false
			break
		}
	}
	if sorted {
		return blocks
	}
	out := make([]ContentBlock, 0, len(blocks))
	for _, b := range blocks {
		if b.Type == "tool_result" {
			out = append(out, b)
		}
	}
	for _, b := range blocks {
		if b.Type != "tool_result" {
			out = append(out, b)
		}
	}
	return out
}

// answerCalls gives every tool call that is followed by another turn a result: the API
// rejects a tool_use whose tool_result is missing from the next user message.
func answerCalls(msgs []wireMessage) []wireMessage {
	for i := 0; i+1 < len(msgs); i++ {
		if msgs[i].role != "assistant" || msgs[i+1].role != "user" {
			continue
		}
		next := msgs[i+1].blocks
		answered := make(map[string]bool)
		k := 0
		for ; k < len(next) && next[k].Type == "tool_result"; k++ {
			answered[next[k].ToolUseID] = true
		}
		var missing []ContentBlock
		for _, b := range msgs[i].blocks {
			if b.Type == "tool_use" && !answered[b.ID] {
				answered[b.ID] = true
				missing = append(missing, ContentBlock{
					Type: "tool_result", ToolUseID: b.ID, IsError: true,
					Content: jsonString("tool call was not executed"),
				})
			}
		}
		if len(missing) == 0 {
			continue
		}
		merged := make([]ContentBlock, 0, len(next)+len(missing))
		merged = append(merged, next[:k]...)
		merged = append(merged, missing...)
		msgs[i+1].blocks = append(merged, next[k:]...)
	}
	return msgs
}

// trimPrefill removes the trailing whitespace of a final assistant turn.
func trimPrefill(blocks []ContentBlock) []ContentBlock {
	n := len(blocks)
	if n == 0 || blocks[n-1].Type != "text" {
		return blocks
	}
	t := strings.TrimRightFunc(*blocks[n-1].Text, unicode.IsSpace)
	if t == "" {
		return blocks[:n-1]
	}
	blocks[n-1].Text = &t
	return blocks
}

// toolID keeps an id that matches the API's pattern ^[a-zA-Z0-9_-]+$ and rewrites any
// other (ids of other providers may hold "." or ":") the same way every time, so that a
// call and its result still pair up.
func toolID(id string) string {
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return "t_" + base64.RawURLEncoding.EncodeToString([]byte(id))
		}
	}
	return id
}

// toolInput turns a call's arguments into the input object: empty, invalid or non-object
// JSON becomes {}.
func toolInput(args string) json.RawMessage {
	b := bytes.TrimSpace([]byte(args))
	if len(b) == 0 || b[0] != '{' || !json.Valid(b) {
		return json.RawMessage(`{}`)
	}
	var buf bytes.Buffer
	_ = json.Compact(&buf, b) // valid JSON always compacts
	return buf.Bytes()
}

// DecodeResponse reads a message object into the neutral model. Text blocks are joined, as
// are thinking blocks; the reasoning signature is kept only when there was exactly one
// thinking block, since a signature authenticates one block's text; it is tagged with
// providers.SigAnthropic (see providers.Tag). redacted_thinking and
// server-tool blocks are dropped. A stop_reason of end_turn with tool calls (which the API
// does not send) still becomes tool_calls.
func DecodeResponse(body []byte) (*providers.Response, error) {
	var m Message
	if !m.fastDecode(body) {
		// A shape the fast path leaves to encoding/json, invalid input included.
		if err := rawjson.UnmarshalFresh(body, &m); err != nil {
			return nil, fmt.Errorf("decoding message: %w", err)
		}
	}
	if m.Type != "message" {
		return nil, fmt.Errorf("decoding message: type is %q, not message", m.Type)
	}
	resp := &providers.Response{ID: m.ID, Model: m.Model}
	var text, reasoning strings.Builder
	thinkingBlocks := 0
	for i, b := range m.Content {
		switch b.Type {
		case "text":
			if b.Text != nil {
				text.WriteString(*b.Text)
			}
		case "thinking":
			thinkingBlocks++
			if b.Thinking != nil {
				reasoning.WriteString(*b.Thinking)
			}
			if b.Signature != nil {
				resp.ReasoningSignature = providers.Tag(providers.SigAnthropic, *b.Signature)
			}
		case "tool_use":
			args, err := decodeInput(b.Input)
			if err != nil {
				return nil, fmt.Errorf("decoding message: content[%d].input: %w", i, err)
			}
			resp.ToolCalls = append(resp.ToolCalls, providers.ToolCall{ID: b.ID, Name: b.Name, Arguments: args})
		}
	}
	if thinkingBlocks != 1 {
		resp.ReasoningSignature = ""
	}
	resp.Text, resp.Reasoning = text.String(), reasoning.String()
	stop := ""
	if m.StopReason != nil {
		stop = *m.StopReason
	}
	resp.FinishReason = FinishReason(stop)
	if resp.FinishReason == providers.FinishStop && len(resp.ToolCalls) > 0 {
		resp.FinishReason = providers.FinishToolCalls
	}
	if m.StopSequence != nil {
		resp.StopSequence = *m.StopSequence
	}
	u, err := ParseUsage(m.Usage)
	if err != nil {
		return nil, fmt.Errorf("decoding message: %w", err)
	}
	resp.Usage = u
	return resp, nil
}

// EncodeResponse writes a neutral response as a message object with the given id and model
// (resp.ID and resp.Model when empty). Blocks come in the order thinking, text, tool_use;
// empty text makes no block. Tool arguments become input objects ({} when they are not a
// JSON object).
func EncodeResponse(resp *providers.Response, id, model string) ([]byte, error) {
	return AppendResponse(nil, resp, id, model)
}

// AppendResponse appends what EncodeResponse returns to dst, so that a caller can encode
// into a buffer it reuses.
func AppendResponse(dst []byte, resp *providers.Response, id, model string) ([]byte, error) {
	b, _, err := AppendResponseWith(dst, resp, id, model, providers.Additions{})
	return b, err
}

// AppendResponseWith is AppendResponse with add's members at the end of the usage object and
// of the message; added reports whether they are there (false only for a message the fast
// encoder cannot write, which is then written without them).
func AppendResponseWith(dst []byte, resp *providers.Response, id, model string, add providers.Additions) (b []byte, added bool, err error) {
	var room responseRoom
	room.fill(resp, id, model, add)
	// link's assignments, made on the local itself: through a pointer, even inlined, they
	// sent the room to the heap.
	room.msg.Content, room.msg.StopReason = room.content(), &room.stop
	room.msg.Usage = AppendUsage(room.usage[:0], resp.Usage)
	if b, ok := appendMessage(bufs.Grow(dst, messageSize(&room.msg)), &room.msg); ok {
		return b, true, nil
	}
	m, err := marshalResponse(resp, id, model, add)
	return append(dst, m...), false, err
}

// marshalResponse is json.Marshal of the message AppendResponseWith writes, for what its fast
// encoder refuses, from a room of its own: handing the fast path's to json.Marshal sent it to
// the heap on every call, its blocks, stop reason and usage four allocations.
func marshalResponse(resp *providers.Response, id, model string, add providers.Additions) ([]byte, error) {
	room := new(responseRoom)
	room.fill(resp, id, model, add)
	room.msg.Content, room.msg.StopReason = room.content(), &room.stop
	room.msg.Usage = AppendUsage(room.usage[:0], resp.Usage)
	return json.Marshal(&room.msg)
}

// responseRoom holds a message and what it points to, so that it can live on its writer's
// stack: fill writes the values, and the writer the pointers between them (a function that
// stores the room's own addresses in it sends the room to the heap). The text blocks point
// at resp's own strings.
type responseRoom struct {
	msg    Message
	blocks [2]ContentBlock // thinking and text
	n      int
	tools  []ContentBlock // all the blocks instead, when there are tool calls
	stop   string
	usage  [160]byte
}

// content is the message's blocks.
func (r *responseRoom) content() []ContentBlock {
	if r.tools != nil {
		return r.tools
	}
	return r.blocks[:r.n]
}

// fill makes the room the message for resp but for its pointers: id and model (resp's own
// when empty), the blocks, the stop reason, and add's members at the end of the usage object
// and of the message.
func (r *responseRoom) fill(resp *providers.Response, id, model string, add providers.Additions) {
	if id == "" {
		id = resp.ID
	}
	if model == "" {
		model = resp.Model
	}
	// The blocks are made here and copied into the room, never read back from it: reading
	// the room's pointers in here would move the room to the heap.
	var head [2]ContentBlock
	n := 0
	if resp.Reasoning != "" || resp.ReasoningSignature != "" {
		sig := providers.NativeSignature(providers.SigAnthropic, resp.ReasoningSignature)
		head[n] = ContentBlock{Type: "thinking", Thinking: &resp.Reasoning, Signature: &sig}
		n++
	}
	if resp.Text != "" {
		head[n] = ContentBlock{Type: "text", Text: &resp.Text}
		n++
	}
	r.blocks, r.n = head, n
	if len(resp.ToolCalls) > 0 {
		tools := append(make([]ContentBlock, 0, n+len(resp.ToolCalls)), head[:n]...)
		for _, tc := range resp.ToolCalls {
			tools = append(tools, ContentBlock{Type: "tool_use", ID: tc.ID, Name: tc.Name, Input: toolInput(tc.Arguments)})
		}
		r.tools = tools
	}
	reason := resp.FinishReason
	if len(resp.ToolCalls) > 0 && (reason == "" || reason == providers.FinishStop) {
		reason = providers.FinishToolCalls
	}
	stop := StopReason(reason, resp.StopSequence)
	r.stop = stop
	r.msg = Message{ID: id, Type: "message", Role: "assistant", Model: model, add: add}
	if stop == "stop_sequence" {
		r.msg.StopSequence = &resp.StopSequence
	}
}

// FinishReason maps an Anthropic stop_reason to the neutral finish reason: end_turn and
// stop_sequence are stop; max_tokens and model_context_window_exceeded are length; tool_use
// is tool_calls; refusal is content_filter. pause_turn (a server tool paused a long turn)
// has no neutral equivalent and is stop, as are empty and unknown values: the client may
// send the turn again to let the server tool go on.
func FinishReason(stopReason string) providers.FinishReason {
	switch stopReason {
	case "max_tokens", "model_context_window_exceeded":
		return providers.FinishLength
	case "tool_use":
		return providers.FinishToolCalls
	case "refusal":
		return providers.FinishContentFilter
	}
	return providers.FinishStop
}

// StopReason maps a neutral finish reason to an Anthropic stop_reason: stop is end_turn, or
// stop_sequence when stopSequence is set; length is max_tokens; tool_calls is tool_use;
// content_filter is refusal. Empty and unknown reasons are end_turn.
func StopReason(reason providers.FinishReason, stopSequence string) string {
	switch reason {
	case providers.FinishLength:
		return "max_tokens"
	case providers.FinishToolCalls:
		return "tool_use"
	case providers.FinishContentFilter:
		return "refusal"
	}
	if stopSequence != "" {
		return "stop_sequence"
	}
	return "end_turn"
}

// usageCounters are the raw counters of an Anthropic usage, merged event by event in a
// stream: a counter an event carries replaces the previous value, never adds to it.
type usageCounters struct {
	input, cacheWrite, cacheRead, output, thinking int64
}

func (c *usageCounters) merge(u *Usage) {
	set := func(dst *int64, v *TokenCount) {
		if v != nil {
			*dst = max(int64(*v), 0)
		}
	}
	set(&c.input, u.InputTokens)
	set(&c.cacheWrite, u.CacheCreationInputTokens)
	set(&c.cacheRead, u.CacheReadInputTokens)
	set(&c.output, u.OutputTokens)
	if u.OutputTokensDetails != nil {
		set(&c.thinking, u.OutputTokensDetails.ThinkingTokens)
	}
}

// neutral splits the counters into the five disjoint neutral ones (translation map §2.2).
func (c *usageCounters) neutral() providers.Usage {
	reasoning := min(c.thinking, c.output)
	return providers.Usage{
		Input:      c.input,
		CacheRead:  c.cacheRead,
		CacheWrite: c.cacheWrite,
		Output:     c.output - reasoning,
		Reasoning:  reasoning,
	}
}

// ParseUsage reads an Anthropic usage object into the neutral counters (translation map
// §2.2): input_tokens already excludes the cache, so it is Input as it is; cache reads and
// writes are CacheRead and CacheWrite (null is 0); output_tokens_details.thinking_tokens,
// when present, is Reasoning and comes out of output_tokens. Empty input or null is zero
// usage; no counter is ever negative.
func ParseUsage(raw []byte) (providers.Usage, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return providers.Usage{}, nil
	}
	var u Usage
	if !rawjson.Valid(raw) || !u.fastDecode(raw) {
		if err := rawjson.UnmarshalFresh(raw, &u); err != nil {
			return providers.Usage{}, fmt.Errorf("decoding usage: %w", err)
		}
	}
	var c usageCounters
	c.merge(&u)
	return c.neutral(), nil
}

// AppendUsage appends neutral usage to b as an Anthropic usage object (translation map
// §2.3): input_tokens is Input, the cache counters are CacheWrite and CacheRead,
// output_tokens is Output + Reasoning with Reasoning in output_tokens_details.thinking_tokens.
func AppendUsage(b []byte, u providers.Usage) []byte { return appendUsage(b, u, true) }

// appendUsage appends the usage object; withDetails adds output_tokens_details.
func appendUsage(b []byte, u providers.Usage, withDetails bool) []byte {
	b = append(b, `{"input_tokens":`...)
	b = strconv.AppendInt(b, max(u.Input, 0), 10)
	b = append(b, `,"cache_creation_input_tokens":`...)
	b = strconv.AppendInt(b, max(u.CacheWrite, 0), 10)
	b = append(b, `,"cache_read_input_tokens":`...)
	b = strconv.AppendInt(b, max(u.CacheRead, 0), 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, max(u.CompletionTokens(), 0), 10)
	if withDetails {
		b = append(b, `,"output_tokens_details":{"thinking_tokens":`...)
		b = strconv.AppendInt(b, max(u.Reasoning, 0), 10)
		b = append(b, '}')
	}
	return append(b, '}')
}

func isNull(raw []byte) bool { return len(raw) == 0 || string(raw) == "null" }

func jsonString(s string) json.RawMessage { return rawjson.AppendString(nil, s) }

func ptr[T any](v T) *T { return &v }
