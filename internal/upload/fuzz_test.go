package upload

import (
	"bytes"
	"testing"
)

// FuzzParse feeds arbitrary bodies through Parse and Body: errors are fine, panics are not,
// and a body that parses must produce a body that parses again.
func FuzzParse(f *testing.F) {
	b := "FzB"
	f.Add(build(f, b, []part{field("model", "m"), file("image[]", "a.png", "image/png", "PNG"), field("prompt", "p")}), false)
	f.Add(build(f, b, []part{file("image[0]", "a.png", "", "PNG"), file("mask", "", "image/png", ""), field("model", "m")}), true)
	f.Add(build(f, b, []part{field("chunking_strategy[type]", "server_vad"), field("meta[x]", "1"), file("file", "a\"b.wav", "audio/wav", "--FzB\r\n")}), false)
	f.Add([]byte("--FzB\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--FzB\r\n"), false)
	f.Add([]byte("--FzB--\r\n"), true)
	f.Fuzz(func(t *testing.T, data []byte, replay bool) {
		dir := t.TempDir()
		form, err := Parse(bytes.NewReader(data), b, Options{Limit: 1 << 16, MaxFieldBytes: 256, MaxFieldsBytes: 1024, MaxParts: 32, TempDir: dir, Replay: replay})
		if err != nil {
			return
		}
		defer func() { _ = form.Close() }()
		_, _ = form.Value("model")
		_ = form.Files("image")
		body, err := form.Body(BodyOptions{Set: map[string]string{"model": "up"}, Drop: []string{"meta"}, ListStyle: Indexed})
		if err != nil {
			t.Fatal(err)
		}
		n := body.Len()
		var raw bytes.Buffer
		if _, err := body.WriteTo(&raw); err != nil {
			return // a malformed tail of a streamed body
		}
		if n >= 0 && n != int64(raw.Len()) {
			t.Fatalf("Len %d, wrote %d", n, raw.Len())
		}
		bd, err := Boundary(body.ContentType())
		if err != nil {
			t.Fatal(err)
		}
		again, err := Parse(bytes.NewReader(raw.Bytes()), bd, Options{TempDir: dir, Replay: true})
		if err != nil {
			t.Fatalf("the produced body does not parse: %v", err)
		}
		_ = again.Close()
	})
}
