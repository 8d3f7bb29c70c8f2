package rawjson

import (
	"bytes"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Field decoders for hand-written decoders of well-formed JSON (the providers' fast
// paths): each stores what encoding/json would store in a field of its type, or reports
// false where encoding/json would fail, so that the caller falls back to it. A null leaves
// a non-pointer field as it is and makes a pointer nil, as encoding/json does.

// maxStructFields is the most fields a struct decoded with DecodeFields may have: the
// repeated-key check remembers that many keys.
const maxStructFields = 32

// DecodeFields runs field for each member of the object v, which fills a struct field when
// the key names one (known) and reports whether it could (ok). null leaves the struct as
// it is, as encoding/json does for a struct that is not behind a pointer.
func DecodeFields(v []byte, field func(key, v []byte) (known, ok bool)) bool {
	if IsNull(v) {
		return true
	}
	if len(v) == 0 || v[0] != '{' {
		return false
	}
	d := fieldsDecoder{field: field, ok: true}
	err := Each(v, func(k []byte, f Field) bool { return d.member(k, v[f.ValueStart:f.ValueEnd]) })
	return d.ok && err == nil
}

// DecodeFieldsValid is DecodeFields for data nobody has checked yet: it checks that data is
// well-formed (as ValidDepth(data, 512) does, white space around it allowed) in the same pass
// over it as the decoding, where checking first took a pass of its own. false for malformed
// data, for which field may have been called for the members before the fault, and for data
// nested deeper than 512 levels, left to encoding/json as the fast decoders leave it.
func DecodeFieldsValid(data []byte, field func(key, v []byte) (known, ok bool)) bool {
	d := fieldsDecoder{field: field, ok: true}
	err := eachValid(data, func(k []byte, f Field) {
		if d.ok {
			d.member(k, data[f.ValueStart:f.ValueEnd])
		}
	}, false)
	if err == nil {
		return d.ok
	}
	// Not a well-formed object: null leaves the struct as it is, as for DecodeFields.
	return string(TrimSpace(data)) == "null"
}

// fieldsDecoder is the state of DecodeFields over the members of one object.
type fieldsDecoder struct {
	field func(key, v []byte) (known, ok bool)
	// seen holds the known keys met so far: a repeated one is encoding/json's to decode.
	seen [maxStructFields][]byte
	n    int
	ok   bool
}

// member decodes one member; false (and ok false) once the object is not this decoder's.
func (d *fieldsDecoder) member(k, v []byte) bool {
	if !PlainKey(k) {
		d.ok = false
		return false
	}
	known, ok := d.field(k, v)
	if !ok {
		d.ok = false
		return false
	}
	if !known {
		return true
	}
	for _, s := range d.seen[:d.n] {
		if bytes.Equal(s, k) {
			d.ok = false
			return false
		}
	}
	if d.n == len(d.seen) {
		d.ok = false
		return false
	}
	d.seen[d.n] = k
	d.n++
	return true
}

// PlainKey tells whether encoding/json can match the raw key k to a field only by its exact
// bytes: with no escape, no upper-case letter and no non-ASCII byte, its case-insensitive
// match against the all-lower-case field names is the exact one. Nil (what a failed
// Cursor.Key returns) is not a key.
func PlainKey(k []byte) bool {
	if k == nil {
		return false
	}
	for _, c := range k {
		if c == '\\' || c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' {
			return false
		}
	}
	return true
}

// DecodeSlice decodes the array v into *dst as encoding/json does into a nil slice: null
// clears the slice, [] makes it empty but not nil, a null element stays zero. It reuses the
// capacity of *dst, each element zeroed before it is decoded (encoding/json would decode into
// what the old element held), so that a caller decoding one array after another, a stream's
// chunks, allocates its elements once.
func DecodeSlice[T any](dst *[]T, v []byte, elem func(*T, []byte) bool) bool {
	if IsNull(v) {
		*dst = nil
		return true
	}
	if len(v) == 0 || v[0] != '[' {
		return false
	}
	s := (*dst)[:0]
	if s == nil {
		s = make([]T, 0)
	}
	ok := true
	err := EachElement(v, func(e []byte) bool {
		var zero T
		s = append(s, zero)
		ok = elem(&s[len(s)-1], e)
		return ok
	})
	*dst = s
	return ok && err == nil
}

// DecodePtr decodes v into a new *T as encoding/json does for a nil pointer: null leaves
// it nil, anything else allocates. The struct being zero and no key repeating, *dst is
// nil here.
func DecodePtr[T any](dst **T, v []byte, decode func(*T, []byte) bool) bool {
	return DecodePtrIn(dst, nil, v, decode)
}

// DecodePtrIn is DecodePtr decoding into room, zeroed first, instead of a new T when room
// is not nil: for a caller that decodes one value after another (a stream's events) and is
// done with each before the next.
func DecodePtrIn[T any](dst **T, room *T, v []byte, decode func(*T, []byte) bool) bool {
	if IsNull(v) {
		*dst = nil
		return true
	}
	p := room
	if p == nil {
		p = new(T)
	} else {
		var zero T
		*p = zero
	}
	*dst = p
	return decode(p, v)
}

// DecodeString decodes a string field.
func DecodeString(v []byte, dst *string) bool {
	if IsNull(v) {
		return true
	}
	s, ok := String(v)
	if ok {
		*dst = s
	}
	return ok
}

// DecodeStringPtr decodes a *string field.
func DecodeStringPtr(v []byte, dst **string) bool {
	if IsNull(v) {
		*dst = nil
		return true
	}
	s, ok := String(v)
	if ok {
		*dst = &s
	}
	return ok
}

// DecodeBool decodes a bool field.
func DecodeBool(v []byte, dst *bool) bool {
	if IsNull(v) {
		return true
	}
	b, ok := Bool(v)
	if ok {
		*dst = b
	}
	return ok
}

// DecodeBoolPtr decodes a *bool field.
func DecodeBoolPtr(v []byte, dst **bool) bool {
	if IsNull(v) {
		*dst = nil
		return true
	}
	b, ok := Bool(v)
	if ok {
		*dst = &b
	}
	return ok
}

// DecodeInt decodes an int field: an integer literal that fits, not 1.0 or 1e3.
func DecodeInt(v []byte, dst *int) bool {
	if IsNull(v) {
		return true
	}
	if !IsNumber(v) {
		return false
	}
	n, err := strconv.ParseInt(string(v), 10, strconv.IntSize)
	if err != nil {
		return false
	}
	*dst = int(n)
	return true
}

// DecodeInt64 decodes an int64 field, as DecodeInt.
func DecodeInt64(v []byte, dst *int64) bool {
	if IsNull(v) {
		return true
	}
	if !IsNumber(v) {
		return false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return false
	}
	*dst = n
	return true
}

// DecodeInt64Ptr decodes a *int64 field.
func DecodeInt64Ptr(v []byte, dst **int64) bool {
	if IsNull(v) {
		*dst = nil
		return true
	}
	var n int64
	if !DecodeInt64(v, &n) {
		return false
	}
	*dst = &n
	return true
}

// DecodeFloat64Ptr decodes a *float64 field; a number out of range (1e400) fails, as for
// encoding/json.
func DecodeFloat64Ptr(v []byte, dst **float64) bool {
	if IsNull(v) {
		*dst = nil
		return true
	}
	if !IsNumber(v) {
		return false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		return false
	}
	*dst = &f
	return true
}

// IsNumber tells whether the value v of well-formed JSON is a number.
func IsNumber(v []byte) bool {
	return len(v) > 0 && (v[0] == '-' || '0' <= v[0] && v[0] <= '9')
}

// unescape decodes the inside of a well-formed JSON string, valid UTF-8 with its first
// escape at esc, as encoding/json's unquote does.
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
