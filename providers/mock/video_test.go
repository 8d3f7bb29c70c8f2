package mock

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// videoMock is a mock whose clock the test moves.
func videoMock(t *testing.T) (*Provider, *time.Time) {
	t.Helper()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := New(Config{Name: "mock", VideoRender: 4 * time.Second, VideoBytesPerSecond: 1000})
	p.videos.now = func() time.Time { return now }
	return p, &now
}

func TestVideoJobLifecycle(t *testing.T) {
	ctx := context.Background()
	p, now := videoMock(t)
	st, err := p.StartVideo(ctx, &providers.VideoRequest{Model: "mock-video", Prompt: "a cat", Seconds: 8, Resolution: "720p"})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != providers.JobQueued || st.Size != "1280x720" || st.Resolution != "720p" || st.PollAfter != time.Second {
		t.Fatalf("start: %+v", st)
	}
	var progress []int
	start := *now
	for _, at := range []time.Duration{2 * time.Second, 3 * time.Second} {
		*now = start.Add(at)
		st, err := p.PollVideo(ctx, "mock-video", st.NativeID)
		if err != nil || st.Status != providers.JobInProgress {
			t.Fatalf("poll at %v: %+v, %v", at, st, err)
		}
		progress = append(progress, st.Progress)
	}
	if progress[0] != 50 || progress[1] != 75 {
		t.Fatalf("progress %v, want [50 75]", progress)
	}
	if _, err := p.VideoContent(ctx, &providers.VideoContentRequest{NativeID: st.NativeID}); !isStatus(err, http.StatusNotFound) {
		t.Fatalf("content of a running job: %v; want 404", err)
	}
	*now = start.Add(4 * time.Second)
	done, err := p.PollVideo(ctx, "mock-video", st.NativeID)
	if err != nil || done.Status != providers.JobCompleted || done.Progress != 100 || done.Seconds != 8*time.Second || done.Samples != 1 {
		t.Fatalf("completed: %+v, %v", done, err)
	}

	whole, err := p.VideoContent(ctx, &providers.VideoContentRequest{NativeID: st.NativeID, Variant: "video"})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(whole.Body)
	if whole.Status != 200 || whole.Length != 8000 || len(body) != 8000 || whole.ContentType != "video/mp4" || string(body[4:8]) != "ftyp" || string(body[36:40]) != "mdat" {
		t.Fatalf("whole video: %+v, %d bytes, header %q", whole, len(body), body[:48])
	}
	ref, total, _ := p.VideoBytes(st.NativeID)
	want, _ := io.ReadAll(ref)
	if total != 8000 || !bytes.Equal(body, want) {
		t.Fatal("VideoBytes differs from the content streamed")
	}
	for _, tc := range []struct {
		header       string
		from, to     int
		contentRange string
	}{
		{"bytes=0-99", 0, 99, "bytes 0-99/8000"},
		{"bytes=45-1000", 45, 1000, "bytes 45-1000/8000"},
		{"bytes=7990-", 7990, 7999, "bytes 7990-7999/8000"},
		{"bytes=-13", 7987, 7999, "bytes 7987-7999/8000"},
		{"bytes=7000-99999", 7000, 7999, "bytes 7000-7999/8000"},
	} {
		part, err := p.VideoContent(ctx, &providers.VideoContentRequest{NativeID: st.NativeID, RangeHeader: tc.header})
		if err != nil {
			t.Fatalf("%s: %v", tc.header, err)
		}
		got, _ := io.ReadAll(part.Body)
		if part.Status != 206 || part.ContentRange != tc.contentRange || part.Length != int64(tc.to-tc.from+1) || !bytes.Equal(got, body[tc.from:tc.to+1]) {
			t.Errorf("%s: status %d, range %q, length %d, %d bytes", tc.header, part.Status, part.ContentRange, part.Length, len(got))
		}
	}
	// One byte at a time reads the same bytes as a large read.
	part, _ := p.VideoContent(ctx, &providers.VideoContentRequest{NativeID: st.NativeID, RangeHeader: "bytes=40-60"})
	var small []byte
	for b := make([]byte, 1); ; {
		n, err := part.Body.Read(b)
		small = append(small, b[:n]...)
		if err == io.EOF {
			break
		}
	}
	if !bytes.Equal(small, body[40:61]) {
		t.Fatal("byte-sized reads differ")
	}
	if _, err := p.VideoContent(ctx, &providers.VideoContentRequest{NativeID: st.NativeID, RangeHeader: "bytes=8000-"}); !isStatus(err, http.StatusRequestedRangeNotSatisfiable) {
		t.Fatalf("a range past the end: %v; want 416", err)
	}

	thumb, err := p.VideoContent(ctx, &providers.VideoContentRequest{NativeID: st.NativeID, Variant: "thumbnail"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(thumb.Body); err != nil || thumb.ContentType != "image/png" {
		t.Fatalf("thumbnail: %v, %q", err, thumb.ContentType)
	}
	for _, req := range []providers.VideoContentRequest{{Variant: "spritesheet"}, {Index: 1}} {
		req.NativeID = st.NativeID
		if _, err := p.VideoContent(ctx, &req); !isStatus(err, http.StatusNotFound) {
			t.Errorf("%+v: %v; want 404", req, err)
		}
	}

	if err := p.DeleteVideo(ctx, "mock-video", st.NativeID); err != nil {
		t.Fatal(err)
	}
	if _, err := p.PollVideo(ctx, "mock-video", st.NativeID); !isStatus(err, http.StatusNotFound) {
		t.Fatalf("poll of a deleted job: %v; want 404", err)
	}
}

// Identical requests make identical videos under different ids; another prompt another one.
func TestVideoDeterministic(t *testing.T) {
	ctx := context.Background()
	p, _ := videoMock(t)
	read := func(id string) []byte {
		r, _, err := p.VideoBytes(id)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r)
		return b
	}
	a, _ := p.StartVideo(ctx, &providers.VideoRequest{Model: "m", Prompt: "a cat"})
	b, _ := p.StartVideo(ctx, &providers.VideoRequest{Model: "m", Prompt: "a cat"})
	c, _ := p.StartVideo(ctx, &providers.VideoRequest{Model: "m", Prompt: "a dog"})
	if a.NativeID == b.NativeID || !bytes.Equal(read(a.NativeID), read(b.NativeID)) || bytes.Equal(read(a.NativeID), read(c.NativeID)) {
		t.Fatal("videos are not a function of their request")
	}
	if a.Size != "720x1280" {
		t.Fatalf("default size %q", a.Size)
	}
}

func TestVideoFailures(t *testing.T) {
	ctx := context.Background()
	p, now := videoMock(t)
	_, err := p.StartVideo(ctx, &providers.VideoRequest{Model: "mock-video-down", Prompt: "x"})
	var ue *providers.UpstreamError
	if !errors.As(err, &ue) || ue.Status != 503 || !ue.Retryable || !ue.Fallbackable() {
		t.Fatalf("a down model: %v", err)
	}
	for _, req := range []providers.VideoRequest{{Model: "mock-video-fail", Prompt: "x"}, {Model: "mock-video", Prompt: "x [mock:fail]"}} {
		st, err := p.StartVideo(ctx, &req)
		if err != nil {
			t.Fatal(err)
		}
		*now = now.Add(time.Hour)
		st, err = p.PollVideo(ctx, req.Model, st.NativeID)
		if err != nil || st.Status != providers.JobFailed || st.ErrorCode != "video_generation_failed" {
			t.Fatalf("%+v: %+v, %v", req, st, err)
		}
	}
	for _, req := range []providers.VideoRequest{{Size: "big"}, {Resolution: "huge"}, {Resolution: "720p", AspectRatio: "wide"}, {Seconds: -1}} {
		if _, err := p.StartVideo(ctx, &req); !isStatus(err, 400) {
			t.Errorf("%+v: %v; want 400", req, err)
		}
	}
	if _, err := p.PollVideo(ctx, "m", "not-a-mock-id"); !isStatus(err, 404) {
		t.Fatalf("unknown id: %v", err)
	}
}

func isStatus(err error, status int) bool {
	ue, ok := providers.AsUpstreamError(err)
	return ok && ue.Status == status
}
