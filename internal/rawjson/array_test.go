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

// TestDecodeSliceReusesRoom: decoding into a slice with room reuses it, every element zeroed
// first (a field the new element lacks does not keep the old one's value), allocating
// nothing; into a nil slice, it gives what encoding/json gives.
func TestDecodeSliceReusesRoom(t *testing.T) {
	type item struct {
		A int `json:"a"`
		B int `json:"b"`
	}
	decodeItem := func(it *item, v []byte) bool {
		return DecodeFields(v, func(k, v []byte) (bool, bool) {
			switch string(k) {
			case "a":
				return true, DecodeInt(v, &it.A)
			case "b":
				return true, DecodeInt(v, &it.B)
			}
			return false, true
		})
	}
	for _, in := range []string{`[{"a":1,"b":2},{"a":3}]`, `[]`, `null`, `[null,{"b":4}]`} {
		var got, want []item
		if !DecodeSlice(&got, []byte(in), decodeItem) || json.Unmarshal([]byte(in), &want) != nil {
			t.Fatalf("%s: not decoded", in)
		}
		if !reflect.DeepEqual(got, want) || (got == nil) != (want == nil) {
			t.Errorf("%s: %#v, encoding/json %#v", in, got, want)
		}
	}

	s := []item{{A: 7, B: 8}, {A: 9, B: 10}, {A: 11, B: 12}}
	first := &s[0]
	if !DecodeSlice(&s, []byte(`[{"a":1},{"b":2}]`), decodeItem) {
		t.Fatal("not decoded")
	}
	if want := []item{{A: 1}, {B: 2}}; !reflect.DeepEqual(s, want) || &s[0] != first {
		t.Errorf("got %v (same array %v), want %v in the same array", s, &s[0] == first, want)
	}
	in := []byte(`[{"a":1,"b":2},{"a":3,"b":4}]`)
	if n := testing.AllocsPerRun(100, func() { DecodeSlice(&s, in, decodeItem) }); n != 0 {
		t.Errorf("decoding into a slice with room allocated %v times", n)
	}
}
