package rawjson

// Cursor reads a JSON document front to back in one pass, checking it as it goes: a
// hand-written decoder walks the objects and arrays it wants with Enter and More, reads the
// keys with Key and takes the values it wants with Value, and every value it does not want is
// checked and passed over by Skip. The document is then read once, where EachValid with a
// DecodeFields per nested level scans a value once more for each level above it (a streamed
// chunk's text sits four levels deep).
//
// Any fault (malformed JSON, a value of another kind than the caller asked for, nesting
// deeper than maxValidDepth) makes OK false for good and every method a no-op that reports
// false or nil, so a decoder may check OK once, at the end (Done).
type Cursor struct {
	data  []byte
	i     int
	depth int
	bad   bool
}

// NewCursor returns a cursor at the start of data's value, white space before it skipped.
func NewCursor(data []byte) Cursor {
	return Cursor{data: data, i: skipSpace(data, 0)}
}

// OK reports whether nothing went wrong so far.
func (c *Cursor) OK() bool { return !c.bad }

// Done reports whether the document was read whole and well-formed: nothing went wrong and
// only white space follows the value read.
func (c *Cursor) Done() bool {
	return !c.bad && c.depth == 0 && skipSpace(c.data, c.i) == len(c.data)
}

// Null passes over a null at the cursor and reports whether there was one.
func (c *Cursor) Null() bool {
	if c.bad || c.i >= len(c.data) || c.data[c.i] != 'n' {
		return false
	}
	end, ok := validLiteral(c.data, c.i, "null")
	if !ok {
		c.bad = true
		return false
	}
	c.i = skipSpace(c.data, end)
	return true
}

// Enter opens the object ('{') or array ('[') at the cursor and reports whether it has a
// first member or element, which the cursor is then at (for an object, at its key). An empty
// one is read whole and reports false; so does anything else than open, which fails the
// cursor.
func (c *Cursor) Enter(open byte) bool {
	if c.bad || c.i >= len(c.data) || c.data[c.i] != open {
		c.bad = true
		return false
	}
	if c.depth >= maxValidDepth {
		c.bad = true
		return false
	}
	c.depth++
	c.i = skipSpace(c.data, c.i+1)
	if c.i < len(c.data) && c.data[c.i] == closer(open) {
		c.i = skipSpace(c.data, c.i+1)
		c.depth--
		return false
	}
	return true
}

// More is called after each member or element of the object or array that Enter(open)
// opened: true when another follows (the cursor is then at it), false at the end, which it
// reads (or on a fault, which fails the cursor).
func (c *Cursor) More(open byte) bool {
	if c.bad || c.i >= len(c.data) {
		c.bad = true
		return false
	}
	switch c.data[c.i] {
	case ',':
		c.i = skipSpace(c.data, c.i+1)
		return true
	case closer(open):
		c.i = skipSpace(c.data, c.i+1)
		c.depth--
		return false
	}
	c.bad = true
	return false
}

func closer(open byte) byte {
	if open == '[' {
		return ']'
	}
	return '}'
}

// Key reads a member's key and the colon after it and returns the key's raw bytes, still
// escaped as they came; nil on a fault.
func (c *Cursor) Key() []byte {
	if c.bad || c.i >= len(c.data) || c.data[c.i] != '"' {
		c.bad = true
		return nil
	}
	end, ok := validString(c.data, c.i)
	if !ok {
		c.bad = true
		return nil
	}
	key := c.data[c.i+1 : end-1]
	c.i = skipSpace(c.data, end)
	if c.i >= len(c.data) || c.data[c.i] != ':' {
		c.bad = true
		return nil
	}
	c.i = skipSpace(c.data, c.i+1)
	return key
}

// Value checks the value at the cursor, passes over it and returns its raw bytes (a slice of
// the document); nil on a fault.
func (c *Cursor) Value() []byte {
	if c.bad {
		return nil
	}
	start := c.i
	v := validator{max: maxValidDepth}
	end, ok := v.value(c.data, start, c.depth)
	if !ok {
		c.bad = true
		return nil
	}
	c.i = skipSpace(c.data, end)
	return c.data[start:end]
}

// Skip checks the value at the cursor and passes over it.
func (c *Cursor) Skip() { c.Value() }

// Object reads the object at the cursor, a null as one without members (encoding/json leaves
// a struct as it is at null). For each member it calls field with the raw key; field reads
// the value with the cursor and returns the number (0 to 31) of the struct field the key
// names, or -1, without reading the value, for a key it does not know, whose value Object
// checks and passes over. Object reports false on a fault, when field does, and where
// encoding/json could decode what a hand-written decoder would not: a key that is not plain
// (PlainKey) or a field given twice, which encoding/json merges into the first value.
func (c *Cursor) Object(field func(key []byte) (n int, ok bool)) bool {
	if c.Null() {
		return true
	}
	var seen uint32
	for more := c.Enter('{'); more; more = c.More('{') {
		k := c.Key()
		if !PlainKey(k) {
			return false
		}
		n, ok := field(k)
		switch {
		case !ok:
			return false
		case n < 0:
			c.Skip()
		case seen&(1<<n) != 0:
			return false
		default:
			seen |= 1 << n
		}
	}
	return c.OK()
}
