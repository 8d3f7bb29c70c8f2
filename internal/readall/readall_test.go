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
