package rawjson

import (
	"encoding/binary"
	"math"
	"math/bits"
	"strconv"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string, byte for byte as an encoding/json Encoder with
// SetEscapeHTML(false) writes it (invalid UTF-8 becomes U+FFFD), without its reflection
// and allocations.
func AppendString(b []byte, s string) []byte { return appendString(b, s, false) }

// AppendStringLikeMarshal appends s exactly as json.Marshal quotes it: like AppendString,
// and also with <, > and & escaped (\u003c, \u003e, \u0026).
func AppendStringLikeMarshal(b []byte, s string) []byte { return appendString(b, s, true) }

// plainASCII and plainASCIIHTML tell the bytes a JSON string holds as they are: printable
// ASCII but the quote and the backslash, and for json.Marshal not <, > and & either. Runs of
// them are skipped in a tight loop, which is most of model text.
var plainASCII, plainASCIIHTML = func() (plain, html [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		plain[c] = c != '"' && c != '\\'
		html[c] = plain[c] && c != '<' && c != '>' && c != '&'
	}
	return plain, html
}()

func appendString(b []byte, s string, html bool) []byte {
	plain := &plainASCII
	if html {
		plain = &plainASCIIHTML
	}
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		// Eight bytes at a time to the first that needs a look, then byte by byte (a borrow
		// may mark a plain byte after it: the table sorts that out).
		for len(s)-i >= 8 {
			if m := stringEscapes(load64(s, i), html); m != 0 {
				i += bits.TrailingZeros64(m) / 8
				break
			}
			i += 8
		}
		for i < len(s) && plain[s[i]] {
			i++
		}
		if i == len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// AppendRawLikeMarshal appends raw exactly as json.Marshal writes a json.RawMessage: nil
// as null, whitespace between tokens removed, and <, >, &, U+2028 and U+2029 in strings
// escaped. ok is false, and nothing is appended, when raw is not valid JSON (json.Marshal
// fails then).
func AppendRawLikeMarshal(b, raw []byte) (out []byte, ok bool) {
	if raw == nil {
		return append(b, "null"...), true
	}
	if !Valid(raw) {
		return b, false
	}
	inString := false
	start := 0
	for i := 0; i < len(raw); i++ {
		if inString {
			for len(raw)-i >= 8 {
				if m := rawStringSpecials(binary.LittleEndian.Uint64(raw[i:])); m != 0 {
					i += bits.TrailingZeros64(m) / 8
					break
				}
				i += 8
			}
			for i < len(raw) && !rawStringSpecial[raw[i]] {
				i++
			}
			if i == len(raw) {
				break
			}
		}
		c := raw[i]
		if inString {
			switch {
			case c == '\\':
				i++ // the escaped character (for \u, its hex digits are plain)
			case c == '"':
				inString = false
			case c == '<' || c == '>' || c == '&':
				b = append(b, raw[start:i]...)
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
				start = i + 1
			case c == 0xE2 && i+2 < len(raw) && raw[i+1] == 0x80 && raw[i+2]&^1 == 0xA8:
				b = append(b, raw[start:i]...)
				b = append(b, '\\', 'u', '2', '0', '2', hexDigits[raw[i+2]&0xF])
				i += 2
				start = i + 1
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case ' ', '\t', '\n', '\r':
			b = append(b, raw[start:i]...)
			start = i + 1
		}
	}
	return append(b, raw[start:]...), true
}

// rawStringSpecial are the bytes inside a string that AppendRawLikeMarshal must look at:
// the end of the string, an escape, what json.Marshal escapes for HTML, and the first byte
// of U+2028 and U+2029.
var rawStringSpecial = func() (t [256]bool) {
	for _, c := range []byte{'"', '\\', '<', '>', '&', 0xE2} {
		t[c] = true
	}
	return t
}()

// load64 reads s[i:i+8] as a little-endian word (the compiler makes it one load).
func load64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// bytesEqual marks, in the high bit of each of its bytes, the bytes of w equal to c; the
// lowest mark is exact, one above it may come from a borrow.
func bytesEqual(w uint64, c byte) uint64 {
	x := w ^ (uint64(c) * ones)
	return (x - ones) &^ x & highs
}

// stringEscapes marks the bytes of w that appendString must look at: a quote, a backslash,
// a control character, any byte of a multi-byte character (to check its UTF-8 and find
// U+2028 and U+2029), and with html <, > and &.
func stringEscapes(w uint64, html bool) uint64 {
	m := bytesEqual(w, '"') | bytesEqual(w, '\\') | (w-0x20*ones)&^w&highs | w&highs
	if html {
		m |= bytesEqual(w, '<') | bytesEqual(w, '>') | bytesEqual(w, '&')
	}
	return m
}

// rawStringSpecials marks the bytes of w that rawStringSpecial holds.
func rawStringSpecials(w uint64) uint64 {
	return bytesEqual(w, '"') | bytesEqual(w, '\\') | bytesEqual(w, '<') | bytesEqual(w, '>') |
		bytesEqual(w, '&') | bytesEqual(w, 0xE2)
}

// AppendFloat64LikeMarshal appends f exactly as json.Marshal writes a float64: the
// shortest decimal that reads back as f, in exponent form below 1e-6 and from 1e21 on.
// ok is false, and nothing is appended, for NaN and infinities (json.Marshal fails then).
func AppendFloat64LikeMarshal(b []byte, f float64) (out []byte, ok bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 becomes e-9, as json.Marshal writes it.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}

// AppendOmitEmptyString appends key (a fragment such as `,"name":`) and s quoted as
// json.Marshal quotes it, unless s is empty: an omitempty string field.
func AppendOmitEmptyString(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return AppendStringLikeMarshal(append(b, key...), s)
}

// AppendOmitEmptyRaw appends key (a fragment such as `,"name":`) and raw as
// AppendRawLikeMarshal does, unless raw is empty: an omitempty json.RawMessage field. On
// false (raw is not valid JSON), b may hold the key.
func AppendOmitEmptyRaw(b []byte, key string, raw []byte) ([]byte, bool) {
	if len(raw) == 0 {
		return b, true
	}
	return AppendRawLikeMarshal(append(b, key...), raw)
}

// AppendStringPtrLikeMarshal appends a *string as json.Marshal writes it: null when nil.
func AppendStringPtrLikeMarshal(b []byte, s *string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	return AppendStringLikeMarshal(b, *s)
}

// AppendStringsLikeMarshal appends ss as json.Marshal writes a []string: null when nil.
func AppendStringsLikeMarshal(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendStringLikeMarshal(b, s)
	}
	return append(b, ']')
}

// AppendMembers appends raw members ("key":value, comma-separated) after the members b
// already holds: a comma, then members; nothing when members is empty.
func AppendMembers(b, members []byte) []byte {
	if len(members) == 0 {
		return b
	}
	return append(append(b, ','), members...)
}

// AppendMembersInto adds raw members to the object that ends b, before its closing brace,
// with no comma after an empty object; false, and b unchanged, when b does not end with '}'.
func AppendMembersInto(b, members []byte) ([]byte, bool) {
	if len(members) == 0 {
		return b, true
	}
	if len(b) == 0 || b[len(b)-1] != '}' {
		return b, false
	}
	b = b[:len(b)-1]
	if len(b) > 0 && b[len(b)-1] != '{' {
		b = append(b, ',')
	}
	return append(append(b, members...), '}'), true
}
