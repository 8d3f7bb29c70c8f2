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
