package anthropic

import (
	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
)

// Hand-written decoders for the request a client sends (MessagesRequest) and the message the
// API answers (Message). json.Unmarshal's reflection is the largest cost of a translated
// request; these fill the structs exactly as it would, for the shapes real clients and the
// API send. Each fastDecode reports false for input it does not reproduce exactly, and the
// caller then resets the struct and falls back to json.Unmarshal, so that its result and its
// errors stay the reference. What is left to encoding/json:
//   - invalid JSON, which it refuses (rawjson.Valid, json.Valid but faster);
//   - keys with an escape, an upper-case letter or a non-ASCII byte: it matches keys to
//     fields case-insensitively, with Unicode folding ("ſ" is "s");
//   - a key repeated within an object: it decodes the second value over the first;
//   - a value of a type the field cannot hold, an integer written as a float or out of
//     range: it reports an error.
//
// Field values are read by rawjson's decoders (rawjson.DecodeString and the like), which
// store what encoding/json would, strings included.
//
// json.RawMessage fields are filled by their UnmarshalJSON, which copies the bytes, as
// encoding/json has it do. FuzzMessageFastDecode and FuzzRequestFastDecode hold the
// decoders to json.Unmarshal.

// fastDecode fills m from the JSON body data as json.Unmarshal would into a zero Message, or
// reports false, leaving m partly filled.
func (m *Message) fastDecode(data []byte) bool {
	if !rawjson.Valid(data) {
		return false
	}
	return rawjson.DecodeFields(data, func(key, v []byte) (bool, bool) {
		switch string(key) {
		case "id":
			return true, rawjson.DecodeString(v, &m.ID)
		case "type":
			return true, rawjson.DecodeString(v, &m.Type)
		case "role":
			return true, rawjson.DecodeString(v, &m.Role)
		case "model":
			return true, rawjson.DecodeString(v, &m.Model)
		case "content":
			return true, rawjson.DecodeSlice(&m.Content, v, (*ContentBlock).fastDecode)
		case "stop_reason":
			return true, rawjson.DecodeStringPtr(v, &m.StopReason)
		case "stop_sequence":
			return true, rawjson.DecodeStringPtr(v, &m.StopSequence)
		case "usage":
			return true, m.Usage.UnmarshalJSON(v) == nil
		}
		return false, true
	})
}

// fastDecode fills r from the JSON body data as json.Unmarshal would into a zero
// MessagesRequest, or reports false, leaving r partly filled.
func (r *MessagesRequest) fastDecode(data []byte) bool {
	if !rawjson.Valid(data) {
		return false
	}
	return rawjson.DecodeFields(data, func(key, v []byte) (bool, bool) {
		switch string(key) {
		case "model":
			return true, rawjson.DecodeString(v, &r.Model)
		case "max_tokens":
			return true, rawjson.DecodeInt64Ptr(v, &r.MaxTokens)
		case "messages":
			return true, rawjson.DecodeSlice(&r.Messages, v, (*MessageParam).fastDecode)
		case "system":
			return true, r.System.UnmarshalJSON(v) == nil
		case "tools":
			return true, rawjson.DecodeSlice(&r.Tools, v, (*Tool).fastDecode)
		case "tool_choice":
			return true, rawjson.DecodePtr(&r.ToolChoice, v, (*ToolChoice).fastDecode)
		case "temperature":
			return true, rawjson.DecodeFloat64Ptr(v, &r.Temperature)
		case "top_p":
			return true, rawjson.DecodeFloat64Ptr(v, &r.TopP)
		case "top_k":
			return true, rawjson.DecodeInt64Ptr(v, &r.TopK)
		case "stop_sequences":
			return true, decodeStrings(v, &r.StopSequences)
		case "stream":
			return true, rawjson.DecodeBool(v, &r.Stream)
		case "thinking":
			return true, rawjson.DecodePtr(&r.Thinking, v, (*Thinking).fastDecode)
		case "metadata":
			return true, rawjson.DecodePtr(&r.Metadata, v, (*Metadata).fastDecode)
		case "output_config":
			return true, rawjson.DecodePtr(&r.OutputConfig, v, (*OutputConfig).fastDecode)
		}
		return false, true
	})
}

// The nested types' decoders take a value of a body rawjson.Valid has checked.

func (b *ContentBlock) fastDecode(data []byte) bool {
	return rawjson.DecodeFields(data, func(key, v []byte) (bool, bool) {
		switch string(key) {
		case "type":
			return true, rawjson.DecodeString(v, &b.Type)
		case "text":
			return true, rawjson.DecodeStringPtr(v, &b.Text)
		case "source":
			return true, rawjson.DecodePtr(&b.Source, v, (*ImageSource).fastDecode)
		case "id":
			return true, rawjson.DecodeString(v, &b.ID)
		case "name":
			return true, rawjson.DecodeString(v, &b.Name)
		case "input":
			return true, b.Input.UnmarshalJSON(v) == nil
		case "tool_use_id":
			return true, rawjson.DecodeString(v, &b.ToolUseID)
		case "content":
			return true, b.Content.UnmarshalJSON(v) == nil
		case "is_error":
			return true, rawjson.DecodeBool(v, &b.IsError)
		case "thinking":
			return true, rawjson.DecodeStringPtr(v, &b.Thinking)
		case "signature":
			return true, rawjson.DecodeStringPtr(v, &b.Signature)
		case "data":
			return true, rawjson.DecodeString(v, &b.Data)
		}
		return false, true
	})
}

func (s *ImageSource) fastDecode(data []byte) bool {
	return rawjson.DecodeFields(data, func(key, v []byte) (bool, bool) {
		switch string(key) {
		case "type":
			return true, rawjson.DecodeString(v, &s.Type)
		case "media_type":
			return true, rawjson.DecodeString(v, &s.MediaType)
		case "data":
			return true, rawjson.DecodeString(v, &s.Data)
		case "url":
			return true, rawjson.DecodeString(v, &s.URL)
		case "file_id":
			return true, rawjson.DecodeString(v, &s.FileID)
		}
		return false, true
	})
}

func (m *MessageParam) fastDecode(data []byte) bool {
	return rawjson.DecodeFields(data, func(key, v []byte) (bool, bool) {
		switch string(key) {
		case "role":
			return true, rawjson.DecodeString(v, &m.Role)
		case "content":
			return true, m.Content.UnmarshalJSON(v) == nil
		}
		return false, true
	})
}

func (t *Tool) fastDecode(data []byte) bool {
	return rawjson.DecodeFields(data, func(key, v []byte) (bool, bool) {
		switch string(key) {
		case "type":
			return true, rawjson.DecodeString(v, &t.Type)
		case "name":
			return true, rawjson.DecodeString(v, &t.Name)
		case "description":
			return true, rawjson.DecodeString(v, &t.Description)
		case "input_schema":
			return true, t.InputSchema.UnmarshalJSON(v) == nil
		}
		return false, true
	})
}

func (c *ToolChoice) fastDecode(data []byte) bool {
	return rawjson.DecodeFields(data, func(key, v []byte) (bool, bool) {
		switch string(key) {
		case "type":
			return true, rawjson.DecodeString(v, &c.Type)
		case "name":
			return true, rawjson.DecodeString(v, &c.Name)
		case "disable_parallel_tool_use":
			return true, rawjson.DecodeBoolPtr(v, &c.DisableParallelToolUse)
		}
		return false, true
	})
}

func (t *Thinking) fastDecode(data []byte) bool {
	return rawjson.DecodeFields(data, func(key, v []byte) (bool, bool) {
		switch string(key) {
		case "type":
			return true, rawjson.DecodeString(v, &t.Type)
		case "budget_tokens":
			return true, rawjson.DecodeInt64Ptr(v, &t.BudgetTokens)
		}
		return false, true
	})
}

func (m *Metadata) fastDecode(data []byte) bool {
	return rawjson.DecodeFields(data, func(key, v []byte) (bool, bool) {
		if string(key) == "user_id" {
			return true, rawjson.DecodeString(v, &m.UserID)
		}
		return false, true
	})
}

func (o *OutputConfig) fastDecode(data []byte) bool {
	return rawjson.DecodeFields(data, func(key, v []byte) (bool, bool) {
		switch string(key) {
		case "effort":
			return true, rawjson.DecodeString(v, &o.Effort)
		case "format":
			return true, rawjson.DecodePtr(&o.Format, v, (*OutputFormat).fastDecode)
		}
		return false, true
	})
}

func (f *OutputFormat) fastDecode(data []byte) bool {
	return rawjson.DecodeFields(data, func(key, v []byte) (bool, bool) {
		switch string(key) {
		case "type":
			return true, rawjson.DecodeString(v, &f.Type)
		case "schema":
			return true, f.Schema.UnmarshalJSON(v) == nil
		}
		return false, true
	})
}

// decodeStrings decodes an array of strings; a null element is "".
func decodeStrings(v []byte, dst *[]string) bool {
	if rawjson.IsNull(v) {
		*dst = nil
		return true
	}
	out := []string{}
	ok := true
	err := rawjson.EachElement(v, func(e []byte) bool {
		var s string
		ok = rawjson.DecodeString(e, &s)
		out = append(out, s)
		return ok
	})
	*dst = out
	return err == nil && ok
}

// fastDecode reads a usage object, which every answer and the end of every stream carry.
func (u *Usage) fastDecode(data []byte) bool {
	return rawjson.DecodeFields(data, func(key, v []byte) (bool, bool) {
		switch string(key) {
		case "input_tokens":
			return true, decodeCountPtr(v, &u.InputTokens)
		case "cache_creation_input_tokens":
			return true, decodeCountPtr(v, &u.CacheCreationInputTokens)
		case "cache_read_input_tokens":
			return true, decodeCountPtr(v, &u.CacheReadInputTokens)
		case "output_tokens":
			return true, decodeCountPtr(v, &u.OutputTokens)
		case "output_tokens_details":
			return true, rawjson.DecodePtr(&u.OutputTokensDetails, v, (*OutputTokensDetails).fastDecode)
		}
		return false, true
	})
}

func (d *OutputTokensDetails) fastDecode(data []byte) bool {
	return rawjson.DecodeFields(data, func(key, v []byte) (bool, bool) {
		if string(key) == "thinking_tokens" {
			return true, decodeCountPtr(v, &d.ThinkingTokens)
		}
		return false, true
	})
}

// decodeCountPtr decodes a *TokenCount: null makes it nil, anything else goes to the
// counter's own UnmarshalJSON, as encoding/json does.
func decodeCountPtr(v []byte, dst **TokenCount) bool {
	if rawjson.IsNull(v) {
		*dst = nil
		return true
	}
	c := new(TokenCount)
	*dst = c
	return c.UnmarshalJSON(v) == nil
}
