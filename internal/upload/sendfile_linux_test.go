package upload

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// received is what a plain HTTP server got as the body of each request.
type received struct {
	srv    *httptest.Server
	bodies chan []byte
}

func newReceiver(t *testing.T) *received {
	r := &received{bodies: make(chan []byte, 8)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.bodies <- b
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// send posts body through a real transport, as upstreamhttp does (length announced), and
// returns what the server received and the bytes sent from the spool.
func (r *received) send(t *testing.T, body *Body, length int64) ([]byte, int64, error) {
	t.Helper()
	before := sentBySendfile.Load()
	req, err := http.NewRequest(http.MethodPost, r.srv.URL, body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = length
	req.Header.Set("Content-Type", body.ContentType())
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := tr.RoundTrip(req)
	if err == nil {
		_ = resp.Body.Close()
	}
	return <-r.bodies, sentBySendfile.Load() - before, err
}

// plainBody is the body opt makes of f, read part by part.
func plainBody(t *testing.T, f *Form, opt BodyOptions) []byte {
	t.Helper()
	b, err := f.Body(opt)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := b.WriteTo(struct{ io.Writer }{&buf}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// The rest of a spooled body goes out with sendfile(2) when it is one stretch of the spool,
// part by part otherwise, and the upstream gets the same bytes either way.
func TestBodySentFromSpool(t *testing.T) {
	const b = "sendfile-boundary"
	img1, img2, mask := randomBytes(21, 300<<10), randomBytes(22, 200<<10), randomBytes(23, 50<<10)
	edit := BodyOptions{Set: map[string]string{"model": "up-model"}, Lists: []string{"image"}, Drop: []string{"meta"}}
	tests := []struct {
		name     string
		parts    []part
		opt      BodyOptions
		sendfile bool
	}{
		{"fields first", []part{field("model", "m"), field("prompt", "p"), file("image[]", "a.png", "image/png", img1), file("image[]", "b.png", "image/png", img2)}, edit, true},
		{"files first, as the SDKs send", []part{file("image[]", "a.png", "image/png", img1), file("image[]", "b.png", "image/png", img2), file("mask", "m.png", "", mask), field("model", "m"), field("meta", "x"), field("n", "2")}, edit, true},
		{"a field between files", []part{file("image[]", "a.png", "image/png", img1), field("model", "m"), file("mask", "m.png", "image/png", mask)}, edit, false},
		{"renamed files", []part{field("model", "m"), file("image", "a.png", "image/png", img1), file("image", "b.png", "image/png", img2)}, edit, false},
		{"indexed lists", []part{field("model", "m"), file("image[]", "a.png", "image/png", img1), file("image[]", "b.png", "image/png", img2)}, BodyOptions{ListStyle: Indexed, Lists: []string{"image"}}, false},
		{"a dropped file last", []part{field("model", "m"), file("image[]", "a.png", "image/png", img1), file("meta", "x.bin", "", mask)}, edit, false},
	}
	rcv := newReceiver(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw := build(t, b, tc.parts)
			f, err := Parse(bytes.NewReader(raw), b, Options{TempDir: t.TempDir(), Replay: true})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = f.Close() }()
			want := plainBody(t, f, tc.opt)
			// Twice, as a retry or a fallback sends it again.
			for try := range 2 {
				body, err := f.Body(tc.opt)
				if err != nil {
					t.Fatal(err)
				}
				got, fromSpool, err := rcv.send(t, body, body.Len())
				if err != nil {
					t.Fatalf("try %d: %v", try, err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("try %d: the upstream got %d bytes, not the %d of the body read part by part", try, len(got), len(want))
				}
				if (fromSpool > 0) != tc.sendfile {
					t.Errorf("try %d: %d bytes sent from the spool, want sendfile %v", try, fromSpool, tc.sendfile)
				}
				if tc.sendfile && fromSpool < int64(len(img2)) {
					t.Errorf("try %d: only %d bytes sent from the spool", try, fromSpool)
				}
			}
		})
	}
}

// A pooled spool file holds an earlier upload past the form's own bytes: a transport that
// expects more than the body holds must not get them.
func TestSendfileNeverSendsPastTheBody(t *testing.T) {
	const b = "stale-boundary"
	dir := t.TempDir()
	stale := strings.Repeat("STALE-UPLOAD-", 200<<10)
	first, err := Parse(bytes.NewReader(build(t, b, []part{field("model", "m"), file("image[]", "a.png", "", stale)})), b, Options{TempDir: dir, Replay: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := Parse(bytes.NewReader(build(t, b, []part{field("model", "m"), file("image[]", "a.png", "", randomBytes(31, 100<<10))})), b, Options{TempDir: dir, Replay: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	body, err := f.Body(BodyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rcv := newReceiver(t)
	got, _, err := rcv.send(t, body, body.Len()+64<<10)
	if err == nil {
		t.Error("a body shorter than its announced length was sent without an error")
	}
	if bytes.Contains(got, []byte("STALE-UPLOAD-")) {
		t.Fatal("the upstream got bytes of an earlier upload from the pooled spool file")
	}
}

// Sends of one form at once (a transport still writing an attempt's body when the next
// attempt's begins) each send their own body whole: the spool's position is theirs in turn.
func TestConcurrentSendsFromOneSpool(t *testing.T) {
	const b = "concurrent-boundary"
	f, err := Parse(bytes.NewReader(build(t, b, []part{field("model", "m"), file("file", "a.wav", "audio/wav", randomBytes(41, 16<<20))})), b,
		Options{TempDir: t.TempDir(), Replay: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	opt := BodyOptions{Set: map[string]string{"model": "up"}}
	want := plainBody(t, f, opt)
	// The server reads slowly, so that each send waits on the socket midway and the
	// others' run meanwhile.
	rcv := &received{bodies: make(chan []byte, 8)}
	rcv.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var got bytes.Buffer
		buf := make([]byte, 64<<10)
		for {
			n, err := req.Body.Read(buf)
			got.Write(buf[:n])
			if err != nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
		rcv.bodies <- got.Bytes()
	}))
	t.Cleanup(rcv.srv.Close)
	const sends = 4
	errs := make(chan error, sends)
	for range sends {
		go func() {
			body, err := f.Body(opt)
			if err != nil {
				errs <- err
				return
			}
			req, _ := http.NewRequest(http.MethodPost, rcv.srv.URL, body)
			req.ContentLength = body.Len()
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			resp, err := tr.RoundTrip(req)
			if err == nil {
				_ = resp.Body.Close()
			}
			errs <- err
		}()
	}
	for i := range sends {
		if err := <-errs; err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if got := <-rcv.bodies; !bytes.Equal(got, want) {
			t.Fatalf("an upstream got %d bytes unlike the body's %d", len(got), len(want))
		}
	}
}
