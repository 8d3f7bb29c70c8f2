package rawjson

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzString: String decodes every JSON string exactly as json.Unmarshal does (escapes,
// surrogate pairs and lone surrogates, invalid UTF-8), and refuses what is not a string;
// UnmarshalString answers as json.Unmarshal does for every value.
func FuzzString(f *testing.F) {
	for _, s := range []string{`""`, `"plain"`, `"a\nb\tc\"d\\e\/f\bg\fh\ri"`, `"\u00e9\u2028\ufffd\u0000"`, `"\ud83c\udf89"`, `"\ud800"`, `"\ud800x"`,
		`"\ud800\u0041"`, `"\udc00\ud800"`, `"\ud800\ud800\udc00"`, `"\uD83C\uDF89"`, "\"\xff\"", "\"a\\n\xe2\x82\"", "\"\xed\xa0\x80\"", `"é 日本 🎉"`, `1`, `null`, `[]`, `{"a":1}`, `true`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return // String reads values of a body already checked
		}
		data = bytes.TrimSpace(data)
		// UnmarshalString answers as json.Unmarshal into a string does, its error's text
		// included for what is not a string.
		us, uerr := UnmarshalString(data)
		var ws string
		werr := json.Unmarshal(data, &ws)
		if us != ws || (uerr == nil) != (werr == nil) || (uerr != nil && uerr.Error() != werr.Error()) {
			t.Fatalf("UnmarshalString(%q) = %q, %v; json.Unmarshal gives %q, %v", data, us, uerr, ws, werr)
		}
		got, ok := String(data)
		if data[0] != '"' {
			if ok {
				t.Fatalf("String(%q) took a value that is not a string", data)
			}
			return
		}
		var want string
		err := json.Unmarshal(data, &want)
		if ok != (err == nil) || got != want {
			t.Fatalf("String(%q) = %q, %v; json.Unmarshal gives %q, %v", data, got, ok, want, err)
		}
	})
}

func TestStringCommonValuesAllocateNothing(t *testing.T) {
	for _, v := range []string{"text_delta", "content_block_delta", "assistant", "stop", "chat.completion.chunk", ""} {
		raw := []byte(`"` + v + `"`)
		var got string
		if n := testing.AllocsPerRun(100, func() { got, _ = String(raw) }); n != 0 || got != v {
			t.Errorf("%q: %q with %v allocations", v, got, n)
		}
	}
	// Others are copies: they must not alias the input, which a reader reuses.
	raw := []byte(`"hello"`)
	got, _ := String(raw)
	raw[1] = 'j'
	if got != "hello" {
		t.Fatalf("the result aliases its input: %q", got)
	}
}

// FuzzElements: Elements gives the elements json.Unmarshal into []json.RawMessage gives, of
// every well-formed array, and refuses what is not an array, null included.
func FuzzElements(f *testing.F) {
	for _, s := range []string{`[]`, ` [ 1 , "a,b" , [2,[3]] , {"k":"]"} , null ] `, `["\"]"]`, `{}`, `"[1]"`, `1`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		got, err := Elements(data)
		var want []json.RawMessage
		// null, which json.Unmarshal takes as an empty slice, is not an array either.
		if json.Unmarshal(data, &want) != nil || IsNull(bytes.TrimSpace(data)) {
			if err == nil {
				t.Fatalf("Elements(%q) took what is not an array", data)
			}
			return
		}
		if err != nil || len(got) != len(want) {
			t.Fatalf("Elements(%q) = %q, %v; json.Unmarshal gives %q", data, got, err, want)
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("Elements(%q)[%d] = %q, json.Unmarshal gives %q", data, i, got[i], want[i])
			}
		}
	})
}
