package rawjson

import (
	"encoding/json"
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
