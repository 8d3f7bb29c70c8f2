package rawjson

import "testing"

func TestUnmarshalFresh(t *testing.T) {
	type msg struct {
		A string `json:"a"`
		B []int  `json:"b"`
		C *bool  `json:"c"`
	}
	yes := true
	// What a fast decoder filled before giving up is gone, as from a zero value.
	v := msg{A: "left", B: []int{1, 2}, C: &yes}
	if err := UnmarshalFresh([]byte(`{"b":[3]}`), &v); err != nil {
		t.Fatal(err)
	}
	if v.A != "" || len(v.B) != 1 || v.B[0] != 3 || v.C != nil {
		t.Fatalf("got %+v, want only b", v)
	}
	// A failure leaves dst as it was, whatever part of the body decoded.
	v = msg{A: "kept"}
	if err := UnmarshalFresh([]byte(`{"b":[4],"a":1}`), &v); err == nil {
		t.Fatal("a number for a string decoded")
	}
	if v.A != "kept" || v.B != nil {
		t.Fatalf("after a failure: %+v", v)
	}
	if err := UnmarshalFresh([]byte(`{`), &v); err == nil {
		t.Fatal("a truncated body decoded")
	}
}
