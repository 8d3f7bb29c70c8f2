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
