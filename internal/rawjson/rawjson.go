// Package rawjson reads and edits the top-level fields of a JSON object in place, without
// decoding and re-encoding the rest: the gateway forwards bodies byte for byte and only
// touches the few fields it owns (model, meta, stream_options, usage, id).
//
// The functions expect well-formed JSON (check once with json.Valid); on malformed input
// they return ErrMalformed rather than panic.
package rawjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"

	"github.com/modelgateway/caddy-modelgateway/internal/bufs"
)

// ErrMalformed is returned for input that is not a JSON object.
var ErrMalformed = errors.New("malformed json object")

// Field is one top-level member: the value is data[ValueStart:ValueEnd]; the whole member,
// key included, starts at KeyStart.
type Field struct {
	KeyStart   int
	ValueStart int
	ValueEnd   int
}

// Lookup finds the top-level key in the object data. When a key repeats, the last one
// wins, as it does for encoding/json.
func Lookup(data []byte, key string) (Field, bool, error) {
	var found Field
	ok := false
	err := Each(data, func(k []byte, f Field) bool {
		if keyEquals(k, key) {
			found, ok = f, true
		}
		return true
	})
	return found, ok, err
}

// Get returns the raw value of a top-level key, nil when absent.
func Get(data []byte, key string) ([]byte, error) {
	f, ok, err := Lookup(data, key)
	if err != nil || !ok {
		return nil, err
	}
	return data[f.ValueStart:f.ValueEnd], nil
}

// Each calls fn for every top-level member in order, with the raw (still escaped) key
// bytes; fn returns false to stop.
func Each(data []byte, fn func(key []byte, f Field) bool) error {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return ErrMalformed
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return nil
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return ErrMalformed
		}
		keyStart := i
		end, err := skipString(data, i)
		if err != nil {
			return err
		}
		key := data[i+1 : end-1]
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ':' {
			return ErrMalformed
		}
		i = skipSpace(data, i+1)
		vs := i
		ve, err := skipValue(data, i)
		if err != nil {
			return err
		}
		if !fn(key, Field{KeyStart: keyStart, ValueStart: vs, ValueEnd: ve}) {
			return nil
		}
		i = skipSpace(data, ve)
		if i >= len(data) {
			return ErrMalformed
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return nil
		default:
			return ErrMalformed
		}
	}
}

// Set returns data with the top-level key set to the raw JSON value: replaced in place when
// present, appended as the last member otherwise. data is not modified.
func Set(data []byte, key string, value []byte) ([]byte, error) {
	f, ok, err := Lookup(data, key)
	if err != nil {
		return nil, err
	}
	if ok {
		out := make([]byte, 0, len(data)-(f.ValueEnd-f.ValueStart)+len(value))
		out = append(out, data[:f.ValueStart]...)
		out = append(out, value...)
		return append(out, data[f.ValueEnd:]...), nil
	}
	end := bytes.LastIndexByte(data, '}')
	if end < 0 {
		return nil, ErrMalformed
	}
	empty := len(bytes.TrimSpace(data[bytes.IndexByte(data, '{')+1:end])) == 0
	out := make([]byte, 0, len(data)+len(key)+len(value)+4)
	out = append(out, data[:end]...)
	if !empty {
		out = append(out, ',')
	}
	out = AppendString(out, key)
	out = append(out, ':')
	out = append(out, value...)
	return append(out, data[end:]...), nil
}

// Delete returns data without the top-level key (every occurrence). data is not modified.
func Delete(data []byte, key string) ([]byte, error) {
	var spans [][2]int
	var prevEnd = -1
	first := true
	err := Each(data, func(k []byte, f Field) bool {
		if keyEquals(k, key) {
			if first {
				// Remove from the key through the comma that follows, if any.
				end := skipSpace(data, f.ValueEnd)
				if end < len(data) && data[end] == ',' {
					end = skipSpace(data, end+1)
				}
				spans = append(spans, [2]int{f.KeyStart, end})
			} else {
				// Remove from the comma before it through the value.
				spans = append(spans, [2]int{prevEnd, f.ValueEnd})
			}
		} else {
			first = false
		}
		prevEnd = f.ValueEnd
		return true
	})
	if err != nil || len(spans) == 0 {
		return data, err
	}
	out := make([]byte, 0, len(data))
	last := 0
	for _, s := range spans {
		out = append(out, data[last:s[0]]...)
		last = s[1]
	}
	return append(out, data[last:]...), nil
}

// String decodes a raw JSON string value exactly as encoding/json does; ok is false when
// raw is not a string. Escapes in valid UTF-8 are decoded here (model text is full of \n,
// and a reflective json.Unmarshal per string cost more than the rest of a decode); invalid
// UTF-8, which encoding/json rewrites with U+FFFD byte by byte, is left to encoding/json.
func String(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	inner := raw[1 : len(raw)-1]
	if utf8.Valid(inner) {
		esc := bytes.IndexByte(inner, '\\')
		if esc < 0 {
			if len(inner) <= maxCommon {
				if s, ok := common(inner); ok {
					return s, true
				}
			}
			return string(inner), true
		}
		return unescape(inner, esc), true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// UnmarshalString is json.Unmarshal(raw, &s) for raw, a value of a document already checked
// (a body the fast decoders or encoding/json read): String for a string, and encoding/json's
// own answer and error for anything else. A prompt's text goes through here, and encoding/json
// took four times as long as String over it (it checks the value again, then unquotes it).
func UnmarshalString(raw []byte) (string, error) {
	if s, ok := String(raw); ok {
		return s, nil
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err
}

// Elements returns the elements of the JSON array raw, a value of a document already
// checked, without copying them (json.Unmarshal into []json.RawMessage copies each one and
// checks them again); ErrMalformed when raw is not an array.
func Elements(raw []byte) ([][]byte, error) {
	var out [][]byte
	err := EachElement(raw, func(e []byte) bool {
		out = append(out, e)
		return true
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// maxCommon is the length of the longest value common knows.
const maxCommon = len("chat.completion.chunk")

// common returns a constant for the short values that recur in every chunk and answer of
// the chat and Messages formats (types, roles, reasons), so that decoding them allocates
// nothing: a stream decodes several of them per chunk.
func common(b []byte) (string, bool) {
	switch string(b) {
	case "":
		return "", true
	case "text":
		return "text", true
	case "text_delta":
		return "text_delta", true
	case "content_block_start":
		return "content_block_start", true
	case "content_block_delta":
		return "content_block_delta", true
	case "content_block_stop":
		return "content_block_stop", true
	case "message_start":
		return "message_start", true
	case "message_delta":
		return "message_delta", true
	case "message_stop":
		return "message_stop", true
	case "message":
		return "message", true
	case "ping":
		return "ping", true
	case "assistant":
		return "assistant", true
	case "user":
		return "user", true
	case "system":
		return "system", true
	case "tool":
		return "tool", true
	case "function":
		return "function", true
	case "stop":
		return "stop", true
	case "length":
		return "length", true
	case "tool_calls":
		return "tool_calls", true
	case "end_turn":
		return "end_turn", true
	case "max_tokens":
		return "max_tokens", true
	case "stop_sequence":
		return "stop_sequence", true
	case "tool_use":
		return "tool_use", true
	case "tool_result":
		return "tool_result", true
	case "input_json_delta":
		return "input_json_delta", true
	case "thinking":
		return "thinking", true
	case "thinking_delta":
		return "thinking_delta", true
	case "signature_delta":
		return "signature_delta", true
	case "chat.completion":
		return "chat.completion", true
	case "chat.completion.chunk":
		return "chat.completion.chunk", true
	}
	return "", false
}

// IsNull tells whether raw is absent or the literal null.
func IsNull(raw []byte) bool { return len(raw) == 0 || string(raw) == "null" }

// Bool reads a raw true or false; ok is false for anything else.
func Bool(raw []byte) (v bool, ok bool) {
	switch string(raw) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

func keyEquals(raw []byte, key string) bool {
	k, ok := Key(raw)
	return ok && string(k) == key
}

// Key is a member's raw key (still escaped, as Each and EachValid give it) as it compares:
// raw itself when it holds no escape, decoded by String otherwise; false for a key String
// cannot decode (only invalid UTF-8 with a bad escape: a key EachValid checked decodes).
func Key(raw []byte) ([]byte, bool) {
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw, true
	}
	s, ok := String(append(append([]byte{'"'}, raw...), '"'))
	return []byte(s), ok
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && isSpace(data[i]) {
		i++
	}
	return i
}

// isSpace tells whether c is JSON white space.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// TrimSpace returns data without the JSON white space around it (bytes.TrimSpace also trims
// what JSON does not count as white space).
func TrimSpace(data []byte) []byte {
	i, j := skipSpace(data, 0), len(data)
	for j > i && isSpace(data[j-1]) {
		j--
	}
	return data[i:j]
}

// skipString returns the index just past the string starting at data[i] == '"'. It jumps
// from quote to quote (IndexByte is vectorised; model text makes long strings): a quote
// ends the string unless an odd run of backslashes escapes it.
func skipString(data []byte, i int) (int, error) {
	j := i + 1
	for {
		k := bytes.IndexByte(data[j:], '"')
		if k < 0 {
			return 0, ErrMalformed
		}
		q := j + k
		backslashes := 0
		for p := q - 1; p > i && data[p] == '\\'; p-- {
			backslashes++
		}
		if backslashes%2 == 0 {
			return q + 1, nil
		}
		j = q + 1
	}
}

// skipValue returns the index just past the value starting at data[i].
func skipValue(data []byte, i int) (int, error) {
	if i >= len(data) {
		return 0, ErrMalformed
	}
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				end, err := skipString(data, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, ErrMalformed
	default:
		j := i
		for j < len(data) {
			switch data[j] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				if j == i {
					return 0, ErrMalformed
				}
				return j, nil
			}
			j++
		}
		if j == i {
			return 0, ErrMalformed
		}
		return j, nil
	}
}

// Edit is one top-level member to set: Key to the raw JSON Value.
type Edit struct {
	Key   string
	Value []byte
}

// SetMany applies several Sets in one copy of data: each key present is replaced in place
// (its last occurrence, as Lookup finds it), the absent ones are appended in the order
// given. When an edit names a key an earlier edit named, the later one wins. The result
// equals that of calling Set for each edit in turn. data is not modified.
func SetMany(data []byte, edits ...Edit) ([]byte, error) {
	return AppendSetMany(nil, data, edits...)
}

// AppendSetMany appends what SetMany(data, edits...) returns to dst and returns the
// extended slice, so that a caller can build the result in a buffer it reuses. dst must not
// overlap data.
func AppendSetMany(dst, data []byte, edits ...Edit) ([]byte, error) {
	const maxEdits = 8
	if len(edits) > maxEdits {
		var err error
		for _, e := range edits {
			if data, err = Set(data, e.Key, e.Value); err != nil {
				return nil, err
			}
		}
		return append(dst, data...), nil
	}
	// found[i] is where edit i's key sits in data; ok[i] whether it does.
	var found [maxEdits]Field
	var ok [maxEdits]bool
	err := Each(data, func(k []byte, f Field) bool {
		for i := range edits {
			if keyEquals(k, edits[i].Key) {
				found[i], ok[i] = f, true
			}
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	// skip[i] marks an edit overridden by a later edit of the same key.
	var skip [maxEdits]bool
	size := len(data)
	appended := false
	for i := range edits {
		for j := i + 1; j < len(edits); j++ {
			if edits[j].Key == edits[i].Key {
				skip[i] = true
			}
		}
		if skip[i] {
			continue
		}
		if ok[i] {
			size += len(edits[i].Value) - (found[i].ValueEnd - found[i].ValueStart)
		} else {
			size += len(edits[i].Key) + len(edits[i].Value) + 4
			appended = true
		}
	}
	end := len(data)
	if appended {
		if end = bytes.LastIndexByte(data, '}'); end < 0 {
			return nil, ErrMalformed
		}
	}
	out := bufs.Grow(dst, size)
	// Replacements in the order they appear in data.
	last := 0
	for {
		next := -1
		for i := range edits {
			if ok[i] && !skip[i] && found[i].ValueStart >= last && (next < 0 || found[i].ValueStart < found[next].ValueStart) {
				next = i
			}
		}
		if next < 0 {
			break
		}
		out = append(out, data[last:found[next].ValueStart]...)
		out = append(out, edits[next].Value...)
		last = found[next].ValueEnd
	}
	if !appended {
		return append(out, data[last:]...), nil
	}
	out = append(out, data[last:end]...)
	empty := len(bytes.TrimSpace(data[bytes.IndexByte(data, '{')+1:end])) == 0
	for i := range edits {
		if ok[i] || skip[i] {
			continue
		}
		if !empty {
			out = append(out, ',')
		}
		empty = false
		out = AppendString(out, edits[i].Key)
		out = append(out, ':')
		out = append(out, edits[i].Value...)
	}
	return append(out, data[end:]...), nil
}

// First returns the first element of the JSON array data, nil for an empty array.
func First(data []byte) ([]byte, error) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '[' {
		return nil, ErrMalformed
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == ']' {
		return nil, nil
	}
	end, err := skipValue(data, i)
	if err != nil {
		return nil, err
	}
	return data[i:end], nil
}
