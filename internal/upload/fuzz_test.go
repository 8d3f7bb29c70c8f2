package upload

import (
	"bytes"
	"io"
	"strings"
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

// FuzzFileRest holds the stretch of spool a body offers to sendfile(2) to the body read part
// by part: after any number of bytes read, the rest of the body is the spool's bytes where
// fileRest says, or fileRest declines and the body reads on as before; and nothing it wrote
// into the spool changes another body of the form.
func FuzzFileRest(f *testing.F) {
	b := "FzB"
	f.Add(build(f, b, []part{field("model", "m"), file("image[]", "a.png", "image/png", "PNG-A"), file("image[]", "b.png", "image/png", "PNG-B")}), uint16(0), false)
	f.Add(build(f, b, []part{file("image[]", "a.png", "image/png", "PNG-A"), file("mask", "m.png", "", "MASK"), field("model", "m"), field("meta", "x")}), uint16(90), false)
	f.Add(build(f, b, []part{field("model", "m"), file("image", "a.png", "", "A"), field("n", "2"), file("image[3]", "b.png", "", "B")}), uint16(3), true)
	f.Add(build(f, b, []part{file("file", "a.wav", "audio/wav", strings.Repeat("RIFF", 300))}), uint16(200), false)
	f.Fuzz(func(t *testing.T, data []byte, k uint16, indexed bool) {
		form, err := Parse(bytes.NewReader(data), b, Options{Limit: 1 << 16, MaxFieldBytes: 256, MaxFieldsBytes: 1024, MaxParts: 32, TempDir: t.TempDir(), Replay: true})
		if err != nil {
			return
		}
		defer func() { _ = form.Close() }()
		opt := BodyOptions{Set: map[string]string{"model": "up"}, Drop: []string{"meta"}, Lists: []string{"image"}}
		if indexed {
			opt.ListStyle = Indexed
		}
		plain := func() []byte {
			body, err := form.Body(opt)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if _, err := body.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			return buf.Bytes()
		}
		want := plain()
		body, err := form.Body(opt)
		if err != nil {
			t.Fatal(err)
		}
		head := make([]byte, min(int(k), len(want)))
		if _, err := io.ReadFull(body, head); err != nil {
			t.Fatal(err)
		}
		var rest []byte
		if start, n, err := body.fileRest(); err == nil {
			rest = make([]byte, n)
			if _, err := form.spool.file.ReadAt(rest, start); err != nil {
				t.Fatalf("reading the stretch [%d, +%d): %v", start, n, err)
			}
		} else if rest, err = io.ReadAll(body); err != nil {
			t.Fatalf("reading on after fileRest declined: %v", err)
		}
		if got := append(head, rest...); !bytes.Equal(got, want) {
			t.Fatalf("read %d bytes, then the rest: %q\nwant %q", len(head), got, want)
		}
		if again := plain(); !bytes.Equal(again, want) {
			t.Fatalf("a body made after fileRest differs:\n%q\nwant %q", again, want)
		}
	})
}
