package openai

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamtest"
)

// fakeSora speaks OpenAI's /videos wire: a create answers a queued job, each poll moves it
// on (queued, in_progress, then completed or failed), its content is served with ranges, and
// an unknown id is OpenAI's 404.
type fakeSora struct {
	mu sync.Mutex
	// polls counts the polls of each job.
	polls map[string]int
	// form is the last create's fields, file its input_reference part.
	form     map[string]string
	file     []byte
	fileName string
	fileType string
	// contentLength is the Content-Length of the last create.
	contentLength int64
	// requests records method, path and query, and the headers of each request.
	requests []string
	headers  []http.Header
	// rateLimitPolls answers the next polls with a 429.
	rateLimitPolls int
	// fail makes the jobs fail.
	failCode string
	// statuses, when set, are the statuses of the successive polls (a compatible server).
	statuses []string
	deleted  map[string]bool
}

// videoBytes is the fake's video: distinct bytes at every offset, so that a range shows.
var videoBytes = func() []byte {
	b := make([]byte, 64<<10)
	copy(b, "\x00\x00\x00\x18ftypmp42")
	for i := 12; i < len(b); i++ {
		b[i] = byte(i*7 + i/251)
	}
	return b
}()

const soraNotFound = `{"error":{"message":"Video with id '%s' not found.","type":"invalid_request_error","param":null,"code":"video_not_found"}}`

func newFakeSora(t *testing.T) (*fakeSora, *Provider) {
	t.Helper()
	f := &fakeSora{polls: map[string]int{}, deleted: map[string]bool{}}
	srv, tr := upstreamtest.NewServer(t, f.serve)
	p := upstreamtest.NewProvider(t, New, Config{Name: "sora", BaseURL: srv.URL + "/v1", APIKey: "sk-test-secret", Transport: tr})
	return f, p
}

func (f *fakeSora) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r.Method+" "+r.URL.EscapedPath()+"?"+r.URL.RawQuery)
	f.headers = append(f.headers, r.Header.Clone())
	if r.Header.Get("Authorization") != "Bearer sk-test-secret" {
		writeOpenAIJSON(w, 401, `{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/videos")
	switch {
	case !ok:
		http.NotFound(w, r)
	case rest == "" && r.Method == http.MethodPost:
		f.create(w, r)
	case r.Method == http.MethodGet && strings.HasSuffix(rest, "/content"):
		id := strings.TrimSuffix(strings.TrimPrefix(rest, "/"), "/content")
		if !f.known(id) {
			writeOpenAIJSON(w, 404, fmt.Sprintf(soraNotFound, id))
			return
		}
		switch r.URL.Query().Get("variant") {
		case "video":
			w.Header().Set("Content-Type", "video/mp4")
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(videoBytes))
		case "thumbnail":
			w.Header().Set("Content-Type", "image/webp")
			_, _ = w.Write([]byte("RIFF....WEBPVP8 "))
		default:
			writeOpenAIJSON(w, 400, `{"error":{"message":"Invalid variant.","type":"invalid_request_error","param":"variant","code":null}}`)
		}
	case r.Method == http.MethodGet:
		f.poll(w, strings.TrimPrefix(rest, "/"))
	case r.Method == http.MethodDelete:
		id := strings.TrimPrefix(rest, "/")
		if !f.known(id) {
			writeOpenAIJSON(w, 404, fmt.Sprintf(soraNotFound, id))
			return
		}
		f.deleted[id] = true
		writeOpenAIJSON(w, 200, `{"id":"`+id+`","object":"video.deleted","deleted":true}`)
	default:
		http.Error(w, "method not allowed", 405)
	}
}

func (f *fakeSora) known(id string) bool {
	_, ok := f.polls[id]
	return ok && !f.deleted[id]
}

func (f *fakeSora) create(w http.ResponseWriter, r *http.Request) {
	f.contentLength = r.ContentLength
	_, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		writeOpenAIJSON(w, 400, `{"error":{"message":"expected multipart","type":"invalid_request_error","param":null,"code":null}}`)
		return
	}
	f.form, f.file = map[string]string{}, nil
	mr := multipart.NewReader(r.Body, params["boundary"])
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			writeOpenAIJSON(w, 400, `{"error":{"message":"bad multipart","type":"invalid_request_error","param":null,"code":null}}`)
			return
		}
		b, _ := io.ReadAll(part)
		if part.FileName() != "" {
			f.file, f.fileName, f.fileType = b, part.FileName(), part.Header.Get("Content-Type")
			continue
		}
		f.form[part.FormName()] = string(b)
	}
	id := fmt.Sprintf("video_%d", len(f.polls)+1)
	f.polls[id] = 0
	w.Header().Set("openai-poll-after-ms", "1500")
	writeOpenAIJSON(w, 200, f.object(id, "queued", 0))
}

func (f *fakeSora) poll(w http.ResponseWriter, id string) {
	if !f.known(id) {
		writeOpenAIJSON(w, 404, fmt.Sprintf(soraNotFound, id))
		return
	}
	if f.rateLimitPolls > 0 {
		f.rateLimitPolls--
		w.Header().Set("Retry-After", "2")
		writeOpenAIJSON(w, 429, `{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}`)
		return
	}
	f.polls[id]++
	n := f.polls[id]
	if f.statuses != nil {
		writeOpenAIJSON(w, 200, `{"id":"`+id+`","object":"video","status":"`+f.statuses[min(n, len(f.statuses))-1]+`","progress":12.6,"seconds":4,"size":"720x1280"}`)
		return
	}
	w.Header().Set("openai-poll-after-ms", "2000")
	switch {
	case n == 1:
		writeOpenAIJSON(w, 200, f.object(id, "queued", 0))
	case n == 2:
		writeOpenAIJSON(w, 200, f.object(id, "in_progress", 40))
	case f.failCode != "":
		writeOpenAIJSON(w, 200, strings.Replace(f.object(id, "failed", 40), `"error":null`,
			`"error":{"code":"`+f.failCode+`","message":"Your request was blocked by our moderation system."}`, 1))
	default:
		writeOpenAIJSON(w, 200, f.object(id, "completed", 100))
	}
}

// object is a video job as OpenAI answers it.
func (f *fakeSora) object(id, status string, progress int) string {
	return fmt.Sprintf(`{"id":%q,"object":"video","model":"sora-2","status":%q,"progress":%d,"created_at":1764400000,`+
		`"completed_at":null,"expires_at":null,"prompt":"a fox","size":"1792x1024","seconds":"8","quality":"standard",`+
		`"remixed_from_video_id":null,"error":null}`, id, status, progress)
}

func writeOpenAIJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func (f *fakeSora) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

func upstreamErr(t *testing.T, err error) *providers.UpstreamError {
	t.Helper()
	ue, ok := providers.AsUpstreamError(err)
	if !ok {
		t.Fatalf("error %v (%T) is not an *UpstreamError", err, err)
	}
	return ue
}

func TestSoraVideoLifecycle(t *testing.T) {
	checkGoroutines(t)
	f, p := newFakeSora(t)
	ctx := context.Background()
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{0xab}, 100_000)...)
	st, err := p.StartVideo(ctx, &providers.VideoRequest{
		Model: "sora-2", Prompt: "a fox in the snow", Seconds: 8, Size: "1792x1024",
		InputReference: &providers.ImageInput{Data: png, MIMEType: "image/png", FileName: "first.png"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := providers.VideoStatus{NativeID: "video_1", Status: providers.JobQueued, PollAfter: 1500 * time.Millisecond,
		Seconds: 8 * time.Second, Size: "1792x1024", Resolution: "1024p"}
	if st.NativeID != want.NativeID || st.Status != want.Status || st.PollAfter != want.PollAfter ||
		st.Seconds != want.Seconds || st.Size != want.Size || st.Resolution != want.Resolution {
		t.Fatalf("started %+v, want %+v", st, want)
	}
	if f.form["model"] != "sora-2" || f.form["prompt"] != "a fox in the snow" || f.form["seconds"] != "8" || f.form["size"] != "1792x1024" {
		t.Errorf("form %v", f.form)
	}
	if !bytes.Equal(f.file, png) || f.fileName != "first.png" || f.fileType != "image/png" {
		t.Errorf("input_reference %d bytes %q %q", len(f.file), f.fileName, f.fileType)
	}
	if f.contentLength <= int64(len(png)) {
		t.Errorf("create sent with Content-Length %d: the body's length must be known", f.contentLength)
	}

	var statuses []string
	for range 3 {
		st, err = p.PollVideo(ctx, "sora-2", "video_1")
		if err != nil {
			t.Fatal(err)
		}
		statuses = append(statuses, fmt.Sprintf("%s/%d", st.Status, st.Progress))
	}
	if got := strings.Join(statuses, " "); got != "queued/0 in_progress/40 completed/100" {
		t.Errorf("polls: %s", got)
	}
	if st.PollAfter != 2*time.Second || st.Samples != 1 || strings.Join(st.Variants, ",") != "video,thumbnail,spritesheet" || st.ErrorCode != "" {
		t.Errorf("completed %+v", st)
	}

	c, err := p.VideoContent(ctx, &providers.VideoContentRequest{Model: "sora-2", NativeID: "video_1", RangeHeader: "bytes=1000-1999"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c.Body)
	_ = c.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != http.StatusPartialContent || c.ContentRange != fmt.Sprintf("bytes 1000-1999/%d", len(videoBytes)) ||
		c.Length != 1000 || c.ContentType != "video/mp4" || !bytes.Equal(got, videoBytes[1000:2000]) {
		t.Errorf("range: status %d range %q length %d type %q, %d bytes", c.Status, c.ContentRange, c.Length, c.ContentType, len(got))
	}
	// A range past the end is the upstream's 416, for the client to see.
	_, err = p.VideoContent(ctx, &providers.VideoContentRequest{Model: "sora-2", NativeID: "video_1", RangeHeader: "bytes=999999-"})
	if ue := upstreamErr(t, err); ue.Status != http.StatusRequestedRangeNotSatisfiable || ue.Category != providers.CategoryInvalidRequest {
		t.Errorf("unsatisfiable range: %+v", ue)
	}
	c, err = p.VideoContent(ctx, &providers.VideoContentRequest{Model: "sora-2", NativeID: "video_1", Variant: "thumbnail"})
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(c.Body)
	_ = c.Body.Close()
	if c.Status != 200 || c.ContentType != "image/webp" || string(got) != "RIFF....WEBPVP8 " {
		t.Errorf("thumbnail: %d %q %q", c.Status, c.ContentType, got)
	}

	if err := p.DeleteVideo(ctx, "sora-2", "video_1"); err != nil {
		t.Fatal(err)
	}
	// Deleted, the job is unknown upstream.
	_, err = p.PollVideo(ctx, "sora-2", "video_1")
	if ue := upstreamErr(t, err); ue.Category != providers.CategoryNotFound || ue.Retryable || ue.Code != "video_not_found" {
		t.Errorf("poll after delete: %+v", ue)
	}

	calls := f.calls()
	wantCalls := []string{"POST /v1/videos?", "GET /v1/videos/video_1?", "GET /v1/videos/video_1?", "GET /v1/videos/video_1?",
		"GET /v1/videos/video_1/content?variant=video", "GET /v1/videos/video_1/content?variant=video",
		"GET /v1/videos/video_1/content?variant=thumbnail",
		"DELETE /v1/videos/video_1?", "GET /v1/videos/video_1?"}
	if strings.Join(calls, "\n") != strings.Join(wantCalls, "\n") {
		t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(wantCalls, "\n"))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, h := range f.headers[1:] {
		if h.Get("Content-Type") != "" {
			t.Errorf("%s sent a Content-Type without a body", calls[i+1])
		}
	}
	if got := f.headers[4].Get("Range"); got != "bytes=1000-1999" {
		t.Errorf("content sent Range %q", got)
	}
	if got := f.headers[4].Get("Accept"); got != "application/binary" {
		t.Errorf("content sent Accept %q", got)
	}
}

func TestSoraVideoFailed(t *testing.T) {
	f, p := newFakeSora(t)
	f.failCode = "moderation_blocked"
	ctx := context.Background()
	st, err := p.StartVideo(ctx, &providers.VideoRequest{Model: "sora-2", Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if st, err = p.PollVideo(ctx, "sora-2", st.NativeID); err != nil {
			t.Fatal(err)
		}
	}
	if st.Status != providers.JobFailed || st.ErrorCode != "moderation_blocked" || !strings.Contains(st.ErrorMessage, "moderation system") {
		t.Errorf("failed job: %+v", st)
	}
	// Fields left out of the request are not sent.
	if _, ok := f.form["seconds"]; ok {
		t.Errorf("seconds sent: %v", f.form)
	}
	if _, ok := f.form["size"]; ok {
		t.Errorf("size sent: %v", f.form)
	}
}

func TestSoraVideoErrors(t *testing.T) {
	f, p := newFakeSora(t)
	ctx := context.Background()
	st, err := p.StartVideo(ctx, &providers.VideoRequest{Model: "sora-2", Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}

	f.mu.Lock()
	f.rateLimitPolls = 1
	f.mu.Unlock()
	_, err = p.PollVideo(ctx, "sora-2", st.NativeID)
	if ue := upstreamErr(t, err); ue.Category != providers.CategoryRateLimited || !ue.Retryable || ue.RetryAfter != 2*time.Second {
		t.Errorf("429: %+v", ue)
	}
	// The next poll goes through.
	if _, err := p.PollVideo(ctx, "sora-2", st.NativeID); err != nil {
		t.Fatal(err)
	}

	for name, call := range map[string]func() error{
		"poll": func() error { _, err := p.PollVideo(ctx, "sora-2", "video_404"); return err },
		"content": func() error {
			_, err := p.VideoContent(ctx, &providers.VideoContentRequest{NativeID: "video_404"})
			return err
		},
		"delete": func() error { return p.DeleteVideo(ctx, "sora-2", "video_404") },
	} {
		ue := upstreamErr(t, call())
		if ue.Status != 404 || ue.Category != providers.CategoryNotFound || ue.Retryable || !strings.Contains(ue.Message, "not found") {
			t.Errorf("%s of an unknown job: %+v", name, ue)
		}
	}

	before := len(f.calls())
	_, err = p.PollVideo(ctx, "sora-2", "")
	if ue := upstreamErr(t, err); ue.Category != providers.CategoryNotFound || len(f.calls()) != before {
		t.Errorf("empty id: %+v, %d calls", ue, len(f.calls())-before)
	}

	// An id cannot reach another path.
	_, err = p.PollVideo(ctx, "sora-2", "../models")
	if ue := upstreamErr(t, err); ue.Category != providers.CategoryNotFound {
		t.Errorf("escaped id: %+v", ue)
	}
	if calls := f.calls(); calls[len(calls)-1] != "GET /v1/videos/..%2Fmodels?" {
		t.Errorf("escaped id called %s", calls[len(calls)-1])
	}

	before = len(f.calls())
	for _, tc := range []struct {
		name string
		req  providers.VideoContentRequest
	}{
		{"variant", providers.VideoContentRequest{NativeID: st.NativeID, Variant: "poster"}},
		{"index", providers.VideoContentRequest{NativeID: st.NativeID, Index: 1}},
	} {
		_, err := p.VideoContent(ctx, &tc.req)
		if ue := upstreamErr(t, err); ue.Category != providers.CategoryNotFound {
			t.Errorf("%s: %+v", tc.name, ue)
		}
	}
	if len(f.calls()) != before {
		t.Errorf("content refused locally still called the upstream: %v", f.calls()[before:])
	}
}

func TestSoraVideoRequestMapping(t *testing.T) {
	f, p := newFakeSora(t)
	ctx := context.Background()
	seed := int64(7)
	for _, tc := range []struct {
		name  string
		req   providers.VideoRequest
		size  string
		param string
	}{
		{name: "resolution and ratio", req: providers.VideoRequest{Resolution: "720p", AspectRatio: "9:16"}, size: "720x1280"},
		{name: "resolution alone is landscape", req: providers.VideoRequest{Resolution: "1024P"}, size: "1792x1024"},
		{name: "ratio alone is 720p", req: providers.VideoRequest{AspectRatio: "9:16"}, size: "720x1280"},
		{name: "size wins", req: providers.VideoRequest{Size: "1280x720", Resolution: "1080p"}, size: "1280x720"},
		{name: "unknown resolution", req: providers.VideoRequest{Resolution: "480p"}, param: "resolution"},
		{name: "unknown ratio", req: providers.VideoRequest{AspectRatio: "1:1"}, param: "aspect_ratio"},
		{name: "unknown ratio at 1080p", req: providers.VideoRequest{Resolution: "1080p", AspectRatio: "4:3"}, param: "aspect_ratio"},
		{name: "negative prompt", req: providers.VideoRequest{NegativePrompt: "blur"}, param: "negative_prompt"},
		{name: "seed", req: providers.VideoRequest{Seed: &seed}, param: "seed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(f.calls())
			tc.req.Model, tc.req.Prompt = "sora-2", "x"
			_, err := p.StartVideo(ctx, &tc.req)
			if tc.param != "" {
				ue := upstreamErr(t, err)
				if ue.Category != providers.CategoryInvalidRequest || !ue.Unsupported || ue.Param != tc.param || !errors.Is(err, ErrUnsupportedVideo) {
					t.Errorf("refusal %+v", ue)
				}
				if len(f.calls()) != before {
					t.Error("a refused request reached the upstream")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.form["size"] != tc.size {
				t.Errorf("size %q, want %q", f.form["size"], tc.size)
			}
		})
	}
}

// A compatible server's statuses and number types are read.
func TestCompatibleVideoStatuses(t *testing.T) {
	f, p := newFakeSora(t)
	ctx := context.Background()
	st, err := p.StartVideo(ctx, &providers.VideoRequest{Model: "wan-2.2", Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.statuses = []string{"pending", "processing", "cancelled"}
	f.mu.Unlock()
	var got []string
	for range 3 {
		s, err := p.PollVideo(ctx, "wan-2.2", st.NativeID)
		if err != nil {
			t.Fatal(err)
		}
		if s.Seconds != 4*time.Second || s.Size != "720x1280" || s.Resolution != "720p" || s.Progress != 13 {
			t.Errorf("status %+v", s)
		}
		got = append(got, s.Status+":"+s.ErrorCode)
	}
	if strings.Join(got, " ") != "queued: in_progress: failed:cancelled" {
		t.Errorf("statuses %v", got)
	}
}

func TestSizeResolution(t *testing.T) {
	for size, want := range map[string]string{
		"1280x720": "720p", "720x1280": "720p", "1792x1024": "1024p", "1024x1792": "1024p", "1920x1080": "1080p",
		"": "", "auto": "", "0x720": "", "axb": "",
	} {
		if got := sizeResolution(size); got != want {
			t.Errorf("sizeResolution(%q) = %q, want %q", size, got, want)
		}
	}
}
