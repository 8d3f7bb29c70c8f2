package rawjson

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "plain", `quote " and \ backslash`, "tab\tnew\nline\r", "\x00\x1f", "é 日本 🎉", "\u2028\u2029", "bad \xff utf8", "<html>&amp;"} {
		out := AppendString([]byte("x"), s)
		var back string
		if err := json.Unmarshal(out[1:], &back); err != nil {
			t.Fatalf("%q: %s is not a JSON string: %v", s, out[1:], err)
		}
		want := s
		if s == "bad \xff utf8" {
			want = "bad \ufffd utf8"
		}
		if back != want {
			t.Fatalf("%q round-tripped to %q", s, back)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	f.Add("hello \"world\"\n")
	f.Add("\xff\xfe")
	f.Fuzz(func(t *testing.T, s string) {
		out := AppendString(nil, s)
		if !json.Valid(out) {
			t.Fatalf("invalid JSON %q", out)
		}
		var back string
		_ = json.Unmarshal(out, &back)
		want, _ := json.Marshal(s)
		var wantBack string
		_ = json.Unmarshal(want, &wantBack)
		if back != wantBack {
			t.Fatalf("%q: got %q want %q", s, back, wantBack)
		}
	})
}

// FuzzAppendLikeMarshal checks the three Like-Marshal appenders byte for byte against
// encoding/json, and AppendString against an Encoder that does not escape HTML.
func FuzzAppendLikeMarshal(f *testing.F) {
	f.Add("hello <b>&amp;</b>\b\f\x00\u2028\u2029 é \xff", []byte(" { \"a\" : [1, 2.5e3 , \"<\\u2028>\u2028\" ] } "), 1e-7)
	f.Add("", []byte(nil), 1e21)
	f.Add("plain", []byte("null"), 0.1)
	f.Fuzz(func(t *testing.T, s string, raw []byte, x float64) {
		checkStringEncoders(t, s)

		want, err := json.Marshal(json.RawMessage(raw))
		got, ok := AppendRawLikeMarshal([]byte("x"), raw)
		if ok != (err == nil) || ok && string(got[1:]) != string(want) || !ok && string(got) != "x" {
			t.Fatalf("raw %q: got %q, %v; want %q, %v", raw, got, ok, want, err)
		}

		want, err = json.Marshal(x)
		got, ok = AppendFloat64LikeMarshal([]byte("x"), x)
		if ok != (err == nil) || ok && string(got[1:]) != string(want) || !ok && string(got) != "x" {
			t.Fatalf("float %v: got %q, %v; want %q, %v", x, got, ok, want, err)
		}
	})
}

// checkStringEncoders holds AppendStringLikeMarshal to json.Marshal and AppendString to an
// Encoder that does not escape HTML, for s (after a byte already in the buffer), and
// returns the Encoder's form.
func checkStringEncoders(t *testing.T, s string) []byte {
	t.Helper()
	want, _ := json.Marshal(s)
	if got := AppendStringLikeMarshal([]byte("x"), s); string(got[1:]) != string(want) {
		t.Fatalf("AppendStringLikeMarshal(%q) = %s, json.Marshal gives %s", s, got[1:], want)
	}
	var enc bytes.Buffer
	e := json.NewEncoder(&enc)
	e.SetEscapeHTML(false)
	_ = e.Encode(s)
	if got := AppendString([]byte("x"), s); string(got[1:])+"\n" != enc.String() {
		t.Fatalf("AppendString(%q) = %s, an Encoder gives %s", s, got[1:], enc.String())
	}
	return bytes.TrimSuffix(enc.Bytes(), []byte("\n"))
}

func TestAppendFieldsLikeMarshal(t *testing.T) {
	type fields struct {
		A string          `json:"a"`
		S string          `json:"s,omitempty"`
		R json.RawMessage `json:"r,omitempty"`
		P *string         `json:"p"`
		L []string        `json:"l"`
	}
	str := "x<y"
	for _, v := range []fields{{}, {S: "é&", R: json.RawMessage(` [1, "<"] `), P: &str, L: []string{"a", "<b>"}}, {L: []string{}}, {R: json.RawMessage(`null`)}} {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		b := AppendStringLikeMarshal([]byte(`{"a":`), v.A)
		b = AppendOmitEmptyString(b, `,"s":`, v.S)
		b, ok := AppendOmitEmptyRaw(b, `,"r":`, v.R)
		b = AppendStringPtrLikeMarshal(append(b, `,"p":`...), v.P)
		b = append(AppendStringsLikeMarshal(append(b, `,"l":`...), v.L), '}')
		if !ok || string(b) != string(want) {
			t.Fatalf("got %s (%v), want %s", b, ok, want)
		}
	}
	if _, ok := AppendOmitEmptyRaw(nil, `,"r":`, []byte(`{`)); ok {
		t.Fatal("invalid raw JSON accepted")
	}
}

// TestAppendMembers: members go after the others with one comma, into an object that ends
// b before its brace (no comma in an empty one), and not into anything else.
func TestAppendMembers(t *testing.T) {
	if got := string(AppendMembers([]byte(`{"a":1`), []byte(`"b":2`))); got != `{"a":1,"b":2` {
		t.Errorf("AppendMembers: %s", got)
	}
	if got := string(AppendMembers([]byte(`{"a":1`), nil)); got != `{"a":1` {
		t.Errorf("AppendMembers of nothing: %s", got)
	}
	for in, want := range map[string]string{
		`x:{"a":1}`: `x:{"a":1,"b":2}`,
		`x:{}`:      `x:{"b":2}`,
		`}`:         `"b":2}`,
	} {
		got, ok := AppendMembersInto([]byte(in), []byte(`"b":2`))
		if !ok || string(got) != want {
			t.Errorf("AppendMembersInto(%s) = %s, %v; want %s", in, got, ok, want)
		}
	}
	for _, in := range []string{`x:null`, `x:[1]`, ``} {
		if got, ok := AppendMembersInto([]byte(in), []byte(`"b":2`)); ok || string(got) != in {
			t.Errorf("AppendMembersInto(%s) = %s, %v; want it declined, unchanged", in, got, ok)
		}
	}
	if got, ok := AppendMembersInto([]byte(`x:null`), nil); !ok || string(got) != `x:null` {
		t.Errorf("AppendMembersInto of nothing: %s, %v", got, ok)
	}
}

// TestAppendWordWise holds the appenders' eight-bytes-at-a-time scans to encoding/json for
// every byte they must stop at (and some they must not) at every offset of a string long
// enough to be read word by word, alone and followed by more of the string: AppendString
// and AppendStringLikeMarshal against an Encoder and json.Marshal, AppendRawLikeMarshal
// against json.Marshal of the string as a RawMessage.
func TestAppendWordWise(t *testing.T) {
	var specials []string
	for c := 0; c < 0x20; c++ {
		specials = append(specials, string(rune(c)))
	}
	specials = append(specials, `"`, `\`, `<`, `>`, `&`, ` `, `~`, "\x7f", "é", "\u2028", "\u2029", "\u2027", "\u2030", "日", "🎉", "\xe2", "\xe2\x80", "\xff", "\x80")
	for _, sp := range specials {
		for at := 0; at < 20; at++ {
			for _, tail := range []string{"", "abcdefghij", "\n", "é", "<x>"} {
				s := strings.Repeat("x", at) + sp + tail
				// As the raw JSON an upstream sent: the string encoded without HTML escapes.
				raw := checkStringEncoders(t, s)
				wantRaw, err := json.Marshal(json.RawMessage(raw))
				if got, ok := AppendRawLikeMarshal(nil, raw); !ok || err != nil || string(got) != string(wantRaw) {
					t.Fatalf("AppendRawLikeMarshal(%s) = %s, %v; json.Marshal gives %s, %v", raw, got, ok, wantRaw, err)
				}
			}
		}
	}
}
