package rawjson

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestEachElement(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  bool
	}{
		{`[]`, nil, false},
		{` [ 1 , "a,]" ,{"k":[1,2]},null ] `, []string{`1`, `"a,]"`, `{"k":[1,2]}`, `null`}, false},
		{`[[],[[]]]`, []string{`[]`, `[[]]`}, false},
		{`{"a":1}`, nil, true},
		{`[1 2]`, []string{`1`}, true},
		{`[1,`, []string{`1`}, true},
	} {
		var got []string
		err := EachElement([]byte(tc.in), func(e []byte) bool { got = append(got, string(e)); return true })
		if (err != nil) != tc.err || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("EachElement(%s) = %q, %v; want %q, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func FuzzEachElement(f *testing.F) {
	for _, s := range []string{`[]`, `[1,"x",{"a":[1]},[2,3],true,null]`, `[ "\"]" ]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want []json.RawMessage
		if json.Unmarshal(data, &want) != nil || want == nil {
			return // not an array (null also unmarshals into a slice)
		}
		var got []string
		if err := EachElement(data, func(e []byte) bool { got = append(got, string(e)); return true }); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d elements, want %d", data, len(got), len(want))
		}
		for i := range got {
			if !json.Valid([]byte(got[i])) {
				t.Fatalf("%s: element %d %q", data, i, got[i])
			}
		}
	})
}
