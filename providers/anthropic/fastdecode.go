package anthropic

import (
	"bytes"
	"strconv"
	"strings"
	"unicode/utf16"
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
//     range: it reports an error;
//   - strings with invalid UTF-8 and no escape, which it replaces with U+FFFD.
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
			return seen.first(0) && decodeString(v, &m.ID)
		case "type":
			return seen.first(1) && decodeString(v, &m.Type)
		case "role":
			return seen.first(2) && decodeString(v, &m.Role)
		case "model":
			return seen.first(3) && decodeString(v, &m.Model)
		case "content":
			return seen.first(4) && decodeSlice(v, &m.Content)
		case "stop_reason":
			return seen.first(5) && decodeStringPtr(v, &m.StopReason)
		case "stop_sequence":
			return seen.first(6) && decodeStringPtr(v, &m.StopSequence)
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
			return seen.first(0) && decodeString(v, &r.Model)
		case "max_tokens":
			return seen.first(1) && decodeInt64Ptr(v, &r.MaxTokens)
		case "messages":
			return seen.first(2) && decodeSlice(v, &r.Messages)
		case "system":
			return seen.first(3) && r.System.UnmarshalJSON(v) == nil
		case "tools":
			return seen.first(4) && decodeSlice(v, &r.Tools)
		case "tool_choice":
			return seen.first(5) && decodePtr(v, &r.ToolChoice)
		case "temperature":
			return seen.first(6) && decodeFloat64Ptr(v, &r.Temperature)
		case "top_p":
			return seen.first(7) && decodeFloat64Ptr(v, &r.TopP)
		case "top_k":
			return seen.first(8) && decodeInt64Ptr(v, &r.TopK)
		case "stop_sequences":
			return seen.first(9) && decodeStrings(v, &r.StopSequences)
		case "stream":
			return seen.first(10) && decodeBool(v, &r.Stream)
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
			return seen.first(0) && decodeString(v, &b.Type)
		case "text":
			return seen.first(1) && decodeStringPtr(v, &b.Text)
		case "source":
			return seen.first(2) && decodePtr(v, &b.Source)
		case "id":
			return seen.first(3) && decodeString(v, &b.ID)
		case "name":
			return seen.first(4) && decodeString(v, &b.Name)
		case "input":
			return seen.first(5) && b.Input.UnmarshalJSON(v) == nil
		case "tool_use_id":
			return seen.first(6) && decodeString(v, &b.ToolUseID)
		case "content":
			return seen.first(7) && b.Content.UnmarshalJSON(v) == nil
		case "is_error":
			return seen.first(8) && decodeBool(v, &b.IsError)
		case "thinking":
			return seen.first(9) && decodeStringPtr(v, &b.Thinking)
		case "signature":
			return seen.first(10) && decodeStringPtr(v, &b.Signature)
		case "data":
			return seen.first(11) && decodeString(v, &b.Data)
		}
		return ignorable(key)
	})
}

func (s *ImageSource) fastDecode(data []byte) bool {
	var seen keySet
	return eachMember(data, func(key, v []byte) bool {
		switch string(key) {
		case "type":
			return seen.first(0) && decodeString(v, &s.Type)
		case "media_type":
			return seen.first(1) && decodeString(v, &s.MediaType)
		case "data":
			return seen.first(2) && decodeString(v, &s.Data)
		case "url":
			return seen.first(3) && decodeString(v, &s.URL)
		case "file_id":
			return seen.first(4) && decodeString(v, &s.FileID)
		}
		return ignorable(key)
	})
}

func (m *MessageParam) fastDecode(data []byte) bool {
	var seen keySet
	return eachMember(data, func(key, v []byte) bool {
		switch string(key) {
		case "role":
			return seen.first(0) && decodeString(v, &m.Role)
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
			return seen.first(0) && decodeString(v, &t.Type)
		case "name":
			return seen.first(1) && decodeString(v, &t.Name)
		case "description":
			return seen.first(2) && decodeString(v, &t.Description)
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
			return seen.first(0) && decodeString(v, &c.Type)
		case "name":
			return seen.first(1) && decodeString(v, &c.Name)
		case "disable_parallel_tool_use":
			return seen.first(2) && decodeBoolPtr(v, &c.DisableParallelToolUse)
		}
		return ignorable(key)
	})
}

func (t *Thinking) fastDecode(data []byte) bool {
	var seen keySet
	return eachMember(data, func(key, v []byte) bool {
		switch string(key) {
		case "type":
			return seen.first(0) && decodeString(v, &t.Type)
		case "budget_tokens":
			return seen.first(1) && decodeInt64Ptr(v, &t.BudgetTokens)
		}
		return ignorable(key)
	})
}

func (m *Metadata) fastDecode(data []byte) bool {
	var seen keySet
	return eachMember(data, func(key, v []byte) bool {
		if string(key) == "user_id" {
			return seen.first(0) && decodeString(v, &m.UserID)
		}
		return ignorable(key)
	})
}

func (o *OutputConfig) fastDecode(data []byte) bool {
	var seen keySet
	return eachMember(data, func(key, v []byte) bool {
		switch string(key) {
		case "effort":
			return seen.first(0) && decodeString(v, &o.Effort)
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
			return seen.first(0) && decodeString(v, &f.Type)
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
		ok = decodeString(e, &s)
		out = append(out, s)
		return ok
	})
	*dst = out
	return err == nil && ok
}

// decodeString decodes a string field; null leaves it unchanged, as for encoding/json.
func decodeString(v []byte, dst *string) bool {
	if rawjson.IsNull(v) {
		return true
	}
	s, ok := unquote(v)
	if ok {
		*dst = s
	}
	return ok
}

// decodeStringPtr decodes a *string field; null makes it nil.
func decodeStringPtr(v []byte, dst **string) bool {
	if rawjson.IsNull(v) {
		*dst = nil
		return true
	}
	s, ok := unquote(v)
	if ok {
		*dst = &s
	}
	return ok
}

// unquote decodes the JSON string v as encoding/json does; ok is false when v is not a
// string, and for invalid UTF-8 without escapes, which encoding/json replaces with U+FFFD
// and rawjson.String copies as it is.
func unquote(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	inner := v[1 : len(v)-1]
	esc := bytes.IndexByte(inner, '\\')
	switch {
	case esc < 0 && utf8.Valid(inner):
		return string(inner), true
	case esc < 0:
		return "", false
	case utf8.Valid(inner):
		return unescape(inner, esc), true
	}
	// Escapes and invalid UTF-8, seldom seen: rawjson.String has encoding/json decode them.
	return rawjson.String(v)
}

// unescape decodes the inside of a JSON string, valid UTF-8 with its first escape at esc,
// as encoding/json's unquote does. rawjson.String has encoding/json decode any escaped
// string, a reflective call and a second validation that cost more than the rest of a
// message's decoding when its text has newlines.
func unescape(inner []byte, esc int) string {
	var b strings.Builder
	b.Grow(len(inner))
	for i := 0; ; {
		b.Write(inner[i:esc])
		i = esc
		if i == len(inner) {
			return b.String()
		}
		// The JSON is valid: an escape has its character, and \u its four hex digits.
		switch c := inner[i+1]; c {
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r := hexRune(inner[i+2 : i+6])
			i += 4
			if utf16.IsSurrogate(r) {
				// A valid pair is one rune; otherwise encoding/json writes U+FFFD for this
				// escape and reads the next one on its own.
				pair := utf8.RuneError
				if len(inner) >= i+8 && inner[i+2] == '\\' && inner[i+3] == 'u' {
					pair = utf16.DecodeRune(r, hexRune(inner[i+4:i+8]))
				}
				if pair != utf8.RuneError {
					i += 6
				}
				r = pair
			}
			b.WriteRune(r)
		default: // '"', '\\' and '/'
			b.WriteByte(c)
		}
		i += 2
		if esc = bytes.IndexByte(inner[i:], '\\'); esc < 0 {
			esc = len(inner)
		} else {
			esc += i
		}
	}
}

// hexRune reads four hex digits.
func hexRune(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c <= '9':
			c -= '0'
		case c <= 'F':
			c -= 'A' - 10
		default:
			c -= 'a' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// decodeBool decodes a bool field; null leaves it unchanged.
func decodeBool(v []byte, dst *bool) bool {
	if rawjson.IsNull(v) {
		return true
	}
	b, ok := rawjson.Bool(v)
	if ok {
		*dst = b
	}
	return ok
}

// decodeBoolPtr decodes a *bool field; null makes it nil.
func decodeBoolPtr(v []byte, dst **bool) bool {
	if rawjson.IsNull(v) {
		*dst = nil
		return true
	}
	b, ok := rawjson.Bool(v)
	if ok {
		*dst = &b
	}
	return ok
}

// decodeInt64Ptr decodes a *int64 field; null makes it nil. Like encoding/json it takes
// only numbers strconv.ParseInt reads: 1.0, 1e3 and out-of-range values are its errors.
func decodeInt64Ptr(v []byte, dst **int64) bool {
	if rawjson.IsNull(v) {
		*dst = nil
		return true
	}
	if !isNumber(v) {
		return false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return false
	}
	*dst = &n
	return true
}

// decodeFloat64Ptr decodes a *float64 field; null makes it nil. A number out of float64's
// range is an error for encoding/json.
func decodeFloat64Ptr(v []byte, dst **float64) bool {
	if rawjson.IsNull(v) {
		*dst = nil
		return true
	}
	if !isNumber(v) {
		return false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		return false
	}
	*dst = &f
	return true
}

// isNumber tells a JSON number from the other values, given valid JSON.
func isNumber(v []byte) bool {
	return len(v) > 0 && (v[0] == '-' || '0' <= v[0] && v[0] <= '9')
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
