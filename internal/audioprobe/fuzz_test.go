package audioprobe

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"testing/iotest"
)

// FuzzDuration feeds Duration arbitrary bytes: it must never panic nor loop, must report a
// positive duration whenever it reports no error, and must answer the same however the bytes
// are split into reads.
func FuzzDuration(f *testing.F) {
	for _, tc := range probeCases() {
		if len(tc.data) <= 64<<10 {
			f.Add(tc.data)
		}
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "*.*"))
	for _, name := range files {
		if b, err := os.ReadFile(name); err == nil && filepath.Ext(name) != ".md" {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, format, err := Duration(bytes.NewReader(data))
		if err == nil && (d <= 0 || format == "") {
			t.Fatalf("no error, but duration %v, format %q", d, format)
		}
		d2, format2, err2 := Duration(iotest.OneByteReader(bytes.NewReader(data)))
		if d2 != d || format2 != format || (err == nil) != (err2 == nil) {
			t.Fatalf("whole: %v %q %v; byte by byte: %v %q %v", d, format, err, d2, format2, err2)
		}
	})
}
