package rawjson

import (
	"encoding/binary"
	"encoding/json"
	"math/bits"
)

// ValidDepth reports whether data is one well-formed JSON value nested at most maxDepth
// deep, as json.Valid does for the values it accepts, but two to three times faster:
// encoding/json's scanner calls a function per byte.
func ValidDepth(data []byte, maxDepth int) bool {
	v := validator{max: maxDepth}
	i, ok := v.value(data, skipSpace(data, 0), 0)
	return ok && skipSpace(data, i) == len(data)
}

// Valid is json.Valid, faster (ValidDepth); a document nested deeper than 512 levels is
// left to json.Valid itself.
func Valid(data []byte) bool {
	const maxDepth = 512
	v := validator{max: maxDepth}
	i, ok := v.value(data, skipSpace(data, 0), 0)
	if v.tooDeep {
		return json.Valid(data)
	}
	return ok && skipSpace(data, i) == len(data)
}

// validator remembers whether a value failed only for its depth.
type validator struct {
	max     int
	tooDeep bool
}

// value checks the value at data[i:] and returns the index just past it.
func (v *validator) value(data []byte, i, depth int) (int, bool) {
	if i >= len(data) {
		return i, false
	}
	switch c := data[i]; {
	case c == '{' || c == '[':
		if depth >= v.max {
			v.tooDeep = true
			return i, false
		}
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		i = skipSpace(data, i+1)
		if i < len(data) && data[i] == end {
			return i + 1, true
		}
		for {
			var ok bool
			if c == '{' {
				if i >= len(data) || data[i] != '"' {
					return i, false
				}
				if i, ok = validString(data, i); !ok {
					return i, false
				}
				i = skipSpace(data, i)
				if i >= len(data) || data[i] != ':' {
					return i, false
				}
				i = skipSpace(data, i+1)
			}
			if i, ok = v.value(data, i, depth+1); !ok {
				return i, false
			}
			i = skipSpace(data, i)
			switch {
			case i >= len(data):
				return i, false
			case data[i] == ',':
				i = skipSpace(data, i+1)
			case data[i] == end:
				return i + 1, true
			default:
				return i, false
			}
		}
	case c == '"':
		return validString(data, i)
	case c == 't':
		return validLiteral(data, i, "true")
	case c == 'f':
		return validLiteral(data, i, "false")
	case c == 'n':
		return validLiteral(data, i, "null")
	default:
		return validNumber(data, i)
	}
}

func validLiteral(data []byte, i int, lit string) (int, bool) {
	if len(data)-i < len(lit) || string(data[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}

// StringEnd returns the length of the JSON string at the start of data, checked as Valid
// checks one (any byte from 0x20 up, escapes well formed), and false when data does not
// start with one. A decoder that knows the exact text around a string finds where it ends
// with it, and unquotes it with String.
func StringEnd(data []byte) (int, bool) {
	if len(data) == 0 || data[0] != '"' {
		return 0, false
	}
	return validString(data, 0)
}

// validString checks the string starting at data[i] == '"'. Like encoding/json's scanner
// it accepts any byte from 0x20 up, invalid UTF-8 included.
//
// It reads eight bytes at a time (specialBytes) and jumps to the first that needs a look: the
// closing quote of a short string (keys, most values) is found in one step, and a long one
// goes eight times faster than byte by byte, where this loop was the validator's largest
// cost on a stream's chunks.
func validString(data []byte, i int) (int, bool) {
	for i++; ; {
		for len(data)-i >= 8 {
			if m := specialBytes(binary.LittleEndian.Uint64(data[i:])); m != 0 {
				i += bits.TrailingZeros64(m) / 8
				break
			}
			i += 8
		}
		if i >= len(data) {
			return i, false
		}
		c := data[i]
		if plainStringByte[c] {
			i++
			continue
		}
		switch {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return i, false
		}
		// A backslash.
		i++
		if i >= len(data) {
			return i, false
		}
		switch data[i] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		case 'u':
			if len(data)-i <= 4 {
				return i, false
			}
			for _, h := range data[i+1 : i+5] {
				if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
					return i, false
				}
			}
			i += 4
		default:
			return i, false
		}
		i++
	}
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// specialBytes marks, in the high bit of each of its bytes, the bytes of the eight-byte
// little-endian word w that a string cannot hold as they are: a quote, a backslash, a
// control character. The lowest marked byte is always one of them; a byte above it may be
// marked wrongly (a borrow), which the byte-wise look that follows sorts out.
func specialBytes(w uint64) uint64 {
	quote := w ^ ('"' * ones)
	backslash := w ^ ('\\' * ones)
	return ((quote-ones)&^quote | (backslash-ones)&^backslash | (w-0x20*ones)&^w) & highs
}

// plainStringByte marks the bytes a JSON string holds as they are: all but the quote,
// the backslash and control characters.
var plainStringByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// validNumber checks -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at data[i:]; what
// follows is the caller's to check.
func validNumber(data []byte, i int) (int, bool) {
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i >= len(data):
		return i, false
	case data[i] == '0':
		i++
	case '1' <= data[i] && data[i] <= '9':
		i = skipDigits(data, i+1)
	default:
		return i, false
	}
	if i < len(data) && data[i] == '.' {
		j := skipDigits(data, i+1)
		if j == i+1 {
			return j, false
		}
		i = j
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		j := skipDigits(data, i)
		if j == i {
			return j, false
		}
		i = j
	}
	return i, true
}

func skipDigits(data []byte, i int) int {
	for i < len(data) && '0' <= data[i] && data[i] <= '9' {
		i++
	}
	return i
}

// EachValid is Each and Valid in one pass over data: it returns nil only when data is a
// well-formed JSON object (as Valid judges it, white space around it allowed), having called
// fn for every member in order, with the raw key and its Field as Each gives them. Anything
// else is ErrMalformed, a valid document that is not an object included (Valid tells the two
// apart; fn is not called for one). In malformed data fn may have been called for the
// members before the fault, and the caller discards what it saw. An object nested deeper than Valid checks itself is checked by Valid and read
// by Each, as two passes would.
func EachValid(data []byte, fn func(key []byte, f Field)) error {
	return eachValid(data, fn, true)
}

// maxValidDepth is the deepest nesting the validator checks itself.
const maxValidDepth = 512

// eachValid is EachValid; without deep, a document nested deeper than maxValidDepth is
// ErrMalformed instead of checked by Valid.
func eachValid(data []byte, fn func(key []byte, f Field), deep bool) error {
	v := validator{max: maxValidDepth}
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return ErrMalformed
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		if skipSpace(data, i+1) != len(data) {
			return ErrMalformed
		}
		return nil
	}
	for reported := 0; ; reported++ {
		if i >= len(data) || data[i] != '"' {
			return ErrMalformed
		}
		keyStart := i
		end, ok := validString(data, i)
		if !ok {
			return ErrMalformed
		}
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ':' {
			return ErrMalformed
		}
		vs := skipSpace(data, i+1)
		ve, ok := v.value(data, vs, 1)
		if !ok {
			if v.tooDeep && deep {
				return eachDeep(data, reported, fn)
			}
			return ErrMalformed
		}
		fn(data[keyStart+1:end-1], Field{KeyStart: keyStart, ValueStart: vs, ValueEnd: ve})
		i = skipSpace(data, ve)
		if i >= len(data) {
			return ErrMalformed
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			if skipSpace(data, i+1) != len(data) {
				return ErrMalformed
			}
			return nil
		default:
			return ErrMalformed
		}
	}
}

// eachDeep is EachValid for a document too deep for the validator: Valid (which leaves it
// to json.Valid), then Each for the members after the first reported, which fn has seen.
func eachDeep(data []byte, reported int, fn func(key []byte, f Field)) error {
	if !Valid(data) {
		return ErrMalformed
	}
	n := 0
	return Each(data, func(key []byte, f Field) bool {
		if n >= reported {
			fn(key, f)
		}
		n++
		return true
	})
}
