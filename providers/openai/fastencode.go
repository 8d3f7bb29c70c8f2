package openai

import (
	"strconv"

	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
)

// Hand-written encoders for the bodies the adapter writes on every call (the upstream
// request, the chat.completion sent to clients), which json.Marshal walks by reflection.
// Strings, floats and json.RawMessages go through rawjson's Like-Marshal appenders, which
// quote, validate and compact as json.Marshal does. Each encoder appends exactly what
// json.Marshal writes for its value (field order, omitempty, null for nil pointers and
// slices) or reports false where json.Marshal fails (a RawMessage that is not JSON, a NaN
// or infinite float): the caller then falls back to json.Marshal, whose error is the one to
// return. What is appended before a false is garbage. fastencode_test.go holds them to
// json.Marshal byte for byte, and fails when a field added to types.go is missing here.

// appendChatRequest appends r as json.Marshal writes it.
func appendChatRequest(b []byte, r *ChatRequest) ([]byte, bool) {
	var ok bool
	b = append(b, `{"model":`...)
	b = rawjson.AppendStringLikeMarshal(b, r.Model)
	b = append(b, `,"messages":`...)
	if b, ok = appendArray(b, r.Messages, appendChatMessage); !ok {
		return b, false
	}
	if len(r.Tools) > 0 {
		b = append(b, `,"tools":`...)
		if b, ok = appendArray(b, r.Tools, appendChatTool); !ok {
			return b, false
		}
	}
	if len(r.ToolChoice) > 0 {
		b = append(b, `,"tool_choice":`...)
		if b, ok = rawjson.AppendRawLikeMarshal(b, r.ToolChoice); !ok {
			return b, false
		}
	}
	if r.ParallelToolCalls != nil {
		b = append(b, `,"parallel_tool_calls":`...)
		b = strconv.AppendBool(b, *r.ParallelToolCalls)
	}
	if r.MaxTokens != nil {
		b = append(b, `,"max_tokens":`...)
		b = strconv.AppendInt(b, *r.MaxTokens, 10)
	}
	if r.MaxCompletionTokens != nil {
		b = append(b, `,"max_completion_tokens":`...)
		b = strconv.AppendInt(b, *r.MaxCompletionTokens, 10)
	}
	if r.Temperature != nil {
		b = append(b, `,"temperature":`...)
		if b, ok = rawjson.AppendFloat64LikeMarshal(b, *r.Temperature); !ok {
			return b, false
		}
	}
	if r.TopP != nil {
		b = append(b, `,"top_p":`...)
		if b, ok = rawjson.AppendFloat64LikeMarshal(b, *r.TopP); !ok {
			return b, false
		}
	}
	if len(r.Stop) > 0 {
		// StopList only unmarshals itself: it marshals as the []string it is.
		b = rawjson.AppendStringsLikeMarshal(append(b, `,"stop":`...), r.Stop)
	}
	if r.Stream {
		b = append(b, `,"stream":true`...)
	}
	if r.StreamOptions != nil {
		b = append(b, `,"stream_options":{"include_usage":`...)
		b = strconv.AppendBool(b, r.StreamOptions.IncludeUsage)
		b = append(b, '}')
	}
	if rf := r.ResponseFormat; rf != nil {
		b = append(b, `,"response_format":{"type":`...)
		b = rawjson.AppendStringLikeMarshal(b, rf.Type)
		if s := rf.JSONSchema; s != nil {
			b = append(b, `,"json_schema":{"name":`...)
			b = rawjson.AppendStringLikeMarshal(b, s.Name)
			b = rawjson.AppendOmitEmptyString(b, `,"description":`, s.Description)
			if len(s.Schema) > 0 {
				b = append(b, `,"schema":`...)
				if b, ok = rawjson.AppendRawLikeMarshal(b, s.Schema); !ok {
					return b, false
				}
			}
			if s.Strict != nil {
				b = append(b, `,"strict":`...)
				b = strconv.AppendBool(b, *s.Strict)
			}
			b = append(b, '}')
		}
		b = append(b, '}')
	}
	b = rawjson.AppendOmitEmptyString(b, `,"reasoning_effort":`, r.ReasoningEffort)
	b = rawjson.AppendOmitEmptyString(b, `,"user":`, r.User)
	b = rawjson.AppendOmitEmptyString(b, `,"safety_identifier":`, r.SafetyIdentifier)
	return append(b, '}'), true
}

func appendChatMessage(b []byte, m *ChatMessage) ([]byte, bool) {
	var ok bool
	b = append(b, `{"role":`...)
	b = rawjson.AppendStringLikeMarshal(b, m.Role)
	b = append(b, `,"content":`...)
	if b, ok = rawjson.AppendRawLikeMarshal(b, m.Content); !ok {
		return b, false
	}
	b = rawjson.AppendOmitEmptyString(b, `,"name":`, m.Name)
	if len(m.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":`...)
		b, _ = appendArray(b, m.ToolCalls, appendChatToolCall)
	}
	b = rawjson.AppendOmitEmptyString(b, `,"tool_call_id":`, m.ToolCallID)
	return append(b, '}'), true
}

func appendChatTool(b []byte, t *ChatTool) ([]byte, bool) {
	var ok bool
	b = append(b, `{"type":`...)
	b = rawjson.AppendStringLikeMarshal(b, t.Type)
	b = append(b, `,"function":{"name":`...)
	b = rawjson.AppendStringLikeMarshal(b, t.Function.Name)
	b = rawjson.AppendOmitEmptyString(b, `,"description":`, t.Function.Description)
	if len(t.Function.Parameters) > 0 {
		b = append(b, `,"parameters":`...)
		if b, ok = rawjson.AppendRawLikeMarshal(b, t.Function.Parameters); !ok {
			return b, false
		}
	}
	if t.Function.Strict != nil {
		b = append(b, `,"strict":`...)
		b = strconv.AppendBool(b, *t.Function.Strict)
	}
	return append(b, "}}"...), true
}

// appendChatToolCall never fails: Arguments has no MarshalJSON of its own, it is written
// as the string it is.
func appendChatToolCall(b []byte, tc *ChatToolCall) ([]byte, bool) {
	b = append(b, `{"id":`...)
	b = rawjson.AppendStringLikeMarshal(b, tc.ID)
	b = append(b, `,"type":`...)
	b = rawjson.AppendStringLikeMarshal(b, tc.Type)
	b = append(b, `,"function":{"name":`...)
	b = rawjson.AppendStringLikeMarshal(b, tc.Function.Name)
	b = append(b, `,"arguments":`...)
	b = rawjson.AppendStringLikeMarshal(b, string(tc.Function.Arguments))
	return append(b, "}}"...), true
}

// appendContentParts appends parts as json.Marshal writes a []ContentPart; it never fails.
func appendContentParts(b []byte, parts []ContentPart) ([]byte, bool) {
	return appendArray(b, parts, appendContentPart)
}

func appendContentPart(b []byte, p *ContentPart) ([]byte, bool) {
	b = append(b, `{"type":`...)
	b = rawjson.AppendStringLikeMarshal(b, p.Type)
	if p.Text != nil {
		b = append(b, `,"text":`...)
		b = rawjson.AppendStringLikeMarshal(b, *p.Text)
	}
	if u := p.ImageURL; u != nil {
		b = append(b, `,"image_url":{"url":`...)
		b = rawjson.AppendStringLikeMarshal(b, u.URL)
		b = rawjson.AppendOmitEmptyString(b, `,"detail":`, u.Detail)
		b = append(b, '}')
	}
	if p.Refusal != nil {
		b = append(b, `,"refusal":`...)
		b = rawjson.AppendStringLikeMarshal(b, *p.Refusal)
	}
	return append(b, '}'), true
}

// appendChatResponse appends r as json.Marshal writes it.
func appendChatResponse(b []byte, r *ChatResponse) ([]byte, bool) {
	var ok bool
	b = append(b, `{"id":`...)
	b = rawjson.AppendStringLikeMarshal(b, r.ID)
	b = append(b, `,"object":`...)
	b = rawjson.AppendStringLikeMarshal(b, r.Object)
	b = append(b, `,"created":`...)
	b = strconv.AppendInt(b, r.Created, 10)
	b = append(b, `,"model":`...)
	b = rawjson.AppendStringLikeMarshal(b, r.Model)
	b = append(b, `,"choices":`...)
	if b, ok = appendArray(b, r.Choices, appendChatChoice); !ok {
		return b, false
	}
	if u := r.Usage; u != nil {
		b = append(b, `,"usage":{"prompt_tokens":`...)
		b = strconv.AppendInt(b, int64(u.PromptTokens), 10)
		b = append(b, `,"completion_tokens":`...)
		b = strconv.AppendInt(b, int64(u.CompletionTokens), 10)
		b = append(b, `,"total_tokens":`...)
		b = strconv.AppendInt(b, int64(u.TotalTokens), 10)
		if d := u.PromptTokensDetails; d != nil {
			b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
			b = strconv.AppendInt(b, int64(d.CachedTokens), 10)
			b = append(b, `,"cache_write_tokens":`...)
			b = strconv.AppendInt(b, int64(d.CacheWriteTokens), 10)
			b = append(b, '}')
		}
		if d := u.CompletionTokensDetails; d != nil {
			b = append(b, `,"completion_tokens_details":{"reasoning_tokens":`...)
			b = strconv.AppendInt(b, int64(d.ReasoningTokens), 10)
			b = append(b, '}')
		}
		if u.PromptCacheHitTokens != nil {
			b = append(b, `,"prompt_cache_hit_tokens":`...)
			b = strconv.AppendInt(b, int64(*u.PromptCacheHitTokens), 10)
		}
		b = rawjson.AppendMembers(b, r.add.Usage)
		b = append(b, '}')
	} else if len(r.add.Usage) > 0 {
		return b, false
	}
	if r.SystemFingerprint != nil {
		b = append(b, `,"system_fingerprint":`...)
		b = rawjson.AppendStringLikeMarshal(b, *r.SystemFingerprint)
	}
	b = rawjson.AppendMembers(b, r.add.Top)
	return append(b, '}'), true
}

func appendChatChoice(b []byte, c *ChatChoice) ([]byte, bool) {
	var ok bool
	m := &c.Message
	b = append(b, `{"index":`...)
	b = strconv.AppendInt(b, int64(c.Index), 10)
	b = append(b, `,"message":{"role":`...)
	b = rawjson.AppendStringLikeMarshal(b, m.Role)
	b = append(b, `,"content":`...)
	if b, ok = rawjson.AppendRawLikeMarshal(b, m.Content); !ok {
		return b, false
	}
	b = append(b, `,"refusal":`...)
	b = rawjson.AppendStringPtrLikeMarshal(b, m.Refusal)
	if len(m.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":`...)
		b, _ = appendArray(b, m.ToolCalls, appendChatToolCall)
	}
	if len(m.ReasoningContent) > 0 {
		b = append(b, `,"reasoning_content":`...)
		if b, ok = rawjson.AppendRawLikeMarshal(b, m.ReasoningContent); !ok {
			return b, false
		}
	}
	if len(m.Reasoning) > 0 {
		b = append(b, `,"reasoning":`...)
		if b, ok = rawjson.AppendRawLikeMarshal(b, m.Reasoning); !ok {
			return b, false
		}
	}
	b = append(b, `},"finish_reason":`...)
	b = rawjson.AppendStringPtrLikeMarshal(b, c.FinishReason)
	b = append(b, `,"logprobs":`...)
	if b, ok = rawjson.AppendRawLikeMarshal(b, c.Logprobs); !ok {
		return b, false
	}
	return append(b, '}'), true
}

// appendNamedToolChoice appends the tool_choice that forces the function name:
// {"type":"function","function":{"name":name}}.
func appendNamedToolChoice(b []byte, name string) []byte {
	b = append(b, `{"type":"function","function":{"name":`...)
	b = rawjson.AppendStringLikeMarshal(b, name)
	return append(b, "}}"...)
}

// appendArray appends s as json.Marshal writes a slice: null when nil, [] when empty.
func appendArray[T any](b []byte, s []T, elem func([]byte, *T) ([]byte, bool)) ([]byte, bool) {
	if s == nil {
		return append(b, "null"...), true
	}
	b = append(b, '[')
	for i := range s {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = elem(b, &s[i]); !ok {
			return b, false
		}
	}
	return append(b, ']'), true
}

// chatRequestSize estimates the encoded size of r, so that the buffer is allocated once
// for most requests: the variable parts plus room for keys, punctuation and some escapes.
func chatRequestSize(r *ChatRequest) int {
	n := 192 + len(r.Model) + len(r.ToolChoice) + len(r.User) + len(r.SafetyIdentifier)
	for i := range r.Messages {
		m := &r.Messages[i]
		n += 40 + len(m.Content) + len(m.Name) + len(m.ToolCallID)
		for j := range m.ToolCalls {
			tc := &m.ToolCalls[j]
			n += 64 + len(tc.ID) + len(tc.Function.Name) + len(tc.Function.Arguments)
		}
	}
	for i := range r.Tools {
		f := &r.Tools[i].Function
		n += 80 + len(f.Name) + len(f.Description) + len(f.Parameters)
	}
	for _, s := range r.Stop {
		n += 3 + len(s)
	}
	if rf := r.ResponseFormat; rf != nil && rf.JSONSchema != nil {
		n += 64 + len(rf.JSONSchema.Name) + len(rf.JSONSchema.Description) + len(rf.JSONSchema.Schema)
	}
	return n + n/16
}

// chatResponseSize is chatRequestSize for a response.
func chatResponseSize(r *ChatResponse) int {
	n := 300 + len(r.ID) + len(r.Model) + len(r.add.Usage) + len(r.add.Top)
	for i := range r.Choices {
		m := &r.Choices[i].Message
		n += 112 + len(m.Content) + len(m.ReasoningContent) + len(m.Reasoning) + len(r.Choices[i].Logprobs)
		for j := range m.ToolCalls {
			tc := &m.ToolCalls[j]
			n += 64 + len(tc.ID) + len(tc.Function.Name) + len(tc.Function.Arguments)
		}
	}
	return n + n/16
}

// contentPartsSize is chatRequestSize for content parts.
func contentPartsSize(parts []ContentPart) int {
	n := 2
	for i := range parts {
		p := &parts[i]
		n += 48
		if p.Text != nil {
			n += len(*p.Text)
		}
		if p.ImageURL != nil {
			n += len(p.ImageURL.URL) + len(p.ImageURL.Detail)
		}
		if p.Refusal != nil {
			n += len(*p.Refusal)
		}
	}
	return n + n/16
}
