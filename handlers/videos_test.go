package handlers

import (
	"context"
	"crypto/sha256"
	"errors"
	"hash"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/internal/upload"
	"github.com/modelgateway/caddy-modelgateway/jobs"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/mock"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// videoGateway is a Gateway over SQLite with one video model on a mock upstream whose
// videos are bytesPerSecond large, a clock the test moves, and a jobs engine the test
// polls with by hand (pollAll).
type videoGateway struct {
	*adminGateway
	now    time.Time
	mu     sync.Mutex
	engine *jobs.Engine
}

func newVideoGateway(t *testing.T, bytesPerSecond int64, linkKey []byte) *videoGateway {
	t.Helper()
	return newVideoGatewayOn(t, mock.New(mock.Config{Name: "mockvid", VideoRender: time.Millisecond, VideoBytesPerSecond: bytesPerSecond}), linkKey)
}

// newVideoGatewayOn is newVideoGateway on the upstream up, priced 0.10 USD a second of 720p.
func newVideoGatewayOn(t *testing.T, up providers.Provider, linkKey []byte) *videoGateway {
	t.Helper()
	price, err := pricing.Price{}.WithVideoSeconds(pricing.VideoPrice{Resolution: "720p", Nanos: usdNanos / 10})
	if err != nil {
		t.Fatal(err)
	}
	// The clock starts now, as the store's (which dates holds and polls due) runs.
	vg := &videoGateway{now: time.Now().Truncate(time.Second)}
	models := []*Model{{Name: "vid", Routes: []Route{{ProviderName: "mockvid", Provider: up, UpstreamModel: "mock-video", Price: price}}}}
	vg.adminGateway = newAdminGateway(t, models, func(g *Gateway) {
		g.Now, g.LinkKey, g.BasePath = vg.clock, linkKey, "/v1"
		vg.engine = &jobs.Engine{Store: g.Store, Logger: zap.NewNop(), Owner: "test", Now: vg.clock, MinPoll: time.Millisecond, Env: func() jobs.Env {
			return jobs.Env{Route: func(j store.Job) (jobs.Route, bool) {
				return jobs.Route{Upstream: up, Price: price}, j.Provider == "mockvid" && j.UpstreamModel == "mock-video"
			}}
		}}
		g.Jobs = vg.engine
	})
	return vg
}

func (v *videoGateway) clock() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.now
}

func (v *videoGateway) advance(d time.Duration) {
	v.mu.Lock()
	v.now = v.now.Add(d)
	v.mu.Unlock()
}

// pollAll polls every video job due, as the worker's engine does.
func (v *videoGateway) pollAll() {
	v.t.Helper()
	items, err := v.s.Claim(context.Background(), store.ClaimParams{Queue: store.JobQueue(store.JobVideo), Owner: "test", Lease: time.Minute, Limit: 100})
	if err != nil {
		v.t.Fatal(err)
	}
	for _, it := range items {
		v.engine.PollClaimed(context.Background(), it)
	}
}

// completedVideo creates a 4-second video and polls it to its end.
func (v *videoGateway) completedVideo(std string) string {
	v.t.Helper()
	created := v.mustDo(200, http.MethodPost, "/videos", std, `{"model": "vid", "prompt": "p", "seconds": "4", "size": "1280x720"}`)
	id := created["id"].(string)
	time.Sleep(5 * time.Millisecond) // the mock renders for a millisecond of real time, and its poll is due
	v.pollAll()
	if got := v.mustDo(200, http.MethodGet, "/videos/"+id, std, ""); got["status"] != "completed" {
		v.t.Fatalf("not completed: %v", got)
	}
	return id
}

func (v *videoGateway) get(rawURL, key string, header map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, rawURL, nil)
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	for k, val := range header {
		r.Header.Set(k, val)
	}
	w := httptest.NewRecorder()
	v.g.ServeHTTP(w, r, strings.TrimPrefix(r.URL.Path, "/v1"))
	return w
}

// A link is honoured until its expiry, by the gateway's clock, and never after.
func TestVideoLinkExpiry(t *testing.T) {
	v := newVideoGateway(t, 1000, []byte("0123456789abcdef0123456789abcdef"))
	_, std, _ := v.workspace(10 * usdNanos)
	id := v.completedVideo(std)
	link := v.mustDo(200, http.MethodPost, "/videos/"+id+"/download_url", std, `{"ttl_seconds": 60, "variant": "video"}`)
	url := link["url"].(string)
	if link["expires_at"] != float64(v.clock().Unix()+60) || !strings.HasPrefix(url, "http://gw/v1/videos/"+id+"/content?") {
		t.Fatalf("link %v", link)
	}
	if w := v.get(url, "", nil); w.Code != 200 || w.Body.Len() != 4000 {
		t.Fatalf("a fresh link: %d, %d bytes", w.Code, w.Body.Len())
	}
	v.advance(59 * time.Second)
	if w := v.get(url, "", nil); w.Code != 200 {
		t.Fatalf("a link a second before its expiry: %d %s", w.Code, w.Body)
	}
	v.advance(time.Second)
	w := v.get(url, "", nil)
	if w.Code != 403 || !strings.Contains(w.Body.String(), `"link_expired"`) {
		t.Fatalf("an expired link: %d %s", w.Code, w.Body)
	}
	// A key still reads it.
	if w := v.get("http://gw/v1/videos/"+id+"/content", std, nil); w.Code != 200 {
		t.Fatalf("with a key: %d", w.Code)
	}
	for _, ttl := range []string{"59", "3601", `"60"`, "60.5"} {
		status, body := v.do(http.MethodPost, "/videos/"+id+"/download_url", std, `{"ttl_seconds": `+ttl+`}`)
		wantError(t, "ttl "+ttl, status, body, 400, CodeValidation, "ttl_seconds")
	}
}

// Without a link key no link is made, and none is honoured.
func TestVideoLinksOff(t *testing.T) {
	v := newVideoGateway(t, 1000, nil)
	_, std, _ := v.workspace(10 * usdNanos)
	id := v.completedVideo(std)
	status, body := v.do(http.MethodPost, "/videos/"+id+"/download_url", std, "")
	wantError(t, "download_url", status, body, 503, CodeNotConfigured, "")
	if msg := body["message"].(string); !strings.Contains(msg, "secret_key") {
		t.Fatalf("message %q does not say what to set", msg)
	}
	if w := v.get("http://gw/v1/videos/"+id+"/content?ws=x&expires=9999999999&sig=abc", "", nil); w.Code != 503 {
		t.Fatalf("a link without a key to check it: %d %s", w.Code, w.Body)
	}
}

// hashingWriter is a ResponseWriter that keeps nothing of the body but its hash and size.
type hashingWriter struct {
	header http.Header
	status int
	n      int64
	sum    hash.Hash
}

func (w *hashingWriter) Header() http.Header { return w.header }
func (w *hashingWriter) WriteHeader(s int)   { w.status = s }
func (w *hashingWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	w.sum.Write(p)
	return len(p), nil
}

// A 200 MB video streams through a few buffers: the gateway never holds it.
func TestVideoContentStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 200 MB")
	}
	const perSecond = 50 << 20 // 4 s: 200 MiB
	v := newVideoGateway(t, perSecond, nil)
	ws, std, _ := v.workspace(10 * usdNanos)
	id := v.completedVideo(std)
	j, err := v.s.GetJob(context.Background(), ws, id)
	if err != nil {
		t.Fatal(err)
	}
	ref, total, _ := mock.New(mock.Config{VideoBytesPerSecond: perSecond}).VideoBytes(j.NativeID)
	want := sha256.New()
	_, _ = io.Copy(want, ref)

	r := httptest.NewRequest(http.MethodGet, "http://gw/v1/videos/"+id+"/content", nil)
	r.Header.Set("Authorization", "Bearer "+std)
	w := &hashingWriter{header: http.Header{}, sum: sha256.New()}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v.g.ServeHTTP(w, r, "/videos/"+id+"/content")
	runtime.ReadMemStats(&after)
	if w.status != 200 || w.n != total || total != 4*perSecond || string(w.sum.Sum(nil)) != string(want.Sum(nil)) || w.header.Get("Content-Length") != "209715200" {
		t.Fatalf("streamed %d of %d bytes, status %d, headers %v", w.n, total, w.status, w.header)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Fatalf("streaming 200 MiB allocated %d bytes: the video was held", grew)
	}
}

func TestVideoWorst(t *testing.T) {
	p, err := pricing.Price{}.WithVideoSeconds(pricing.VideoPrice{Resolution: "720p", Nanos: 100}, pricing.VideoPrice{Resolution: "1080p", Nanos: 300})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		seconds    int
		resolution string
		want       int64
	}{
		{4, "720p", 400}, {8, "1080p", 2400}, {4, "", 1200},
	} {
		if got, err := videoWorst(p, tc.seconds, tc.resolution); err != nil || got != tc.want {
			t.Errorf("%d s at %q: %d, %v; want %d", tc.seconds, tc.resolution, got, err, tc.want)
		}
	}
	if _, err := videoWorst(p, 4, "480p"); !errors.As(err, new(*pricing.UnpricedError)) {
		t.Fatalf("an unpriced resolution: %v", err)
	}
}

func TestVideoCreateChecks(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		fields                   map[string]string
		size, resolution, aspect string
		param                    string
	}{
		{"size makes the rest", map[string]string{"prompt": "p", "size": "1792x1024"}, "1792x1024", "1024p", "7:4", ""},
		{"resolution and aspect make a size", map[string]string{"prompt": "p", "resolution": "1080p", "aspect_ratio": "9:16"}, "1080x1920", "1080p", "9:16", ""},
		{"4k", map[string]string{"prompt": "p", "resolution": "4K", "aspect_ratio": "16:9"}, "3840x2160", "4k", "16:9", ""},
		{"resolution alone", map[string]string{"prompt": "p", "resolution": "720p"}, "", "720p", "", ""},
		{"both", map[string]string{"prompt": "p", "size": "1280x720", "aspect_ratio": "16:9"}, "", "", "", "size"},
		{"bad resolution", map[string]string{"prompt": "p", "resolution": "high"}, "", "", "", "resolution"},
		{"bad aspect", map[string]string{"prompt": "p", "aspect_ratio": "wide"}, "", "", "", "aspect_ratio"},
		{"zero seconds", map[string]string{"prompt": "p", "seconds": "0"}, "", "", "", "seconds"},
		{"bad seed", map[string]string{"prompt": "p", "seed": "1.5"}, "", "", "", "seed"},
		{"no prompt", map[string]string{}, "", "", "", "prompt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, apiErr := (&videoInput{fields: tc.fields}).check()
			if tc.param != "" {
				if apiErr == nil || apiErr.Param != tc.param {
					t.Fatalf("%+v, %v; want a refusal of %s", q, apiErr, tc.param)
				}
				return
			}
			if apiErr != nil || q.size != tc.size || q.resolution != tc.resolution || q.aspectRatio != tc.aspect || q.model != defaultVideoModel || q.seconds != 4 {
				t.Fatalf("%+v, %v", q, apiErr)
			}
		})
	}
}

func TestVideoJSONFields(t *testing.T) {
	in, apiErr := readVideoJSON([]byte(`{"prompt": "p", "seconds": 8, "seed": 3, "webhook": {"endpoint_id": "e1", "events": ["video.completed", "video.completed"]}, "metadata": {"k": "v"}, "input_reference": {"image_url": "data:image/png;base64,iVBORw0KGgo="}}`))
	if apiErr != nil {
		t.Fatal(apiErr)
	}
	q, apiErr := in.check()
	if apiErr != nil || q.seconds != 8 || *q.seed != 3 || !strings.Contains(string(q.webhook), `"endpoint_id": "e1"`) || q.metadata["k"] != "v" {
		t.Fatalf("%+v %v", q, apiErr)
	}
	ref, apiErr := readVideoReference(nil, in)
	if apiErr != nil || ref.MIMEType != "image/png" || len(ref.Data) != 8 {
		t.Fatalf("reference %+v %v", ref, apiErr)
	}
	for body, param := range map[string]string{
		`{"prompt": "p", "extra": 1}`: "extra",
		`{"prompt": 5}`:               "prompt",
		`{"prompt": "p", "input_reference": {"file_id": "f"}}`: "input_reference",
		`{"prompt": "p", "metadata": {"k": 1}}`:                "metadata",
	} {
		if _, apiErr := readVideoJSON([]byte(body)); apiErr == nil || apiErr.Param != param {
			t.Errorf("%s: %v; want a refusal of %s", body, apiErr, param)
		}
	}
}

// A completed job is charged what the upstream says it made, else what was asked (as
// the upstream took it at the start, else as the request said).
func TestVideoReport(t *testing.T) {
	asked := videoJobResult{Seconds: 8, Size: "1280x720", Resolution: "720p"}
	rep := videoReport(&providers.VideoStatus{Status: providers.JobCompleted, Seconds: 4 * time.Second, Resolution: "1080p", State: []byte(`{"uri":"x"}`)}, asked)
	if rep.Usage.OutputVideo != 4*time.Second || rep.Usage.VideoResolution != "1080p" || !strings.Contains(string(rep.Result), `"state":`) {
		t.Fatalf("reported usage %+v, result %s", rep.Usage, rep.Result)
	}
	rep = videoReport(&providers.VideoStatus{Status: providers.JobCompleted}, asked)
	if rep.Usage.OutputVideo != 8*time.Second || rep.Usage.VideoResolution != "720p" {
		t.Fatalf("usage of what was asked %+v", rep.Usage)
	}
	rep = videoReport(&providers.VideoStatus{Status: providers.JobFailed}, asked)
	if rep.ErrorCode != "video_generation_failed" || rep.Usage != (pricing.Usage{}) || rep.Result != nil {
		t.Fatalf("failed %+v", rep)
	}
	rep = videoReport(&providers.VideoStatus{Status: providers.JobQueued, Progress: 140, PollAfter: 2 * time.Second, Seconds: 6 * time.Second, Size: "720x1280"}, asked)
	if rep.Progress != 100 || string(rep.Result) != `{"seconds":6,"size":"720x1280","resolution":"720p","poll_after_ms":2000}` {
		t.Fatalf("started %+v %s", rep, rep.Result)
	}
	// What the start said is what a later poll bills by when the upstream says nothing more.
	j := store.Job{Request: []byte(`{"prompt":"p","seconds":4,"resolution":"1080p"}`), Result: rep.Result}
	done := videoReport(&providers.VideoStatus{Status: providers.JobCompleted}, askedOf(j))
	if done.Usage.OutputVideo != 6*time.Second || done.Usage.VideoResolution != "720p" {
		t.Fatalf("usage after a start that said 6 s at 720x1280: %+v", done.Usage)
	}
	if got := askedOf(store.Job{Request: j.Request}); got.Seconds != 4 || got.Resolution != "1080p" {
		t.Fatalf("asked without a start's word: %+v", got)
	}
}

// An adapter's refusal of content it does not make (CategoryNotFound, no call made) is a
// 404 like the upstream's own; other failures are not.
func TestUpstreamNotFound(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&providers.UpstreamError{Category: providers.CategoryNotFound}, true},
		{&providers.UpstreamError{Status: 404, Category: providers.CategoryModelUnavailable}, true},
		{&providers.UpstreamError{Status: 503, Category: providers.CategoryServerError}, false},
		{errors.New("dial tcp: refused"), false},
		{nil, false},
	} {
		if _, got := upstreamNotFound(tc.err); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.err, got, tc.want)
		}
	}
}

// Without a jobs engine (no store to keep jobs in) a create is 503, saying why.
func TestVideosWithoutJobs(t *testing.T) {
	a := newAdminGateway(t, nil, nil)
	_, std, _ := a.workspace(10 * usdNanos)
	status, body := a.do(http.MethodPost, "/videos", std, `{"model": "vid", "prompt": "p"}`)
	wantError(t, "create", status, body, 503, CodeNotConfigured, "")
}

// instantVideo is the mock, but its jobs are complete when they start.
type instantVideo struct{ *mock.Provider }

func (p instantVideo) StartVideo(ctx context.Context, req *providers.VideoRequest) (*providers.VideoStatus, error) {
	st, err := p.Provider.StartVideo(ctx, req)
	if err != nil {
		return nil, err
	}
	time.Sleep(2 * time.Millisecond) // past the mock's render
	return p.Provider.PollVideo(ctx, req.Model, st.NativeID)
}

// A job that ended as it started is still ended by a poll: charged what it made, once.
func TestVideoCompleteAtStart(t *testing.T) {
	v := newVideoGatewayOn(t, instantVideo{mock.New(mock.Config{Name: "mockvid", VideoRender: time.Millisecond})}, nil)
	ws, std, _ := v.workspace(10 * usdNanos)
	created := v.mustDo(200, http.MethodPost, "/videos", std, `{"model": "vid", "prompt": "p", "seconds": "4", "size": "1280x720"}`)
	if created["status"] != "in_progress" || created["billing"].(map[string]any)["status"] != "held" {
		t.Fatalf("created %v", created)
	}
	time.Sleep(5 * time.Millisecond)
	v.pollAll()
	done := v.mustDo(200, http.MethodGet, "/videos/"+created["id"].(string), std, "")
	if done["status"] != "completed" || done["billing"].(map[string]any)["cost_nanos"] != float64(400_000_000) {
		t.Fatalf("ended %v", done)
	}
	if b, err := v.s.GetBalance(context.Background(), ws); err != nil || b.BalanceNanos != 10*usdNanos-400_000_000 || b.ReservedNanos != 0 {
		t.Fatalf("wallet %+v, %v", b, err)
	}
}

// A multipart create's nested fields read as the SDKs encode them: webhook[endpoint_id],
// webhook[events][] (repeated), metadata[key], input_reference[image_url].
func TestVideoFormFields(t *testing.T) {
	read := func(fields [][2]string) (*videoInput, *APIError) {
		var b strings.Builder
		mw := multipart.NewWriter(&b)
		for _, f := range fields {
			_ = mw.WriteField(f[0], f[1])
		}
		_ = mw.Close()
		form, err := upload.Parse(strings.NewReader(b.String()), mw.Boundary(), upload.Options{TempDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		defer form.Close()
		if err := form.Spool(); err != nil {
			t.Fatal(err)
		}
		return readVideoForm(form)
	}
	in, apiErr := read([][2]string{
		{"model", "vid"}, {"prompt", "p"}, {"seconds", "8"}, {"webhook[endpoint_id]", "e1"},
		{"webhook[events][]", "video.completed"}, {"webhook[events][]", "video.failed"}, {"metadata[scene]", "2"},
		{"input_reference[image_url]", "data:image/png;base64,iVBORw0KGgo="},
	})
	if apiErr != nil {
		t.Fatal(apiErr)
	}
	q, apiErr := in.check()
	if apiErr != nil || q.model != "vid" || q.seconds != 8 || string(q.webhook) != `{"endpoint_id":"e1","events":["video.completed","video.failed"]}` || q.metadata["scene"] != "2" || in.refURL == "" {
		t.Fatalf("%+v %v", q, apiErr)
	}
	for name, fields := range map[string][][2]string{
		"duration":        {{"prompt", "p"}, {"duration", "4"}},
		"input_reference": {{"prompt", "p"}, {"input_reference[file_id]", "file_1"}},
	} {
		if _, apiErr := read(fields); apiErr == nil || apiErr.Param != name {
			t.Errorf("%v: %v; want a refusal of %s", fields, apiErr, name)
		}
	}
}
