package upload

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"mime"
	"mime/multipart"
	"net/textproto"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
)

// part is one multipart part of a test body: a file when filename or ct is set.
type part struct {
	name, filename, ct, data string
	file                     bool
}

func field(name, value string) part { return part{name: name, data: value} }

func file(name, filename, ct, data string) part {
	return part{name: name, filename: filename, ct: ct, data: data, file: true}
}

// build encodes parts as a client's multipart body with mime/multipart.
func build(t testing.TB, boundary string, parts []part) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	if err := w.SetBoundary(boundary); err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		h := make(textproto.MIMEHeader)
		if p.file {
			h.Set("Content-Disposition", multipart.FileContentDisposition(p.name, p.filename))
			if p.ct != "" {
				h.Set("Content-Type", p.ct)
			}
		} else {
			h.Set("Content-Disposition", `form-data; name="`+p.name+`"`)
		}
		pw, err := w.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(pw, p.data)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// readBack reads a produced body whole and parses it as the upstream would.
func readBack(t testing.TB, b *Body) ([]part, []byte) {
	t.Helper()
	var raw bytes.Buffer
	if _, err := b.WriteTo(&raw); err != nil {
		t.Fatalf("writing body: %v", err)
	}
	return parseBody(t, b.ContentType(), raw.Bytes()), raw.Bytes()
}

func parseBody(t testing.TB, contentType string, raw []byte) []part {
	t.Helper()
	_, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		t.Fatal(err)
	}
	mr := multipart.NewReader(bytes.NewReader(raw), params["boundary"])
	var parts []part
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return parts
		}
		if err != nil {
			t.Fatalf("upstream body: %v", err)
		}
		data, err := io.ReadAll(p)
		if err != nil {
			t.Fatalf("upstream body: %v", err)
		}
		_, dp, _ := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
		_, isFile := dp["filename"]
		parts = append(parts, part{name: p.FormName(), filename: dp["filename"], ct: p.Header.Get("Content-Type"), data: string(data), file: isFile})
	}
}

func sameParts(t *testing.T, got, want []part) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("upstream got %d parts, want %d:\n%v", len(got), len(want), brief(got))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("part %d: got %v, want %v", i, brief(got[i:i+1]), brief(want[i:i+1]))
		}
	}
}

func brief(ps []part) []string {
	var s []string
	for _, p := range ps {
		d := p.data
		if len(d) > 20 {
			d = d[:20] + "..."
		}
		s = append(s, p.name+" "+p.filename+" "+p.ct+" "+d)
	}
	return s
}

// spoolFiles is the number of spool files in dir and in use: files are removed from their
// directory when made, and return to the pool (or are closed) when their form is closed.
func spoolFiles(t *testing.T, dir string) int {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(es) + int(spoolsInUse.Load())
}

func openaiGoBody(t *testing.T, p interface {
	MarshalMultipart() ([]byte, string, error)
}) ([]byte, string) {
	t.Helper()
	b, ct, err := p.MarshalMultipart()
	if err != nil {
		t.Fatal(err)
	}
	boundary, err := Boundary(ct)
	if err != nil {
		t.Fatal(err)
	}
	return b, boundary
}

// TestSDKFieldNames reads bodies as each SDK (and curl) sends them and checks what the form
// reads and what the upstream receives.
func TestSDKFieldNames(t *testing.T) {
	goEdit, goEditB := openaiGoBody(t, openai.ImageEditParams{
		Image: openai.ImageEditParamsImageUnion{OfFileArray: []io.Reader{
			openai.File(strings.NewReader("PNG-one"), "one.png", "image/png"),
			openai.File(strings.NewReader("PNG-two"), "two.png", "image/png"),
		}},
		Mask:   openai.File(strings.NewReader("MASK"), "mask.png", "image/png"),
		Prompt: "a hat",
		Model:  openai.ImageModelGPTImage1,
		N:      openai.Int(2),
	})
	goTranscribe, goTranscribeB := openaiGoBody(t, openai.AudioTranscriptionNewParams{
		File:  openai.File(strings.NewReader("RIFF...WAVE"), "talk.m4a", "audio/mp4"),
		Model: openai.AudioModelWhisper1,
		ChunkingStrategy: openai.AudioTranscriptionNewParamsChunkingStrategyUnion{
			OfAudioTranscriptionNewsChunkingStrategyVadConfig: &openai.AudioTranscriptionNewParamsChunkingStrategyVadConfig{Type: "server_vad"},
		},
		Include:     []openai.TranscriptionInclude{openai.TranscriptionIncludeLogprobs},
		Temperature: openai.Float(0.5),
	})
	b := "----formdata-undici-0123456789"
	tests := []struct {
		name     string
		body     []byte
		boundary string
		model    string
		images   []string // file names read as "image"
		values   map[string]string
		lists    map[string][]string
		streamed bool // a file was left to stream
		want     []part
	}{
		{
			name: "openai-go images edit (image[] sorted before model)", body: goEdit, boundary: goEditB,
			model: "gpt-image-1", images: []string{"one.png", "two.png"}, values: map[string]string{"n": "2", "prompt": "a hat"},
			want: []part{
				file("image[]", "one.png", "image/png", "PNG-one"), file("image[]", "two.png", "image/png", "PNG-two"),
				file("mask", "mask.png", "image/png", "MASK"), field("model", "up-model"), field("n", "2"), field("prompt", "a hat"),
			},
		},
		{
			name: "openai-go transcription (chunking_strategy[type], include[])", body: goTranscribe, boundary: goTranscribeB,
			model: "whisper-1", values: map[string]string{"chunking_strategy[type]": "server_vad", "temperature": "0.5"},
			lists: map[string][]string{"include": {"logprobs"}},
			want: []part{
				field("chunking_strategy[type]", "server_vad"), file("file", "talk.m4a", "audio/mp4", "RIFF...WAVE"),
				field("include[]", "logprobs"), field("model", "up-model"), field("temperature", "0.5"),
			},
		},
		{
			name: "openai-node: object key order, image[] repeated, booleans as text", boundary: b,
			body: build(t, b, []part{
				field("model", "gpt-image-1"), file("image[]", "a.png", "image/png", "A"), file("image[]", "b.webp", "image/webp", "B"),
				field("prompt", "p"), field("stream", "true"), field("partial_images", "2"), field("meta[user]", "u1"),
			}),
			model: "gpt-image-1", images: []string{"a.png", "b.webp"}, streamed: true,
			values: map[string]string{"stream": "true", "partial_images": "2", "meta[user]": "u1"},
			want: []part{
				field("model", "up-model"), file("image[]", "a.png", "image/png", "A"), file("image[]", "b.webp", "image/webp", "B"),
				field("prompt", "p"), field("stream", "true"), field("partial_images", "2"),
			},
		},
		{
			name: "openai-python: fields first, then files", boundary: b,
			body: build(t, b, []part{
				field("model", "whisper-1"), field("response_format", "verbose_json"), field("timestamp_granularities[]", "word"),
				field("timestamp_granularities[]", "segment"), field("stream", "false"), file("file", "x.wav", "audio/wav", "RIFF"),
			}),
			model: "whisper-1", streamed: true, values: map[string]string{"stream": "false"},
			lists: map[string][]string{"timestamp_granularities": {"word", "segment"}},
			want: []part{
				field("model", "up-model"), field("response_format", "verbose_json"), field("timestamp_granularities[]", "word"),
				field("timestamp_granularities[]", "segment"), field("stream", "false"), file("file", "x.wav", "audio/wav", "RIFF"),
			},
		},
		{
			name: "single image[] (a one-element list)", boundary: b,
			body:  build(t, b, []part{file("image[]", "only.png", "image/png", "X"), field("model", "m"), field("prompt", "p")}),
			model: "m", images: []string{"only.png"},
			want: []part{file("image[]", "only.png", "image/png", "X"), field("model", "up-model"), field("prompt", "p")},
		},
		{
			name: "curl: image repeated, no content type", boundary: b,
			body: build(t, b, []part{
				field("model", "m"), file("image", "a.png", "", "A"), file("image", "b.png", "", "B"), file("mask", "m.png", "image/png", "M"),
			}),
			model: "m", images: []string{"a.png", "b.png"}, streamed: true,
			want: []part{
				field("model", "up-model"), file("image", "a.png", "application/octet-stream", "A"),
				file("image", "b.png", "application/octet-stream", "B"), file("mask", "m.png", "image/png", "M"),
			},
		},
		{
			name: "indexed image[0] image[1], written as image[]", boundary: b,
			body:  build(t, b, []part{file("image[0]", "a.png", "image/png", "A"), file("image[1]", "b.png", "image/png", "B"), field("model", "m")}),
			model: "m", images: []string{"a.png", "b.png"},
			want: []part{file("image[]", "a.png", "image/png", "A"), file("image[]", "b.png", "image/png", "B"), field("model", "up-model")},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			f, err := Parse(bytes.NewReader(tc.body), tc.boundary, Options{TempDir: dir, Length: int64(len(tc.body))})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = f.Close() }()
			if m, _ := f.Value("model"); m != tc.model {
				t.Errorf("model %q, want %q", m, tc.model)
			}
			if f.Complete() == tc.streamed {
				t.Errorf("complete %v, want a streamed file %v", f.Complete(), tc.streamed)
			}
			body, err := f.Body(BodyOptions{Set: map[string]string{"model": "up-model"}, Drop: []string{"meta"}})
			if err != nil {
				t.Fatal(err)
			}
			got, _ := readBack(t, body)
			sameParts(t, got, tc.want)
			// Fields after a streamed file are read while the body is written.
			for k, v := range tc.values {
				if got, _ := f.Value(k); got != v {
					t.Errorf("Value(%q) = %q, want %q", k, got, v)
				}
			}
			for k, v := range tc.lists {
				if got := f.Values(k); strings.Join(got, ",") != strings.Join(v, ",") {
					t.Errorf("Values(%q) = %q, want %q", k, got, v)
				}
			}
			var names []string
			for _, p := range f.Files("image") {
				names = append(names, p.FileName)
			}
			if strings.Join(names, ",") != strings.Join(tc.images, ",") {
				t.Errorf("Files(image) = %q, want %q", names, tc.images)
			}
		})
	}
}

func TestCoercion(t *testing.T) {
	b := "B"
	body := build(t, b, []part{field("model", "m"), field("stream", "true"), field("n", "3"), field("temperature", "0.2"), field("bad", "yes")})
	f, err := Parse(bytes.NewReader(body), b, Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if v, ok, err := f.Bool("stream"); !v || !ok || err != nil {
		t.Errorf("Bool(stream) = %v %v %v", v, ok, err)
	}
	if v, ok, err := f.Int("n"); v != 3 || !ok || err != nil {
		t.Errorf("Int(n) = %v %v %v", v, ok, err)
	}
	if v, ok, err := f.Float("temperature"); v != 0.2 || !ok || err != nil {
		t.Errorf("Float(temperature) = %v %v %v", v, ok, err)
	}
	if _, ok, err := f.Bool("bad"); !ok || err == nil {
		t.Errorf("Bool(bad): ok %v, err %v; want an error", ok, err)
	}
	if _, ok, err := f.Int("absent"); ok || err != nil {
		t.Errorf("Int(absent): ok %v, err %v", ok, err)
	}
}

// TestModelOrder checks where the file goes: streamed when the model came first, spooled to
// a temporary file when it came after (or when Replay asks), and the spool removed by Close.
func TestModelOrder(t *testing.T) {
	audio := strings.Repeat("\x00\x01RIFF\r\n--", 50_000)
	b := "xYz"
	before := build(t, b, []part{field("model", "whisper-1"), file("file", "a.wav", "audio/wav", audio), field("language", "en")})
	after := build(t, b, []part{file("file", "a.wav", "audio/wav", audio), field("model", "whisper-1"), field("language", "en")})
	modelFile, fileModel := "whisper-1"+audio+"en", audio+"whisper-1en"
	tests := []struct {
		name    string
		body    []byte
		replay  bool
		spooled bool
		want    string // the upstream parts' data, joined
	}{
		{"model before file: streamed", before, false, false, modelFile},
		{"model after file: spooled", after, false, true, fileModel},
		{"model before file with replay: spooled", before, true, true, modelFile},
		{"model after file with replay: spooled", after, true, true, fileModel},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			f, err := Parse(bytes.NewReader(tc.body), b, Options{TempDir: dir, Replay: tc.replay})
			if err != nil {
				t.Fatal(err)
			}
			if m, _ := f.Value("model"); m != "whisper-1" {
				t.Errorf("model %q", m)
			}
			if n := spoolFiles(t, dir); (n == 1) != tc.spooled || n > 1 {
				t.Errorf("%d spool files, want spooled %v", n, tc.spooled)
			}
			if f.Complete() != tc.spooled {
				t.Errorf("complete %v", f.Complete())
			}
			if tc.spooled {
				files := f.Files("file")
				r, err := f.Open(files[0])
				if err != nil {
					t.Fatal(err)
				}
				if got, _ := io.ReadAll(r); string(got) != audio {
					t.Error("spooled file differs from the upload")
				}
			} else {
				// Parse stopped at the file: the language after it is not read yet.
				if _, ok := f.Value("language"); ok {
					t.Error("language read before the body was written")
				}
			}
			body, err := f.Body(BodyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			n := body.Len()
			got, raw := readBack(t, body)
			if tc.spooled && n != int64(len(raw)) {
				t.Errorf("Len %d, body has %d bytes", n, len(raw))
			}
			if !tc.spooled && n != -1 {
				t.Errorf("Len %d for a streamed body, want -1", n)
			}
			if len(got) != 3 || got[0].data+got[1].data+got[2].data != tc.want {
				t.Errorf("upstream parts %v", brief(got))
			}
			if lang, _ := f.Value("language"); lang != "en" {
				t.Errorf("language %q after the body was written", lang)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if n := spoolFiles(t, dir); n != 0 {
				t.Errorf("%d spool files left after Close", n)
			}
		})
	}
}

func randomBytes(seed uint64, n int) string {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return string(b)
}

// TestImagesAndMaskIntact sends two images and a mask of binary data and checks the upstream
// gets each byte, filename and content type, in every mode and list style.
func TestImagesAndMaskIntact(t *testing.T) {
	img1, img2, mask := randomBytes(1, 300_000), randomBytes(2, 123_457), randomBytes(3, 4096)
	b := "boundary-for-the-images"
	modelFirst := build(t, b, []part{
		field("model", "gpt-image-1"), file("image[]", "cat.png", "image/png", img1),
		file("image[]", "dog photo.jpg", "image/jpeg", img2), file("mask", "mask.png", "image/png", mask),
		field("prompt", "make them friends"), field("meta", `{"trace":"1"}`),
	})
	modelLast := build(t, b, []part{
		file("image", "cat.png", "image/png", img1), file("image", "dog photo.jpg", "image/jpeg", img2),
		file("mask", "mask.png", "image/png", mask), field("prompt", "make them friends"), field("meta", `{"trace":"1"}`),
		field("model", "gpt-image-1"),
	})
	tests := []struct {
		name   string
		body   []byte
		replay bool
		opt    BodyOptions
		want   []part
	}{
		{
			name: "streamed, image[] kept", body: modelFirst,
			opt: BodyOptions{Set: map[string]string{"model": "gpt-image-1.5"}, Drop: []string{"meta"}},
			want: []part{
				field("model", "gpt-image-1.5"), file("image[]", "cat.png", "image/png", img1),
				file("image[]", "dog photo.jpg", "image/jpeg", img2), file("mask", "mask.png", "image/png", mask),
				field("prompt", "make them friends"),
			},
		},
		{
			name: "replayed, indexed style", body: modelFirst, replay: true,
			opt: BodyOptions{Set: map[string]string{"model": "up"}, Drop: []string{"meta"}, ListStyle: Indexed},
			want: []part{
				field("model", "up"), file("image[0]", "cat.png", "image/png", img1),
				file("image[1]", "dog photo.jpg", "image/jpeg", img2), file("mask", "mask.png", "image/png", mask),
				field("prompt", "make them friends"),
			},
		},
		{
			name: "spooled, plain image made a list", body: modelLast,
			opt: BodyOptions{Set: map[string]string{"model": "up"}, Drop: []string{"meta"}, Lists: []string{"image"}},
			want: []part{
				file("image[]", "cat.png", "image/png", img1), file("image[]", "dog photo.jpg", "image/jpeg", img2),
				file("mask", "mask.png", "image/png", mask), field("prompt", "make them friends"), field("model", "up"),
			},
		},
		{
			name: "streamed, repeat style, renamed, meta kept", body: modelFirst,
			opt: BodyOptions{Rename: map[string]string{"model": "model_id", "image": "images"}, ListStyle: Repeat},
			want: []part{
				field("model_id", "gpt-image-1"), file("images", "cat.png", "image/png", img1),
				file("images", "dog photo.jpg", "image/jpeg", img2), file("mask", "mask.png", "image/png", mask),
				field("prompt", "make them friends"), field("meta", `{"trace":"1"}`),
			},
		},
		{
			name: "mixed: the image before the model spooled, the rest streamed",
			body: build(t, b, []part{
				file("image[]", "cat.png", "image/png", img1), field("model", "gpt-image-1"),
				file("image[]", "dog photo.jpg", "image/jpeg", img2), file("mask", "mask.png", "image/png", mask),
			}),
			opt: BodyOptions{Set: map[string]string{"model": "up"}},
			want: []part{
				file("image[]", "cat.png", "image/png", img1), field("model", "up"),
				file("image[]", "dog photo.jpg", "image/jpeg", img2), file("mask", "mask.png", "image/png", mask),
			},
		},
		{
			name: "model the client did not send is written first", body: build(t, b, []part{field("prompt", "p"), file("image", "a.png", "image/png", img2)}),
			opt:  BodyOptions{Set: map[string]string{"model": "dall-e-2"}},
			want: []part{field("model", "dall-e-2"), field("prompt", "p"), file("image", "a.png", "image/png", img2)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse(bytes.NewReader(tc.body), b, Options{TempDir: t.TempDir(), Replay: tc.replay})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = f.Close() }()
			body, err := f.Body(tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := readBack(t, body)
			sameParts(t, got, tc.want)
		})
	}
}

// genReader is a client uploading one huge file after the model, made on the fly.
type genReader struct {
	head, tail []byte
	size, pos  int64 // file bytes
	read       int64 // bytes handed out
}

func newGenReader(boundary string, size int64, modelFirst bool) *genReader {
	h := "--" + boundary + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.wav\"\r\nContent-Type: audio/wav\r\n\r\n"
	tail := "\r\n--" + boundary + "\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n--" + boundary + "--\r\n"
	if modelFirst {
		h = "--" + boundary + "\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n" + h
		tail = "\r\n--" + boundary + "--\r\n"
	}
	return &genReader{head: []byte(h), tail: []byte(tail), size: size}
}

func (g *genReader) Read(p []byte) (int, error) {
	var n int
	switch {
	case len(g.head) > 0:
		n = copy(p, g.head)
		g.head = g.head[n:]
	case g.pos < g.size:
		n = int(min(int64(len(p)), g.size-g.pos))
		for i := range p[:n] {
			p[i] = byte(g.pos + int64(i))
		}
		g.pos += int64(n)
	case len(g.tail) > 0:
		n = copy(p, g.tail)
		g.tail = g.tail[n:]
	default:
		return 0, io.EOF
	}
	g.read += int64(n)
	return n, nil
}

// TestTooLarge uploads 200 MB against a 25 MB limit: the typed error, at most a little over
// 25 MB read, and no more than 2 MB allocated on the way.
func TestTooLarge(t *testing.T) {
	const limit, size = 25 << 20, 200 << 20
	const b = "big-boundary"
	tests := []struct {
		name       string
		modelFirst bool
		replay     bool
		announce   bool // the client sent a Content-Length
		inBody     bool // the error comes from writing the body, not Parse
	}{
		{name: "model after the file, spooled", modelFirst: false},
		{name: "model first, replay", modelFirst: true, replay: true},
		{name: "model first, streamed", modelFirst: true, inBody: true},
		{name: "announced length", announce: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			g := newGenReader(b, size, tc.modelFirst)
			length := int64(-1)
			if tc.announce {
				length = size + 1000
			}
			var m0, m1 runtime.MemStats
			readMemStats(&m0)
			f, err := Parse(g, b, Options{Limit: limit, Length: length, TempDir: dir, Replay: tc.replay})
			if tc.inBody {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				body, berr := f.Body(BodyOptions{})
				if berr != nil {
					t.Fatal(berr)
				}
				_, err = body.WriteTo(io.Discard)
				_ = f.Close()
			} else if f != nil {
				_ = f.Close()
				t.Fatal("Parse accepted the upload")
			}
			readMemStats(&m1)
			var tl *TooLargeError
			if !errors.As(err, &tl) || tl.Limit != limit || tl.Field != "" {
				t.Fatalf("error %v (%T), want a *TooLargeError of %d", err, err, limit)
			}
			if g.read > limit+1 {
				t.Errorf("read %d bytes, want at most a little over %d", g.read, limit)
			}
			if tc.announce && g.read != 0 {
				t.Errorf("read %d bytes of a body announced too large", g.read)
			}
			t.Logf("read %d bytes, allocated %d", g.read, m1.TotalAlloc-m0.TotalAlloc)
			if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > 2<<20 {
				t.Errorf("allocated %d bytes, want under 2 MiB", alloc)
			}
			if n := spoolFiles(t, dir); n != 0 {
				t.Errorf("%d spool files left", n)
			}
		})
	}
}

// TestSetLimit lowers the limit to a route's once the model is known.
func TestSetLimit(t *testing.T) {
	b := "B"
	data := strings.Repeat("a", 10_000)
	t.Run("streamed file passes the route's limit", func(t *testing.T) {
		f, err := Parse(bytes.NewReader(build(t, b, []part{field("model", "m"), file("file", "a", "", data)})), b, Options{TempDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = f.Close() }()
		// The request is read ahead of the parts: SetLimit may find it past the limit already.
		if err = f.SetLimit(5000); err == nil {
			body, _ := f.Body(BodyOptions{})
			_, err = body.WriteTo(io.Discard)
		}
		var tl *TooLargeError
		if !errors.As(err, &tl) || tl.Limit != 5000 {
			t.Fatalf("error %v, want a *TooLargeError of 5000", err)
		}
		if f.Size() > 5001+readSize {
			t.Errorf("read %d bytes, more than the limit and one read ahead", f.Size())
		}
	})
	t.Run("spooled file already past it", func(t *testing.T) {
		f, err := Parse(bytes.NewReader(build(t, b, []part{file("file", "a", "", data), field("model", "m")})), b, Options{TempDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = f.Close() }()
		var tl *TooLargeError
		if err := f.SetLimit(5000); !errors.As(err, &tl) {
			t.Fatalf("SetLimit: %v, want a *TooLargeError", err)
		}
		if err := f.SetLimit(20_000); err != nil {
			t.Fatalf("SetLimit above the size: %v", err)
		}
	})
}

// TestFallback builds the body again for a second route.
func TestFallback(t *testing.T) {
	b := "fallback"
	img := randomBytes(7, 200_000)
	body := build(t, b, []part{
		field("model", "gpt-image-1"), file("image[]", "a.png", "image/png", img), file("image[]", "b.png", "image/png", img[:999]),
		file("mask", "m.png", "image/png", img[:10]), field("prompt", "p"),
	})
	route1 := BodyOptions{Set: map[string]string{"model": "gpt-image-1"}}
	route2 := BodyOptions{Set: map[string]string{"model": "gpt-image-1-mini"}}

	t.Run("replay: identical twice, second route whole after the first failed midway", func(t *testing.T) {
		f, err := Parse(bytes.NewReader(body), b, Options{TempDir: t.TempDir(), Replay: true})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = f.Close() }()
		one, _ := f.Body(route1)
		_, raw1 := readBack(t, one)
		two, _ := f.Body(route1)
		_, raw2 := readBack(t, two)
		if !bytes.Equal(raw1, raw2) {
			t.Error("the body differs when produced twice")
		}
		// Route 1 fails after reading part of its body.
		failed, _ := f.Body(route1)
		if _, err := io.CopyN(io.Discard, failed, 100_000); err != nil {
			t.Fatal(err)
		}
		if !f.Replayable() {
			t.Fatal("a replay form is not replayable")
		}
		next, err := f.Body(route2)
		if err != nil {
			t.Fatal(err)
		}
		got, raw3 := readBack(t, next)
		sameParts(t, got, []part{
			field("model", "gpt-image-1-mini"), file("image[]", "a.png", "image/png", img), file("image[]", "b.png", "image/png", img[:999]),
			file("mask", "m.png", "image/png", img[:10]), field("prompt", "p"),
		})
		if want := bytes.Replace(raw1, []byte("gpt-image-1\r\n"), []byte("gpt-image-1-mini\r\n"), 1); !bytes.Equal(raw3, want) {
			t.Error("the second route's body differs from the first's beyond the model")
		}
	})
	t.Run("streamed: no second body once the first read the request", func(t *testing.T) {
		f, err := Parse(bytes.NewReader(body), b, Options{TempDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = f.Close() }()
		unread, _ := f.Body(route1) // route 1 failed before sending anything
		_ = unread
		one, err := f.Body(route1)
		if err != nil {
			t.Fatalf("a body that read nothing blocked the next: %v", err)
		}
		if _, err := io.CopyN(io.Discard, one, 1000); err != nil {
			t.Fatal(err)
		}
		if f.Replayable() {
			t.Error("Replayable after the streamed file was read")
		}
		if _, err := f.Body(route2); !errors.Is(err, ErrConsumed) {
			t.Errorf("second body: %v, want ErrConsumed", err)
		}
		if _, err := io.Copy(io.Discard, unread); !errors.Is(err, ErrConsumed) {
			t.Errorf("reading a stale body: %v, want ErrConsumed", err)
		}
	})
}

// TestMalformed checks that broken bodies give clear, typed errors.
func TestMalformed(t *testing.T) {
	b := "BB"
	good := build(t, b, []part{field("model", "m"), file("file", "a.wav", "audio/wav", "RIFFdata")})
	tests := []struct {
		name     string
		body     string
		boundary string
		opt      Options
		tooLarge string // the field named in a *TooLargeError
		inBody   bool
		contains string
	}{
		{name: "empty body", body: "", boundary: b, contains: "malformed multipart body"},
		{name: "not multipart", body: `{"model":"m"}`, boundary: b, contains: "malformed multipart body"},
		{name: "wrong boundary", body: string(good), boundary: "other", contains: "malformed multipart body"},
		{name: "no boundary", body: string(good), boundary: "", contains: "boundary"},
		{name: "truncated field", body: string(good[:40]), boundary: b, contains: "malformed multipart body"},
		{name: "truncated streamed file", body: string(good[:len(good)-12]), boundary: b, inBody: true, contains: "reading file \"file\""},
		{name: "part without a name", body: "--BB\r\nContent-Disposition: form-data\r\n\r\nx\r\n--BB--\r\n", boundary: b, contains: "without a form-data name"},
		{name: "bad disposition", body: "--BB\r\nContent-Disposition: ;;;\r\n\r\nx\r\n--BB--\r\n", boundary: b, contains: "Content-Disposition"},
		{name: "attachment, not form-data", body: "--BB\r\nContent-Disposition: attachment; name=\"x\"\r\n\r\nx\r\n--BB--\r\n", boundary: b, contains: "without a form-data name"},
		{
			name: "field too large", boundary: b, opt: Options{MaxFieldBytes: 10}, tooLarge: "prompt",
			body: string(build(t, b, []part{field("prompt", strings.Repeat("x", 11))})),
		},
		{
			name: "fields too large together", boundary: b, opt: Options{MaxFieldsBytes: 15}, tooLarge: "b",
			body: string(build(t, b, []part{field("a", strings.Repeat("x", 10)), field("b", strings.Repeat("x", 10))})),
		},
		{
			name: "too many parts", boundary: b, opt: Options{MaxParts: 2}, contains: "more than 2 parts",
			body: string(build(t, b, []part{field("a", "1"), field("b", "2"), field("c", "3")})),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.opt.TempDir = t.TempDir()
			f, err := Parse(strings.NewReader(tc.body), tc.boundary, tc.opt)
			if tc.inBody {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				body, _ := f.Body(BodyOptions{})
				_, err = body.WriteTo(io.Discard)
				_ = f.Close()
			} else if err == nil {
				_ = f.Close()
				t.Fatal("no error")
			}
			if tc.tooLarge != "" {
				var tl *TooLargeError
				if !errors.As(err, &tl) || tl.Field != tc.tooLarge {
					t.Fatalf("error %v, want a *TooLargeError for %q", err, tc.tooLarge)
				}
				return
			}
			var fe *FormError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v (%T), want a *FormError", err, err)
			}
			if !strings.Contains(err.Error(), tc.contains) {
				t.Errorf("error %q does not say %q", err, tc.contains)
			}
		})
	}
}

func TestBoundary(t *testing.T) {
	tests := []struct {
		ct, want string
		ok       bool
	}{
		{"multipart/form-data; boundary=abc", "abc", true},
		{`multipart/form-data; boundary="a b:c"`, "a b:c", true},
		{"application/json", "", false},
		{"multipart/form-data", "", false},
		{"multipart/form-data; boundary=" + strings.Repeat("x", 71), "", false},
		{"", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.ct, func(t *testing.T) {
			got, err := Boundary(tc.ct)
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("Boundary(%q) = %q, %v", tc.ct, got, err)
			}
			var fe *FormError
			if err != nil && !errors.As(err, &fe) {
				t.Errorf("error %T, want a *FormError", err)
			}
		})
	}
}

// A failed read of the request is neither a malformed form nor too large.
func TestReadError(t *testing.T) {
	b := "BB"
	body := build(t, b, []part{file("file", "a", "", strings.Repeat("x", 10_000)), field("model", "m")})
	boom := errors.New("connection reset")
	r := io.MultiReader(bytes.NewReader(body[:5000]), iotestErrReader{boom})
	_, err := Parse(r, b, Options{TempDir: t.TempDir()})
	var fe *FormError
	if !errors.Is(err, boom) || errors.As(err, &fe) {
		t.Fatalf("error %v, want the read error unwrapped from no *FormError", err)
	}
}

// A spool that cannot be made is the server's failure, told apart from the client's.
func TestSpoolError(t *testing.T) {
	b := "BB"
	body := build(t, b, []part{file("file", "a", "", strings.Repeat("x", 10_000)), field("model", "m")})
	dir := filepath.Join(t.TempDir(), "missing")
	_, err := Parse(bytes.NewReader(body), b, Options{TempDir: dir, Replay: true})
	var se *SpoolError
	var fe *FormError
	if !errors.As(err, &se) || se.Op != "creating" || !errors.Is(err, fs.ErrNotExist) || errors.As(err, &fe) {
		t.Fatalf("error %v, want a *SpoolError creating the spool", err)
	}
}

type iotestErrReader struct{ err error }

func (r iotestErrReader) Read([]byte) (int, error) { return 0, r.err }

func readMemStats(m *runtime.MemStats) {
	runtime.GC()
	runtime.ReadMemStats(m)
}

// TestLimitExact accepts a body of exactly the limit and refuses one byte more.
func TestLimitExact(t *testing.T) {
	b := "B"
	body := build(t, b, []part{field("model", "m"), file("file", "a", "", strings.Repeat("z", 5000))})
	for _, tc := range []struct {
		name  string
		limit int64
		ok    bool
	}{
		{"at the limit", int64(len(body)), true},
		{"one byte over", int64(len(body)) - 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse(bytes.NewReader(body), b, Options{Limit: tc.limit, TempDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = f.Close() }()
			bd, _ := f.Body(BodyOptions{})
			_, err = bd.WriteTo(io.Discard)
			var tl *TooLargeError
			if tc.ok != (err == nil) || (!tc.ok && !errors.As(err, &tl)) {
				t.Fatalf("error %v, want ok %v", err, tc.ok)
			}
		})
	}
}

func TestSpoolAfterParseMakesTheFormReplayable(t *testing.T) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("model", "whisper-1")
	fw, _ := mw.CreateFormFile("file", "a.wav")
	payload := bytes.Repeat([]byte("audio"), 10000)
	_, _ = fw.Write(payload)
	_ = mw.WriteField("language", "en")
	_ = mw.Close()
	f, err := Parse(bytes.NewReader(buf.Bytes()), mw.Boundary(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if f.Complete() {
		t.Fatal("Parse read past a file it could stream")
	}
	if err := f.Spool(); err != nil {
		t.Fatal(err)
	}
	if !f.Complete() {
		t.Fatal("Spool left the body unread")
	}
	if v, _ := f.Value("language"); v != "en" {
		t.Fatalf("language = %q after Spool", v)
	}
	for range 2 {
		b, err := f.Body(BodyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(b)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(got)) != b.Len() || !bytes.Contains(got, payload) {
			t.Fatalf("body of %d bytes (Len %d) lacks the file", len(got), b.Len())
		}
	}
	rd, err := f.Open(f.Files("file")[0])
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := io.Copy(io.Discard, rd); n != int64(len(payload)) {
		t.Fatalf("spooled file has %d bytes, want %d", n, len(payload))
	}
}
