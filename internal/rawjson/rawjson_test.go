package rawjson

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestSetDeleteGet(t *testing.T) {
	tests := []struct {
		name string
		in   string
		op   func([]byte) ([]byte, error)
		want string
	}{
		{"replace", `{"model":"a","x":1}`, func(b []byte) ([]byte, error) { return Set(b, "model", []byte(`"b"`)) }, `{"model":"b","x":1}`},
		{"append", `{"x":1}`, func(b []byte) ([]byte, error) { return Set(b, "model", []byte(`"b"`)) }, `{"x":1,"model":"b"}`},
		{"append empty", `{ }`, func(b []byte) ([]byte, error) { return Set(b, "k", []byte(`true`)) }, `{ "k":true}`},
		{"replace escaped key", `{"mod\u0065l":"a"}`, func(b []byte) ([]byte, error) { return Set(b, "model", []byte(`"b"`)) }, `{"mod\u0065l":"b"}`},
		{"delete first", `{"meta":true, "model":"a"}`, func(b []byte) ([]byte, error) { return Delete(b, "meta") }, `{"model":"a"}`},
		{"delete middle", `{"a":1,"meta":{"x":[1,"}"]},"b":2}`, func(b []byte) ([]byte, error) { return Delete(b, "meta") }, `{"a":1,"b":2}`},
		{"delete last", `{"a":1,"meta":true}`, func(b []byte) ([]byte, error) { return Delete(b, "meta") }, `{"a":1}`},
		{"delete only", `{"meta":true}`, func(b []byte) ([]byte, error) { return Delete(b, "meta") }, `{}`},
		{"delete repeated", `{"meta":1,"meta":2,"a":1,"meta":3}`, func(b []byte) ([]byte, error) { return Delete(b, "meta") }, `{"a":1}`},
		{"delete absent", `{"a":1}`, func(b []byte) ([]byte, error) { return Delete(b, "meta") }, `{"a":1}`},
		{"nested untouched", `{"o":{"model":"x"},"model":"y"}`, func(b []byte) ([]byte, error) { return Set(b, "model", []byte(`"z"`)) }, `{"o":{"model":"x"},"model":"z"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.op([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got %s want %s", got, tc.want)
			}
			if !json.Valid(got) {
				t.Fatalf("invalid result %s", got)
			}
		})
	}
}

func TestGetValues(t *testing.T) {
	data := []byte(` {"s":"a\"b","n":-1.5e3,"t":true,"z":null,"arr":[1,{"a":"]"}],"s":"last"} `)
	for key, want := range map[string]string{"n": `-1.5e3`, "t": `true`, "z": `null`, "arr": `[1,{"a":"]"}]`, "s": `"last"`} {
		got, err := Get(data, key)
		if err != nil || string(got) != want {
			t.Fatalf("%s: got %q, %v", key, got, err)
		}
	}
	if got, _ := Get(data, "missing"); got != nil {
		t.Fatalf("missing key gave %q", got)
	}
	if s, ok := String([]byte(`"a\"b\u00e9"`)); !ok || s != "a\"bé" {
		t.Fatalf("String: %q %v", s, ok)
	}
	for _, bad := range []string{``, `[]`, `{"a"}`, `{"a":}`, `{"a":1`, `{"a":"x`, `{"a":1 "b":2}`, `{1:2}`} {
		if _, err := Get([]byte(bad), "a"); err == nil {
			t.Fatalf("%q: expected error", bad)
		}
	}
}

func FuzzEdit(f *testing.F) {
	for _, s := range []string{`{}`, `{"model":"a","meta":true}`, `{"a":[1,2,{"b":"}"}],"model":null}`, `{"meta":1,"meta":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			_, _ = Delete(data, "meta")
			_, _ = Set(data, "model", []byte(`"x"`))
			return
		}
		var orig map[string]any
		if json.Unmarshal(data, &orig) != nil {
			return // valid JSON but not an object
		}
		out, err := Set(data, "model", []byte(`"x"`))
		if err != nil {
			t.Fatalf("set: %v", err)
		}
		out, err = Delete(out, "meta")
		if err != nil {
			t.Fatalf("delete: %v", err)
		}
		var got map[string]any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("result invalid: %v: %s", err, out)
		}
		orig["model"] = "x"
		delete(orig, "meta")
		if !reflect.DeepEqual(orig, got) {
			t.Fatalf("mismatch: %v vs %v", orig, got)
		}
	})
}

// Key gives a plain key as it is (no copy) and an escaped one decoded, and refuses one
// that does not decode (invalid UTF-8 and a bad escape, left to encoding/json).
func TestKey(t *testing.T) {
	raw := []byte("usage")
	if k, ok := Key(raw); !ok || &k[0] != &raw[0] {
		t.Fatalf("plain key: %q, %v (want the same bytes)", k, ok)
	}
	if k, ok := Key([]byte(`us\u0061ge`)); !ok || string(k) != "usage" {
		t.Fatalf(`us\u0061ge: %q, %v`, k, ok)
	}
	if k, ok := Key([]byte("bad\xff\\x")); ok {
		t.Fatalf("invalid key decoded to %q", k)
	}
}

// TrimSpace trims JSON's four white space bytes and nothing else.
func TestTrimSpace(t *testing.T) {
	for in, want := range map[string]string{" \t\r\n{} \n": "{}", "": "", "  ": "", "\fnull\v": "\fnull\v", "\u00a0x": "\u00a0x"} {
		if got := string(TrimSpace([]byte(in))); got != want {
			t.Errorf("TrimSpace(%q) = %q, want %q", in, got, want)
		}
	}
}
