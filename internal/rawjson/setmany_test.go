package rawjson

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// setEach is SetMany's reference: one Set per edit.
func setEach(data []byte, edits ...Edit) ([]byte, error) {
	var err error
	for _, e := range edits {
		if data, err = Set(data, e.Key, e.Value); err != nil {
			return nil, err
		}
	}
	return data, nil
}

func TestSetMany(t *testing.T) {
	e := func(k, v string) Edit { return Edit{Key: k, Value: []byte(v)} }
	tests := []struct {
		name  string
		in    string
		edits []Edit
		want  string
	}{
		{"none", `{"a":1}`, nil, `{"a":1}`},
		{"replace all", `{"id":"x","usage":{"n":1},"meta":null}`, []Edit{e("meta", `{"m":1}`), e("id", `"g"`), e("usage", `{"n":2}`)}, `{"id":"g","usage":{"n":2},"meta":{"m":1}}`},
		{"append all", `{"a":1}`, []Edit{e("id", `"g"`), e("meta", `true`)}, `{"a":1,"id":"g","meta":true}`},
		{"append to empty", `{ }`, []Edit{e("k", `1`), e("j", `2`)}, `{ "k":1,"j":2}`},
		{"mixed", ` {"usage":1, "x":[1,"}"]} `, []Edit{e("id", `"g"`), e("usage", `{}`)}, ` {"usage":{}, "x":[1,"}"],"id":"g"} `},
		{"repeated key in data", `{"id":1,"a":2,"id":3}`, []Edit{e("id", `"g"`)}, `{"id":1,"a":2,"id":"g"}`},
		{"repeated edit", `{"a":1}`, []Edit{e("k", `1`), e("a", `5`), e("k", `2`)}, `{"a":5,"k":2}`},
		{"escaped key", `{"mod\u0065l":"a"}`, []Edit{e("model", `"b"`)}, `{"mod\u0065l":"b"}`},
		{"nested untouched", `{"o":{"id":"x"},"id":"y"}`, []Edit{e("id", `"z"`)}, `{"o":{"id":"x"},"id":"z"}`},
		{"many", `{"a":1}`, []Edit{e("a", `0`), e("b", `1`), e("c", `2`), e("d", `3`), e("e", `4`), e("f", `5`), e("g", `6`), e("h", `7`), e("i", `8`)}, `{"a":0,"b":1,"c":2,"d":3,"e":4,"f":5,"g":6,"h":7,"i":8}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SetMany([]byte(tc.in), tc.edits...)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got %s want %s", got, tc.want)
			}
			ref, _ := setEach([]byte(tc.in), tc.edits...)
			if !bytes.Equal(got, ref) {
				t.Fatalf("got %s, one Set at a time gives %s", got, ref)
			}
		})
	}
	for _, bad := range []string{``, `[]`, `{"a":1`, `{"a" 1}`} {
		if _, err := SetMany([]byte(bad), Edit{Key: "a", Value: []byte(`1`)}); err == nil {
			t.Fatalf("%q: expected error", bad)
		}
	}
}

func FuzzSetMany(f *testing.F) {
	for _, s := range []string{`{}`, `{"id":"a","usage":{"x":1}}`, `{"a":[1,2,{"b":"}"}],"meta":null}`, `{"id":1,"id":2}`, ` { "usage" : 1 } `} {
		f.Add([]byte(s), "id", "usage")
	}
	f.Fuzz(func(t *testing.T, data []byte, k1, k2 string) {
		if !utf8.ValidString(k1) || !utf8.ValidString(k2) {
			return // keys are the gateway's own names; JSON cannot carry invalid UTF-8 keys
		}
		edits := []Edit{{Key: k1, Value: []byte(`"g"`)}, {Key: k2, Value: []byte(`{"cost":1}`)}, {Key: "meta", Value: []byte(`[]`)}}
		got, err := SetMany(data, edits...)
		if !json.Valid(data) {
			return // only well-formed input is promised a result
		}
		ref, refErr := setEach(data, edits...)
		if (err != nil) != (refErr != nil) {
			t.Fatalf("error %v, one Set at a time: %v", err, refErr)
		}
		if err == nil && !bytes.Equal(got, ref) {
			t.Fatalf("got %s, one Set at a time gives %s", got, ref)
		}
		if err == nil && k1 == "id" && k2 == "usage" && !json.Valid(got) {
			t.Fatalf("invalid result %s", got)
		}
	})
}
