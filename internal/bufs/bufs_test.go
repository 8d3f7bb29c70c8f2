package bufs

import "testing"

func TestGrow(t *testing.T) {
	if b := Grow(nil, 10); len(b) != 0 || cap(b) != 10 {
		t.Fatalf("nil: len %d cap %d", len(b), cap(b))
	}
	src := append(make([]byte, 0, 8), "abc"...)
	if b := Grow(src, 5); &b[:1][0] != &src[:1][0] {
		t.Fatal("grew a buffer that had room")
	}
	b := Grow(src, 100)
	if string(b) != "abc" || cap(b) != 103 {
		t.Fatalf("grown: %q cap %d", b, cap(b))
	}
	if n := testing.AllocsPerRun(100, func() { _ = Grow(src, 100) }); n != 1 {
		t.Fatalf("%v allocations, want 1", n)
	}
}

// TestReuse: a buffer within KeptRoom comes back empty with its room; one grown past it is
// dropped for a new one of the asked size, or for nil.
func TestReuse(t *testing.T) {
	small := append(make([]byte, 0, 100), "abc"...)
	if got := Reuse(small, 512); len(got) != 0 || cap(got) != 100 || &got[:1][0] != &small[0] {
		t.Errorf("a small buffer came back as len %d cap %d, not itself emptied", len(got), cap(got))
	}
	large := make([]byte, 10, KeptRoom+1)
	if got := Reuse(large, 512); len(got) != 0 || cap(got) != 512 {
		t.Errorf("a large buffer came back as len %d cap %d, want a new one of 512", len(got), cap(got))
	}
	if got := Reuse(large, 0); got != nil {
		t.Errorf("a large buffer with no size came back with cap %d, want nil", cap(got))
	}
	if got := Reuse(nil, 512); got != nil {
		t.Errorf("nil came back with cap %d", cap(got))
	}
}
