package rawjson

import (
	"encoding/json"
	"strings"
	"testing"
)

var validSeeds = []string{
	``, ` `, `{}`, `[]`, `null`, `true`, `false`, `0`, `-0`, `01`, `1.`, `1.5e+3`, `-1E-2`, `1e`, `"`, `"a\"b"`, `"\u00e9\ud83d\ude00"`,
	`"\x"`, "\"\x01\"", "\"\xff\"", `{"a":1,}`, `[1,]`, `{"a" 1}`, `{"a":1 "b":2}`, `{"a":[1,{"b":null}],"c":"d"} `, `[1] [2]`,
	`nul`, `tru`, `{"a":tru}`, `[-]`, `"\u12"`, `{"k":"v"}x`,
}

func TestValidMatchesEncodingJSON(t *testing.T) {
	for _, s := range validSeeds {
		if got, want := Valid([]byte(s)), json.Valid([]byte(s)); got != want {
			t.Errorf("Valid(%q) = %v, json.Valid says %v", s, got, want)
		}
	}
	deep := strings.Repeat(`[`, 600) + strings.Repeat(`]`, 600)
	if !Valid([]byte(deep)) || ValidDepth([]byte(deep), 512) {
		t.Error("a document 600 deep: Valid must defer to json.Valid, ValidDepth(512) must refuse it")
	}
	if Valid([]byte(deep + `]`)) {
		t.Error("a deep document with a stray bracket is valid")
	}
}

func FuzzValid(f *testing.F) {
	for _, s := range validSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := Valid(data), json.Valid(data); got != want {
			t.Fatalf("Valid(%q) = %v, json.Valid says %v", data, got, want)
		}
	})
}

var eachValidSeeds = append([]string{
	`{"id":"c1","choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}`, ` { } `, `{}x`, `{"a":1}}`,
	`{"a\"b":1,"c":"\u00e9"}`, `{"a":1,"a":2}`, `{"a":"\x"}`, "{\"a\":\"\x01\"}", `{"a":[1,2}`, `{1:2}`, `{"a":}`,
}, validSeeds...)

// checkEachValid holds EachValid to Valid and Each: nil exactly for a valid object, and
// then the members Each gives.
func checkEachValid(t *testing.T, data []byte) {
	t.Helper()
	type member struct {
		key string
		f   Field
	}
	var got, want []member
	err := EachValid(data, func(key []byte, f Field) { got = append(got, member{string(key), f}) })
	i := skipSpace(data, 0)
	isObject := Valid(data) && i < len(data) && data[i] == '{'
	if (err == nil) != isObject {
		t.Fatalf("EachValid(%q) = %v; Valid %v, an object %v", data, err, Valid(data), isObject)
	}
	if err != nil {
		if Valid(data) && len(got) > 0 {
			t.Fatalf("EachValid(%q), valid but not an object, gave members %v", data, got)
		}
		return
	}
	if err := Each(data, func(key []byte, f Field) bool { want = append(want, member{string(key), f}); return true }); err != nil {
		t.Fatalf("Each(%q) = %v on a valid object", data, err)
	}
	if len(got) != len(want) {
		t.Fatalf("EachValid(%q) gave %v, Each %v", data, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("EachValid(%q) gave %v, Each %v", data, got, want)
		}
	}
}

func TestEachValid(t *testing.T) {
	for _, s := range eachValidSeeds {
		checkEachValid(t, []byte(s))
	}
	deep := `{"a":` + strings.Repeat(`[`, 600) + strings.Repeat(`]`, 600) + `,"b":2}`
	checkEachValid(t, []byte(deep))
	checkEachValid(t, []byte(deep[:len(deep)-1]))
	// Members before the deep one are given once, not again by the fallback.
	checkEachValid(t, []byte(`{"x":1,"y":{"z":2},`+deep[1:]))
}

func FuzzEachValid(f *testing.F) {
	for _, s := range eachValidSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkEachValid(t, data) })
}

// BenchmarkEachValid: a chat chunk checked and read in one pass, against Valid then Each.
func BenchmarkEachValid(b *testing.B) {
	chunk := []byte(`{"id":"chatcmpl-AbCdEf0123456789","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0123456789","choices":[{"index":0,"delta":{"content":" the quick brown fox"},"logprobs":null,"finish_reason":null}],"usage":null}`)
	var n int
	count := func(key []byte, f Field) { n += f.ValueEnd - f.ValueStart }
	b.Run("two_passes", func(b *testing.B) {
		for b.Loop() {
			if !Valid(chunk) {
				b.Fatal("invalid")
			}
			_ = Each(chunk, func(key []byte, f Field) bool { count(key, f); return true })
		}
	})
	b.Run("one_pass", func(b *testing.B) {
		for b.Loop() {
			if EachValid(chunk, count) != nil {
				b.Fatal("invalid")
			}
		}
	})
}

// checkDecodeFieldsValid holds DecodeFieldsValid to Valid then DecodeFields on the trimmed
// data: the same answer, and, when both decode, the same members given to field. The field
// function knows "a" and "b" (strings) and refuses a "bad" member, as a struct's would.
func checkDecodeFieldsValid(t *testing.T, data []byte) {
	t.Helper()
	record := func(got *[]string) func(k, v []byte) (bool, bool) {
		return func(k, v []byte) (bool, bool) {
			*got = append(*got, string(k)+"="+string(v))
			switch string(k) {
			case "a", "b":
				var s string
				return true, DecodeString(v, &s)
			case "bad":
				return true, false
			}
			return false, true
		}
	}
	var one, two []string
	got := DecodeFieldsValid(data, record(&one))
	want := ValidDepth(data, maxValidDepth) && DecodeFields(TrimSpace(data), record(&two))
	if got != want {
		t.Fatalf("DecodeFieldsValid(%q) = %v, Valid then DecodeFields %v", data, got, want)
	}
	if got && strings.Join(one, "\n") != strings.Join(two, "\n") {
		t.Fatalf("DecodeFieldsValid(%q) gave\n%v\nValid then DecodeFields\n%v", data, one, two)
	}
}

var decodeFieldsSeeds = append([]string{
	` null `, "\fnull", `{"a":"x","b":"y","c":[1,{"d":2}]}`, `{"a":"x","a":"y"}`, `{"A":"x"}`, `{"a\u0062":"x"}`,
	`{"a":1}`, `{"bad":1,"a":"x"}`, `{"a":"x","bad":1}`, `{"a":"x"} x`, `{"a":"x",}`, `[{"a":"x"}]`, `"s"`,
}, eachValidSeeds...)

func TestDecodeFieldsValid(t *testing.T) {
	for _, s := range decodeFieldsSeeds {
		checkDecodeFieldsValid(t, []byte(s))
	}
	// Deeper than the validator checks: left to encoding/json, as ValidDepth leaves it.
	for _, depth := range []int{maxValidDepth - 1, maxValidDepth, maxValidDepth + 1} {
		deep := `{"a":"x","c":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `,"b":"y"}`
		checkDecodeFieldsValid(t, []byte(deep))
		if took := DecodeFieldsValid([]byte(deep), func(k, v []byte) (bool, bool) { return false, true }); took != (depth < maxValidDepth) {
			t.Errorf("an array nested %d deep in an object: taken %v", depth, took)
		}
	}
}

func FuzzDecodeFieldsValid(f *testing.F) {
	for _, s := range decodeFieldsSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkDecodeFieldsValid(t, data) })
}

// TestValidStringWordWise holds the eight-bytes-at-a-time string check to json.Valid for
// every byte that needs a look (and some that do not) at every offset of a string long
// enough to be read word by word, alone and followed by more of the string.
func TestValidStringWordWise(t *testing.T) {
	var bytes []byte
	for c := 0; c < 0x20; c++ {
		bytes = append(bytes, byte(c))
	}
	bytes = append(bytes, '"', '\\', ' ', '!', '#', '[', ']', '^', 0x7f, 0x80, 0xa2, 0xdc, 0xff)
	for _, c := range bytes {
		for at := 0; at < 20; at++ {
			for _, tail := range []string{``, `abcdefgh`, `\n`, `\u00e9xyz`} {
				s := make([]byte, 0, 40)
				s = append(s, '"')
				s = append(s, strings.Repeat("x", at)...)
				s = append(s, c)
				s = append(s, tail...)
				s = append(s, '"')
				for _, doc := range [][]byte{s, append([]byte(`{"k":`), append(s, '}')...)} {
					if got, want := Valid(doc), json.Valid(doc); got != want {
						t.Errorf("Valid(%q) = %v, json.Valid says %v", doc, got, want)
					}
				}
			}
		}
	}
}

// TestStringEnd: the length of the string at the start, checked as Valid checks one.
func TestStringEnd(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
		ok   bool
	}{
		{`""`, 2, true},
		{`"abc"}}`, 5, true},
		{`"a\"b"x`, 6, true},
		{`"\\"x"`, 4, true},
		{`"é \u00e9 \/"`, 14, true},
		{`"unterminated`, 0, false},
		{`"bad \q"`, 0, false},
		{`"short \u12"`, 0, false},
		{"\"tab\there\"", 0, false},
		{`x"`, 0, false},
		{``, 0, false},
	} {
		n, ok := StringEnd([]byte(c.in))
		if ok != c.ok || ok && n != c.want {
			t.Errorf("StringEnd(%q) = %d, %v; want %d, %v", c.in, n, ok, c.want, c.ok)
		}
		if ok && !Valid([]byte(c.in[:n])) {
			t.Errorf("StringEnd(%q): %q is not valid JSON", c.in, c.in[:n])
		}
	}
}
