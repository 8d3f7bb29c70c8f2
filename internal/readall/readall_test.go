package readall

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

func TestReadAll(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 100)
	for _, tc := range []struct {
		name        string
		hint, limit int64
	}{
		{"exact hint", 1000, 1 << 20},
		{"no hint", -1, 1 << 20},
		{"hint too small", 10, 1 << 20},
		{"hint too large", 5000, 1 << 20},
		{"hint over the limit", 1000, 100},
	} {
		for _, r := range map[string]io.Reader{
			"whole":    bytes.NewReader(data),
			"one byte": iotest.OneByteReader(bytes.NewReader(data)),
			"data+EOF": iotest.DataErrReader(bytes.NewReader(data)),
			"half":     iotest.HalfReader(bytes.NewReader(data)),
		} {
			got, err := ReadAll(r, tc.hint, tc.limit)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%s: %d bytes, %v", tc.name, len(got), err)
			}
		}
	}
	boom := errors.New("boom")
	got, err := ReadAll(io.MultiReader(bytes.NewReader(data[:10]), iotest.ErrReader(boom)), 1000, 1<<20)
	if !errors.Is(err, boom) || string(got) != string(data[:10]) {
		t.Fatalf("error: %q, %v", got, err)
	}
}

func TestReadAllOneAllocation(t *testing.T) {
	data := bytes.Repeat([]byte("x"), 3000)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := ReadAll(bytes.NewReader(data), int64(len(data)), 1<<20); err != nil {
			t.Fatal(err)
		}
	})
	// The buffer; bytes.NewReader is made outside the count only if it does not escape, so
	// allow it.
	if allocs > 2 {
		t.Fatalf("%v allocations, want the buffer only", allocs)
	}
}

func TestAppend(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 100)
	for _, hint := range []int64{1000, -1, 10, 5000} {
		for name, r := range map[string]func() io.Reader{
			"whole":    func() io.Reader { return bytes.NewReader(data) },
			"one byte": func() io.Reader { return iotest.OneByteReader(bytes.NewReader(data)) },
			"data+EOF": func() io.Reader { return iotest.DataErrReader(bytes.NewReader(data)) },
		} {
			for _, dst := range [][]byte{nil, []byte("prefix"), make([]byte, 0, 4096)} {
				want := append(append([]byte(nil), dst...), data...)
				got, err := Append(dst, r(), hint, 1<<20)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("hint %d, %s, dst %d/%d: %d bytes, %v", hint, name, len(dst), cap(dst), len(got), err)
				}
			}
		}
	}
}

func TestAppendReusesItsBuffer(t *testing.T) {
	data := bytes.Repeat([]byte("x"), 3000)
	buf := make([]byte, 0, 8192)
	r := bytes.NewReader(data)
	allocs := testing.AllocsPerRun(100, func() {
		r.Reset(data)
		got, err := Append(buf[:0], r, int64(len(data)), 1<<20)
		if err != nil || len(got) != len(data) || &got[0] != &buf[:1][0] {
			t.Fatalf("%d bytes, %v, or not in the buffer", len(got), err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations, want none with room in the buffer", allocs)
	}
}
