package anthropic

import (
	"unicode/utf8"

	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
)

// Hand-written decoders for the request a client sends (MessagesRequest) and the message the
// API answers (Message). json.Unmarshal's reflection is the largest cost of a translated
// request; these fill the structs exactly as it would, for the shapes real clients and the
// API send. Each fastDecode reports false for input it does not reproduce exactly, and the
// caller then resets the struct and falls back to json.Unmarshal, so that its result and its
// errors stay the reference. What is left to encoding/json:
//   - invalid JSON, which it refuses (validJSON is json.Valid, faster);
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
	if !validJSON(data) {
		return false
	}
	var seen keySet
	return eachMember(data, func(key, v []byte) bool {
		switch string(key) {
		case "id":
			return seen.first(0) && rawjson.DecodeString(v, &m.ID)
		case "type":
			return seen.first(1) && rawjson.DecodeString(v, &m.Type)
		case "role":
			return seen.first(2) && rawjson.DecodeString(v, &m.Role)
		case "model":
			return seen.first(3) && rawjson.DecodeString(v, &m.Model)
		case "content":
			return seen.first(4) && decodeSlice(v, &m.Content)
		case "stop_reason":
			return seen.first(5) && rawjson.DecodeStringPtr(v, &m.StopReason)
		case "stop_sequence":
			return seen.first(6) && rawjson.DecodeStringPtr(v, &m.StopSequence)
		case "usage":
			return seen.first(7) && m.Usage.UnmarshalJSON(v) == nil
		}
		return ignorable(key)
	})
}

// fastDecode fills r from the JSON body data as json.Unmarshal would into a zero
// MessagesRequest, or reports false, leaving r partly filled.
func (r *MessagesRequest) fastDecode(data []byte) bool {
	if !validJSON(data) {
		return false
	}
	var seen keySet
	return eachMember(data, func(key, v []byte) bool {
		switch string(key) {
		case "model":
			return seen.first(0) && rawjson.DecodeString(v, &r.Model)
		case "max_tokens":
			return seen.first(1) && rawjson.DecodeInt64Ptr(v, &r.MaxTokens)
		case "messages":
			return seen.first(2) && decodeSlice(v, &r.Messages)
		case "system":
			return seen.first(3) && r.System.UnmarshalJSON(v) == nil
		case "tools":
			return seen.first(4) && decodeSlice(v, &r.Tools)
		case "tool_choice":
			return seen.first(5) && decodePtr(v, &r.ToolChoice)
		case "temperature":
			return seen.first(6) && rawjson.DecodeFloat64Ptr(v, &r.Temperature)
		case "top_p":
			return seen.first(7) && rawjson.DecodeFloat64Ptr(v, &r.TopP)
		case "top_k":
			return seen.first(8) && rawjson.DecodeInt64Ptr(v, &r.TopK)
		case "stop_sequences":
			return seen.first(9) && decodeStrings(v, &r.StopSequences)
		case "stream":
			return seen.first(10) && rawjson.DecodeBool(v, &r.Stream)
		case "thinking":
			return seen.first(11) && decodePtr(v, &r.Thinking)
		case "metadata":
			return seen.first(12) && decodePtr(v, &r.Metadata)
		case "output_config":
			return seen.first(13) && decodePtr(v, &r.OutputConfig)
		}
		return ignorable(key)
	})
}

// The nested types' decoders take a value of a body validJSON has checked.

func (b *ContentBlock) fastDecode(data []byte) bool {
	var seen keySet
	return eachMember(data, func(key, v []byte) bool {
		switch string(key) {
		case "type":
			return seen.first(0) && rawjson.DecodeString(v, &b.Type)
		case "text":
			return seen.first(1) && rawjson.DecodeStringPtr(v, &b.Text)
		case "source":
			return seen.first(2) && decodePtr(v, &b.Source)
		case "id":
			return seen.first(3) && rawjson.DecodeString(v, &b.ID)
		case "name":
			return seen.first(4) && rawjson.DecodeString(v, &b.Name)
		case "input":
			return seen.first(5) && b.Input.UnmarshalJSON(v) == nil
		case "tool_use_id":
			return seen.first(6) && rawjson.DecodeString(v, &b.ToolUseID)
		case "content":
			return seen.first(7) && b.Content.UnmarshalJSON(v) == nil
		case "is_error":
			return seen.first(8) && rawjson.DecodeBool(v, &b.IsError)
		case "thinking":
			return seen.first(9) && rawjson.DecodeStringPtr(v, &b.Thinking)
		case "signature":
			return seen.first(10) && rawjson.DecodeStringPtr(v, &b.Signature)
		case "data":
			return seen.first(11) && rawjson.DecodeString(v, &b.Data)
		}
		return ignorable(key)
	})
}

func (s *ImageSource) fastDecode(data []byte) bool {
	var seen keySet
	return eachMember(data, func(key, v []byte) bool {
		switch string(key) {
		case "type":
			return seen.first(0) && rawjson.DecodeString(v, &s.Type)
		case "media_type":
			return seen.first(1) && rawjson.DecodeString(v, &s.MediaType)
		case "data":
			return seen.first(2) && rawjson.DecodeString(v, &s.Data)
		case "url":
			return seen.first(3) && rawjson.DecodeString(v, &s.URL)
		case "file_id":
			return seen.first(4) && rawjson.DecodeString(v, &s.FileID)
		}
		return ignorable(key)
	})
}

func (m *MessageParam) fastDecode(data []byte) bool {
	var seen keySet
	return eachMember(data, func(key, v []byte) bool {
		switch string(key) {
		case "role":
			return seen.first(0) && rawjson.DecodeString(v, &m.Role)
		case "content":
			return seen.first(1) && m.Content.UnmarshalJSON(v) == nil
		}
		return ignorable(key)
	})
}

func (t *Tool) fastDecode(data []byte) bool {
	var seen keySet
	return eachMember(data, func(key, v []byte) bool {
		switch string(key) {
		case "type":
			return seen.first(0) && rawjson.DecodeString(v, &t.Type)
		case "name":
			return seen.first(1) && rawjson.DecodeString(v, &t.Name)
		case "description":
			return seen.first(2) && rawjson.DecodeString(v, &t.Description)
		case "input_schema":
			return seen.first(3) && t.InputSchema.UnmarshalJSON(v) == nil
		}
		return ignorable(key)
	})
}

func (c *ToolChoice) fastDecode(data []byte) bool {
	var seen keySet
	return eachMember(data, func(key, v []byte) bool {
		switch string(key) {
		case "type":
			return seen.first(0) && rawjson.DecodeString(v, &c.Type)
		case "name":
			return seen.first(1) && rawjson.DecodeString(v, &c.Name)
		case "disable_parallel_tool_use":
			return seen.first(2) && rawjson.DecodeBoolPtr(v, &c.DisableParallelToolUse)
		}
		return ignorable(key)
	})
}

func (t *Thinking) fastDecode(data []byte) bool {
	var seen keySet
	return eachMember(data, func(key, v []byte) bool {
		switch string(key) {
		case "type":
			return seen.first(0) && rawjson.DecodeString(v, &t.Type)
		case "budget_tokens":
			return seen.first(1) && rawjson.DecodeInt64Ptr(v, &t.BudgetTokens)
		}
		return ignorable(key)
	})
}

func (m *Metadata) fastDecode(data []byte) bool {
	var seen keySet
	return eachMember(data, func(key, v []byte) bool {
		if string(key) == "user_id" {
			return seen.first(0) && rawjson.DecodeString(v, &m.UserID)
		}
		return ignorable(key)
	})
}

func (o *OutputConfig) fastDecode(data []byte) bool {
	var seen keySet
	return eachMember(data, func(key, v []byte) bool {
		switch string(key) {
		case "effort":
			return seen.first(0) && rawjson.DecodeString(v, &o.Effort)
		case "format":
			return seen.first(1) && decodePtr(v, &o.Format)
		}
		return ignorable(key)
	})
}

func (f *OutputFormat) fastDecode(data []byte) bool {
	var seen keySet
	return eachMember(data, func(key, v []byte) bool {
		switch string(key) {
		case "type":
			return seen.first(0) && rawjson.DecodeString(v, &f.Type)
		case "schema":
			return seen.first(1) && f.Schema.UnmarshalJSON(v) == nil
		}
		return ignorable(key)
	})
}

// keySet records the fields of an object already decoded, by index.
type keySet uint32

// first marks field i seen and reports whether it was not already: a repeated key goes to
// encoding/json, which decodes it into the field as the first left it (a later null keeps
// a string, a later object merges into the struct).
func (s *keySet) first(i uint) bool {
	if *s&(1<<i) != 0 {
		return false
	}
	*s |= 1 << i
	return true
}

// ignorable tells whether an unknown key is one encoding/json ignores too. It matches keys
// case-insensitively, folding Unicode ("ſtop_reason" is stop_reason), and unescapes them
// first; the field names are lower-case ASCII, so a key without escapes, upper-case letters
// or non-ASCII bytes that is not one of them matches none.
func ignorable(key []byte) bool {
	for _, c := range key {
		if c == '\\' || c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' {
			return false
		}
	}
	return true
}

// eachMember calls fn for each member of the object v with its raw key and value, and
// reports whether v is an object and fn accepted every member.
func eachMember(v []byte, fn func(key, v []byte) bool) bool {
	ok := true
	err := rawjson.Each(v, func(key []byte, f rawjson.Field) bool {
		ok = fn(key, v[f.ValueStart:f.ValueEnd])
		return ok
	})
	return err == nil && ok
}

// decoder is a pointer to a type with a fastDecode method.
type decoder[T any] interface {
	*T
	fastDecode(v []byte) bool
}

// decodePtr decodes a pointer to a struct: null makes it nil, an object a new struct.
func decodePtr[T any, P decoder[T]](v []byte, dst **T) bool {
	if rawjson.IsNull(v) {
		*dst = nil
		return true
	}
	p := new(T)
	*dst = p
	return P(p).fastDecode(v)
}

// decodeSlice decodes an array of structs. null makes the slice nil and [] an empty one, as
// for encoding/json; a null element is a zero struct.
func decodeSlice[T any, P decoder[T]](v []byte, dst *[]T) bool {
	if rawjson.IsNull(v) {
		*dst = nil
		return true
	}
	out := []T{}
	ok := true
	err := rawjson.EachElement(v, func(e []byte) bool {
		var zero T
		out = append(out, zero)
		if !rawjson.IsNull(e) {
			ok = P(&out[len(out)-1]).fastDecode(e)
		}
		return ok
	})
	*dst = out
	return err == nil && ok
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

// validJSON is json.Valid, faster (rawjson.Valid): the fast path must refuse what
// json.Unmarshal refuses, and the rawjson walkers expect well-formed input.
func validJSON(data []byte) bool { return rawjson.Valid(data) }

// fastDecode reads a usage object, which every answer and the end of every stream carry.
func (u *Usage) fastDecode(data []byte) bool {
	var seen keySet
	return eachMember(data, func(key, v []byte) bool {
		switch string(key) {
		case "input_tokens":
			return seen.first(0) && decodeCountPtr(v, &u.InputTokens)
		case "cache_creation_input_tokens":
			return seen.first(1) && decodeCountPtr(v, &u.CacheCreationInputTokens)
		case "cache_read_input_tokens":
			return seen.first(2) && decodeCountPtr(v, &u.CacheReadInputTokens)
		case "output_tokens":
			return seen.first(3) && decodeCountPtr(v, &u.OutputTokens)
		case "output_tokens_details":
			return seen.first(4) && decodePtr(v, &u.OutputTokensDetails)
		}
		return ignorable(key)
	})
}

func (d *OutputTokensDetails) fastDecode(data []byte) bool {
	var seen keySet
	return eachMember(data, func(key, v []byte) bool {
		if string(key) == "thinking_tokens" {
			return seen.first(0) && decodeCountPtr(v, &d.ThinkingTokens)
		}
		return ignorable(key)
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
