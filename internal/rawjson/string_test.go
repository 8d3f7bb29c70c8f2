package rawjson

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzString: String decodes every JSON string exactly as json.Unmarshal does (escapes,
// surrogate pairs and lone surrogates, invalid UTF-8), and refuses what is not a string.
func FuzzString(f *testing.F) {
	for _, s := range []string{`""`, `"plain"`, `"a\nb\tc\"d\\e\/f\bg\fh\ri"`, `"\u00e9\u2028\ufffd\u0000"`, `"\ud83c\udf89"`, `"\ud800"`, `"\ud800x"`,
		`"\ud800\u0041"`, `"\udc00\ud800"`, `"\ud800\ud800\udc00"`, `"\uD83C\uDF89"`, "\"\xff\"", "\"a\\n\xe2\x82\"", "\"\xed\xa0\x80\"", `"é 日本 🎉"`, `1`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return // String reads values of a body already checked
		}
		data = bytes.TrimSpace(data)
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
