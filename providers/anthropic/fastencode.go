package anthropic

import (
	"encoding/json"
	"strconv"

	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
)

// Hand-written encoders for the request the gateway sends upstream (MessagesRequest), the
// message it answers with (Message) and their content blocks, which json.Marshal walked by
// reflection on every translated request and answer, compacting every json.RawMessage with
// its byte-at-a-time scanner. These append exactly the bytes json.Marshal writes, so that
// encoding/json stays the reference:
//   - fields in declaration order, omitempty as encoding/json has it (an empty string, a
//     false bool, a nil pointer, an empty slice or json.RawMessage is left out; a pointer to
//     a zero value is not);
//   - a nil slice without omitempty is null, an empty one [];
//   - strings quoted as json.Marshal quotes them (<, >, &, U+2028 and U+2029 escaped,
//     invalid UTF-8 as U+FFFD), json.RawMessage compacted and escaped the same way.
//
// None of these types has a MarshalJSON method of its own, nor a map or an interface field,
// so every value has a fast encoding except those json.Marshal refuses: a json.RawMessage
// that is not valid JSON (an empty non-nil one without omitempty included) and a NaN or
// infinite float. For those the appenders report false and the caller calls json.Marshal,
// which returns its error. FuzzFastEncodeRequest, FuzzFastEncodeMessage, FuzzFastEncodeBlocks
// (values json.Unmarshal reads) and FuzzFastEncodeValues (values built in Go, invalid UTF-8
// and invalid JSON included) hold the appenders to json.Marshal.

// appendMessagesRequest appends r as json.Marshal writes it, or reports false and returns b
// unchanged.
func appendMessagesRequest(b []byte, r *MessagesRequest) ([]byte, bool) {
	start := len(b)
	var ok bool
	b = append(b, `{"model":`...)
	b = rawjson.AppendStringLikeMarshal(b, r.Model)
	if r.MaxTokens != nil {
		b = append(b, `,"max_tokens":`...)
		b = strconv.AppendInt(b, *r.MaxTokens, 10)
	}
	b = append(b, `,"messages":`...)
	if r.Messages == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range r.Messages {
			if i > 0 {
				b = append(b, ',')
			}
			m := &r.Messages[i]
			b = append(b, `{"role":`...)
			b = rawjson.AppendStringLikeMarshal(b, m.Role)
			b = append(b, `,"content":`...)
			if b, ok = rawjson.AppendRawLikeMarshal(b, m.Content); !ok {
				return b[:start], false
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if b, ok = rawjson.AppendOmitEmptyRaw(b, `,"system":`, r.System); !ok {
		return b[:start], false
	}
	if len(r.Tools) > 0 {
		b = append(b, `,"tools":[`...)
		for i := range r.Tools {
			if i > 0 {
				b = append(b, ',')
			}
			if b, ok = appendTool(b, &r.Tools[i]); !ok {
				return b[:start], false
			}
		}
		b = append(b, ']')
	}
	if tc := r.ToolChoice; tc != nil {
		b = append(b, `,"tool_choice":{"type":`...)
		b = rawjson.AppendStringLikeMarshal(b, tc.Type)
		b = rawjson.AppendOmitEmptyString(b, `,"name":`, tc.Name)
		if tc.DisableParallelToolUse != nil {
			b = append(b, `,"disable_parallel_tool_use":`...)
			b = strconv.AppendBool(b, *tc.DisableParallelToolUse)
		}
		b = append(b, '}')
	}
	if r.Temperature != nil {
		b = append(b, `,"temperature":`...)
		if b, ok = rawjson.AppendFloat64LikeMarshal(b, *r.Temperature); !ok {
			return b[:start], false
		}
	}
	if r.TopP != nil {
		b = append(b, `,"top_p":`...)
		if b, ok = rawjson.AppendFloat64LikeMarshal(b, *r.TopP); !ok {
			return b[:start], false
		}
	}
	if r.TopK != nil {
		b = append(b, `,"top_k":`...)
		b = strconv.AppendInt(b, *r.TopK, 10)
	}
	if len(r.StopSequences) > 0 {
		b = rawjson.AppendStringsLikeMarshal(append(b, `,"stop_sequences":`...), r.StopSequences)
	}
	if r.Stream {
		b = append(b, `,"stream":true`...)
	}
	if t := r.Thinking; t != nil {
		b = append(b, `,"thinking":{"type":`...)
		b = rawjson.AppendStringLikeMarshal(b, t.Type)
		if t.BudgetTokens != nil {
			b = append(b, `,"budget_tokens":`...)
			b = strconv.AppendInt(b, *t.BudgetTokens, 10)
		}
		b = append(b, '}')
	}
	if md := r.Metadata; md != nil {
		if md.UserID == "" {
			b = append(b, `,"metadata":{}`...)
		} else {
			b = append(b, `,"metadata":{"user_id":`...)
			b = rawjson.AppendStringLikeMarshal(b, md.UserID)
			b = append(b, '}')
		}
	}
	if oc := r.OutputConfig; oc != nil {
		b = append(b, `,"output_config":{`...)
		sep := ""
		if oc.Effort != "" {
			b = append(b, `"effort":`...)
			b = rawjson.AppendStringLikeMarshal(b, oc.Effort)
			sep = ","
		}
		if f := oc.Format; f != nil {
			b = append(b, sep...)
			b = append(b, `"format":{"type":`...)
			b = rawjson.AppendStringLikeMarshal(b, f.Type)
			if b, ok = rawjson.AppendOmitEmptyRaw(b, `,"schema":`, f.Schema); !ok {
				return b[:start], false
			}
			b = append(b, '}')
		}
		b = append(b, '}')
	}
	return append(b, '}'), true
}

func appendTool(b []byte, t *Tool) ([]byte, bool) {
	b = append(b, '{')
	if t.Type != "" {
		b = append(b, `"type":`...)
		b = rawjson.AppendStringLikeMarshal(b, t.Type)
		b = append(b, ',')
	}
	b = append(b, `"name":`...)
	b = rawjson.AppendStringLikeMarshal(b, t.Name)
	b = rawjson.AppendOmitEmptyString(b, `,"description":`, t.Description)
	b, ok := rawjson.AppendOmitEmptyRaw(b, `,"input_schema":`, t.InputSchema)
	return append(b, '}'), ok
}

// appendMessage appends m as json.Marshal writes it, or reports false and returns b
// unchanged.
func appendMessage(b []byte, m *Message) ([]byte, bool) {
	start := len(b)
	var ok bool
	b = append(b, `{"id":`...)
	b = rawjson.AppendStringLikeMarshal(b, m.ID)
	b = append(b, `,"type":`...)
	b = rawjson.AppendStringLikeMarshal(b, m.Type)
	b = append(b, `,"role":`...)
	b = rawjson.AppendStringLikeMarshal(b, m.Role)
	b = append(b, `,"model":`...)
	b = rawjson.AppendStringLikeMarshal(b, m.Model)
	b = append(b, `,"content":`...)
	if b, ok = appendContentBlocks(b, m.Content); !ok {
		return b[:start], false
	}
	b = append(b, `,"stop_reason":`...)
	b = rawjson.AppendStringPtrLikeMarshal(b, m.StopReason)
	b = append(b, `,"stop_sequence":`...)
	b = rawjson.AppendStringPtrLikeMarshal(b, m.StopSequence)
	b = append(b, `,"usage":`...)
	if b, ok = rawjson.AppendRawLikeMarshal(b, m.Usage); !ok {
		return b[:start], false
	}
	// Into the usage object, which ends b; a usage that is not an object declines.
	if b, ok = rawjson.AppendMembersInto(b, m.add.Usage); !ok {
		return b[:start], false
	}
	return append(rawjson.AppendMembers(b, m.add.Top), '}'), true
}

// appendContentBlocks appends blocks as json.Marshal writes them (null for a nil slice), or
// reports false and returns b unchanged.
func appendContentBlocks(b []byte, blocks []ContentBlock) ([]byte, bool) {
	if blocks == nil {
		return append(b, "null"...), true
	}
	start := len(b)
	var ok bool
	b = append(b, '[')
	for i := range blocks {
		if i > 0 {
			b = append(b, ',')
		}
		if b, ok = appendContentBlock(b, &blocks[i]); !ok {
			return b[:start], false
		}
	}
	return append(b, ']'), true
}

// appendContentBlock appends c as json.Marshal writes it; on false, b may hold part of it.
func appendContentBlock(b []byte, c *ContentBlock) ([]byte, bool) {
	var ok bool
	b = append(b, `{"type":`...)
	b = rawjson.AppendStringLikeMarshal(b, c.Type)
	if c.Text != nil {
		b = append(b, `,"text":`...)
		b = rawjson.AppendStringLikeMarshal(b, *c.Text)
	}
	if s := c.Source; s != nil {
		b = append(b, `,"source":{"type":`...)
		b = rawjson.AppendStringLikeMarshal(b, s.Type)
		b = rawjson.AppendOmitEmptyString(b, `,"media_type":`, s.MediaType)
		b = rawjson.AppendOmitEmptyString(b, `,"data":`, s.Data)
		b = rawjson.AppendOmitEmptyString(b, `,"url":`, s.URL)
		b = rawjson.AppendOmitEmptyString(b, `,"file_id":`, s.FileID)
		b = append(b, '}')
	}
	b = rawjson.AppendOmitEmptyString(b, `,"id":`, c.ID)
	b = rawjson.AppendOmitEmptyString(b, `,"name":`, c.Name)
	if b, ok = rawjson.AppendOmitEmptyRaw(b, `,"input":`, c.Input); !ok {
		return b, false
	}
	b = rawjson.AppendOmitEmptyString(b, `,"tool_use_id":`, c.ToolUseID)
	if b, ok = rawjson.AppendOmitEmptyRaw(b, `,"content":`, c.Content); !ok {
		return b, false
	}
	if c.IsError {
		b = append(b, `,"is_error":true`...)
	}
	if c.Thinking != nil {
		b = append(b, `,"thinking":`...)
		b = rawjson.AppendStringLikeMarshal(b, *c.Thinking)
	}
	if c.Signature != nil {
		b = append(b, `,"signature":`...)
		b = rawjson.AppendStringLikeMarshal(b, *c.Signature)
	}
	b = rawjson.AppendOmitEmptyString(b, `,"data":`, c.Data)
	return append(b, '}'), true
}

// Sizes to allocate an encoding at once: the variable parts, plus room for keys and
// escapes. An underestimate only costs a copy.

func requestSize(r *MessagesRequest) int {
	n := 512 + len(r.Model) + len(r.System)
	for i := range r.Messages {
		n += 32 + len(r.Messages[i].Content)
	}
	for i := range r.Tools {
		t := &r.Tools[i]
		n += 64 + len(t.Name) + len(t.Description) + len(t.InputSchema)
	}
	for _, s := range r.StopSequences {
		n += 8 + len(s)
	}
	return n
}

func messageSize(m *Message) int {
	return 160 + len(m.ID) + len(m.Model) + len(m.Usage) + len(m.add.Usage) + len(m.add.Top) + blocksSize(m.Content)
}

func blocksSize(blocks []ContentBlock) int {
	n := 2
	for i := range blocks {
		c := &blocks[i]
		n += 48 + len(c.ID) + len(c.Name) + len(c.Input) + len(c.ToolUseID) + len(c.Content) + len(c.Data)
		if c.Text != nil {
			n += len(*c.Text)
		}
		if c.Thinking != nil {
			n += len(*c.Thinking)
		}
		if c.Signature != nil {
			n += len(*c.Signature)
		}
		if s := c.Source; s != nil {
			n += 64 + len(s.MediaType) + len(s.Data) + len(s.URL) + len(s.FileID)
		}
	}
	return n + n/8 // text has newlines and quotes to escape
}

// marshalRequest is json.Marshal(r), on the fast path when it can.
func marshalRequest(r *MessagesRequest) ([]byte, error) {
	if b, ok := appendMessagesRequest(make([]byte, 0, requestSize(r)), r); ok {
		return b, nil
	}
	// A copy for encoding/json's interface argument, so that the caller's request, built
	// on its stack for the fast path, stays there.
	c := new(MessagesRequest)
	*c = *r
	return json.Marshal(c)
}

// marshalBlocks is json.Marshal(blocks), on the fast path when it can.
func marshalBlocks(blocks []ContentBlock) ([]byte, error) {
	if b, ok := appendContentBlocks(make([]byte, 0, blocksSize(blocks)), blocks); ok {
		return b, nil
	}
	return json.Marshal(blocks)
}
