package rawjson

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// walk reads the value at the cursor the way a decoder does: into every object and array,
// Value for the leaves and every second member (so that both ways of passing over a nested
// value are taken), and rebuilds it compactly from what the cursor gave, for comparison with
// json.Compact.
func walk(c *Cursor, b *strings.Builder, depth int) {
	if c.Null() {
		b.WriteString("null")
		return
	}
	if !c.OK() || c.i >= len(c.data) {
		c.bad = true
		return
	}
	switch open := c.data[c.i]; open {
	case '{', '[':
		if depth%2 == 1 {
			// Taken whole: Value checks it as the validator does.
			v := c.Value()
			if v == nil {
				return
			}
			compactInto(b, v)
			return
		}
		b.WriteByte(open)
		n := 0
		for more := c.Enter(open); more; more = c.More(open) {
			if n > 0 {
				b.WriteByte(',')
			}
			n++
			if open == '{' {
				k := c.Key()
				if k == nil {
					return
				}
				b.WriteByte('"')
				b.Write(k)
				b.WriteString(`":`)
			}
			walk(c, b, depth+1)
		}
		b.WriteByte(closer(open))
	default:
		b.Write(c.Value())
	}
}

// compactInto writes v compacted, as json.Compact does.
func compactInto(b *strings.Builder, v []byte) {
	var out bytes.Buffer
	if err := json.Compact(&out, v); err == nil {
		b.Write(out.Bytes())
	}
}

// checkCursor holds a cursor's walk of data to encoding/json: Done exactly for valid JSON
// nested no deeper than the validator checks, and then the same document.
func checkCursor(t *testing.T, data []byte) {
	t.Helper()
	c := NewCursor(data)
	var b strings.Builder
	walk(&c, &b, 0)
	done := c.Done()
	valid := json.Valid(data)
	if done != valid && !(valid && !ValidDepth(data, maxValidDepth)) {
		t.Fatalf("cursor over %q: Done %v, json.Valid %v", data, done, valid)
	}
	if !done {
		return
	}
	var want bytes.Buffer
	if err := json.Compact(&want, data); err != nil {
		t.Fatal(err)
	}
	if b.String() != want.String() {
		t.Fatalf("cursor over %q read\n%s\nwant\n%s", data, b.String(), want.String())
	}
}

var cursorSeeds = append([]string{
	`{"id":"c1","choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}`,
	` { } `, `[ ]`, `{}x`, `{"a":1}}`, `[1,]`, `[,1]`, `{"a":1,}`, `{,"a":1}`, `{"a" 1}`, `{"a":}`,
	`{"a\"b":1,"c":"\u00e9"}`, `{"a":1,"a":2}`, `{"a":"\x"}`, "{\"a\":\"\x01\"}", `{"a":[1,2}`, `{1:2}`,
	`nul`, `null `, ` null x`, `[null,{"a":[null,[]]}]`, `{"a":{"b":{"c":{"d":[1,{"e":"f"}]}}}}`,
	strings.Repeat("[", 600) + strings.Repeat("]", 600),
	strings.Repeat(`{"a":`, 511) + "1" + strings.Repeat("}", 511),
	strings.Repeat(`{"a":`, 513) + "1" + strings.Repeat("}", 513),
}, validSeeds...)

func TestCursor(t *testing.T) {
	for _, s := range cursorSeeds {
		checkCursor(t, []byte(s))
	}
}

func FuzzCursor(f *testing.F) {
	for _, s := range cursorSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkCursor(t, data) })
}

// TestCursorFaultsStick checks that a cursor stays failed: a decoder may look at OK once, at
// the end, after calls that each did nothing.
func TestCursorFaultsStick(t *testing.T) {
	c := NewCursor([]byte(`{"a":[1,2],"b":"x"}`))
	if !c.Enter('{') || string(c.Key()) != "a" {
		t.Fatal("cannot start")
	}
	if c.Enter('{') { // an array, not an object
		t.Fatal("entered an array as an object")
	}
	if c.OK() || c.Key() != nil || c.Value() != nil || c.Null() || c.More('{') || c.Enter('[') || c.Done() {
		t.Fatal("a failed cursor went on")
	}
	c = NewCursor([]byte(`{"a":1}`))
	c.Enter('{')
	c.Key()
	c.Value()
	c.More('{')
	if !c.Done() {
		t.Fatal(`{"a":1} read whole is not Done`)
	}
	if c.Enter('{') {
		t.Fatal("entered past the end")
	}
	if c.Value() != nil || c.Done() {
		t.Fatal("a fault past the end did not stick")
	}
}

// TestCursorObject holds Object to what the hand-written decoders rely on: members in order,
// unknown keys' values passed over (checked), null as no members, and a refusal for a known
// field given twice, a key that is not plain, or a field the decoder could not read.
func TestCursorObject(t *testing.T) {
	read := func(doc string) (got []string, ok bool) {
		c := NewCursor([]byte(doc))
		ok = c.Object(func(k []byte) (int, bool) {
			switch string(k) {
			case "a", "b":
				v := c.Value()
				got = append(got, string(k)+"="+string(v))
				return int(k[0] - 'a'), string(v) != `"bad"`
			}
			got = append(got, "skip "+string(k))
			return -1, true
		}) && c.Done()
		return got, ok
	}
	for _, tc := range []struct {
		doc  string
		want string
		ok   bool
	}{
		{`{"a":1,"x":{"y":[1,2]},"b":"s"}`, `a=1|skip x|b="s"`, true},
		{` null `, ``, true},
		{`{}`, ``, true},
		{`{"a":1,"a":2}`, `a=1|a=2`, false},
		{`{"x":1,"x":2}`, `skip x|skip x`, true},
		{`{"A":1}`, ``, false},
		{`{"\u0061":1}`, ``, false},
		{`{"a":"bad"}`, `a="bad"`, false},
		{`{"x":[1,}`, `skip x`, false},
		{`[]`, ``, false},
		{`{"a":1} 2`, `a=1`, false},
	} {
		got, ok := read(tc.doc)
		if strings.Join(got, "|") != tc.want || ok != tc.ok {
			t.Errorf("Object(%s) read %q, %v; want %q, %v", tc.doc, got, ok, tc.want, tc.ok)
		}
	}
}
