package gemini

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

const veoModel = "veo-3.1-generate-preview"

// veoVideo is the fake's video, distinct bytes at every offset so that a range shows.
var veoVideo = func() []byte {
	b := make([]byte, 48<<10)
	copy(b, "\x00\x00\x00\x18ftypmp42")
	for i := 12; i < len(b); i++ {
		b[i] = byte(i*13 + i/241)
	}
	return b
}()

// fakeVeo speaks the Gemini API's long-running operations as Veo uses them: a create answers
// an operation, polls answer it not done, then done with its outcome; the sample's URI
// redirects to a signed URL, which serves the video with ranges. Errors are Google's.
type fakeVeo struct {
	*fakeGemini
	mu sync.Mutex
	// pollsLeft is how many polls answer not done before the outcome.
	pollsLeft int
	// outcome is the response or error of the done operation, its URIs relative to the server.
	outcome string
	// rateLimited answers the next polls with a 429.
	rateLimited int
}

func newFakeVeo(t *testing.T, outcome string) (*fakeVeo, *Provider) {
	t.Helper()
	v := &fakeVeo{pollsLeft: 2, outcome: outcome}
	v.fakeGemini = newFake(t, v.serve)
	return v, v.provider(t)
}

const googleNotFound = `{"error":{"code":404,"message":"Operation not found: %s","status":"NOT_FOUND"}}`

func (v *fakeVeo) serve(w http.ResponseWriter, r *http.Request) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if strings.HasPrefix(r.URL.Path, "/signed/") {
		// The signed URL needs no key, and none may come.
		if r.Header.Get("X-Goog-Api-Key") != "" || r.URL.Query().Get("sig") != "abc" {
			writeJSON(w, 403, `{"error":{"code":403,"message":"signature","status":"PERMISSION_DENIED"}}`)
			return
		}
		w.Header().Set("Content-Type", "video/mp4")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(veoVideo))
		return
	}
	if r.Header.Get("X-Goog-Api-Key") != testKey {
		writeJSON(w, 400, `{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID"}]}}`)
		return
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1beta/models/"+veoModel+":predictLongRunning":
		writeJSON(w, 200, `{"name":"models/`+veoModel+`/operations/op1"}`)
	case r.Method == http.MethodGet && r.URL.Path == "/v1beta/models/"+veoModel+"/operations/op1":
		if v.rateLimited > 0 {
			v.rateLimited--
			writeJSON(w, 429, `{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED",`+
				`"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"7s"}]}}`)
			return
		}
		if v.pollsLeft > 0 {
			v.pollsLeft--
			writeJSON(w, 200, `{"name":"models/`+veoModel+`/operations/op1","metadata":{"@type":"type.googleapis.com/google.ai.generativelanguage.v1beta.PredictLongRunningMetadata"}}`)
			return
		}
		writeJSON(w, 200, `{"name":"models/`+veoModel+`/operations/op1","done":true,`+strings.ReplaceAll(v.outcome, "{base}", v.srv.URL)+`}`)
	case r.Method == http.MethodGet && r.URL.Path == "/v1beta/files/vid1:download":
		w.Header().Set("Location", "/signed/vid1?sig=abc")
		w.WriteHeader(http.StatusFound)
	case r.Method == http.MethodGet && r.URL.Path == "/v1beta/files/vid2:download":
		w.Header().Set("Content-Type", "video/mp4")
		_, _ = w.Write(veoVideo[:100])
	case r.Method == http.MethodGet && r.URL.Path == "/v1beta/files/away:download":
		w.Header().Set("Location", "https://collector.example.net/steal")
		w.WriteHeader(http.StatusFound)
	default:
		writeJSON(w, 404, fmt.Sprintf(googleNotFound, r.URL.Path))
	}
}

const veoDone = `"response":{"@type":"type.googleapis.com/google.ai.generativelanguage.v1beta.PredictLongRunningResponse",` +
	`"generateVideoResponse":{"generatedSamples":[{"video":{"uri":"{base}/v1beta/files/vid1:download?alt=media"}},` +
	`{"video":{"uri":"{base}/v1beta/files/vid2:download?alt=media"}}]}}`

func TestVeoVideoLifecycle(t *testing.T) {
	checkGoroutines(t)
	v, p := newFakeVeo(t, veoDone)
	ctx := context.Background()
	seed := int64(42)
	first := append([]byte(nil), pngBytes...)
	first = append(first, bytes.Repeat([]byte{1, 2, 3, 4, 5}, 3001)...)
	st, err := p.StartVideo(ctx, &providers.VideoRequest{
		Model: veoModel, Prompt: "a lighthouse \"at\" dawn", Size: "1080x1920", Seconds: 8,
		NegativePrompt: "fog", Seed: &seed, InputReference: &providers.ImageInput{Data: first},
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.NativeID != "models/"+veoModel+"/operations/op1" || st.Status != providers.JobQueued || st.Seconds != 8*time.Second ||
		st.Size != "1080x1920" || st.Resolution != "1080p" || string(st.State) != `{"seconds":8,"size":"1080x1920","resolution":"1080p"}` {
		t.Fatalf("started %+v (state %s)", st, st.State)
	}
	create := v.requests()[0]
	var body struct {
		Instances []struct {
			Prompt string `json:"prompt"`
			Image  struct {
				InlineData struct {
					MimeType string `json:"mimeType"`
					Data     string `json:"data"`
				} `json:"inlineData"`
			} `json:"image"`
		} `json:"instances"`
		Parameters map[string]any `json:"parameters"`
	}
	if err := json.Unmarshal(create.Body, &body); err != nil {
		t.Fatalf("create body is not JSON: %v\n%s", err, create.Body)
	}
	img := body.Instances[0].Image.InlineData
	if len(body.Instances) != 1 || body.Instances[0].Prompt != "a lighthouse \"at\" dawn" ||
		img.MimeType != "image/png" || img.Data != base64.StdEncoding.EncodeToString(first) {
		t.Errorf("instance %+v", body.Instances)
	}
	if fmt.Sprint(body.Parameters) != "map[aspectRatio:9:16 durationSeconds:8 negativePrompt:fog resolution:1080p seed:42]" {
		t.Errorf("parameters %v", body.Parameters)
	}

	var got []string
	for range 3 {
		st, err = p.PollVideo(ctx, veoModel, st.NativeID)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s/%d", st.Status, st.Progress))
	}
	if strings.Join(got, " ") != "in_progress/0 in_progress/0 completed/100" {
		t.Errorf("polls %v", got)
	}
	if st.Samples != 2 || strings.Join(st.Variants, ",") != "video" || st.Seconds != 0 || st.ErrorCode != "" {
		t.Errorf("completed %+v", st)
	}

	// The first sample: the key goes to the API, which redirects to a signed URL, fetched
	// without it, with the Range.
	c, err := p.VideoContent(ctx, &providers.VideoContentRequest{Model: veoModel, NativeID: st.NativeID, State: st.State, RangeHeader: "bytes=100-4195"})
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(c.Body)
	_ = c.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != 206 || c.ContentRange != fmt.Sprintf("bytes 100-4195/%d", len(veoVideo)) || c.Length != 4096 ||
		c.ContentType != "video/mp4" || !bytes.Equal(data, veoVideo[100:4196]) {
		t.Errorf("range: %d %q %d %q, %d bytes", c.Status, c.ContentRange, c.Length, c.ContentType, len(data))
	}
	// The second, whole.
	c, err = p.VideoContent(ctx, &providers.VideoContentRequest{Model: veoModel, NativeID: st.NativeID, State: st.State, Index: 1})
	if err != nil {
		t.Fatal(err)
	}
	data, _ = io.ReadAll(c.Body)
	_ = c.Body.Close()
	if c.Status != 200 || !bytes.Equal(data, veoVideo[:100]) {
		t.Errorf("second sample: %d, %d bytes", c.Status, len(data))
	}

	reqs := v.requests()
	var trail []string
	for _, r := range reqs {
		trail = append(trail, r.Method+" "+r.Path+"?"+r.RawQuery+" key="+fmt.Sprint(r.Header.Get("X-Goog-Api-Key") != "")+" range="+r.Header.Get("Range"))
	}
	want := []string{
		"POST /v1beta/models/" + veoModel + ":predictLongRunning? key=true range=",
		"GET /v1beta/models/" + veoModel + "/operations/op1? key=true range=",
		"GET /v1beta/models/" + veoModel + "/operations/op1? key=true range=",
		"GET /v1beta/models/" + veoModel + "/operations/op1? key=true range=",
		"GET /v1beta/files/vid1:download?alt=media key=true range=bytes=100-4195",
		"GET /signed/vid1?sig=abc key=false range=bytes=100-4195",
		"GET /v1beta/files/vid2:download?alt=media key=true range=",
	}
	if strings.Join(trail, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(trail, "\n"), strings.Join(want, "\n"))
	}
	if reqs[0].Header.Get("Content-Type") != "application/json" || reqs[1].Header.Get("Content-Type") != "" {
		t.Errorf("content types: create %q, poll %q", reqs[0].Header.Get("Content-Type"), reqs[1].Header.Get("Content-Type"))
	}
}

func TestVeoVideoOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name, outcome, code, message string
	}{
		{"filtered", `"response":{"generateVideoResponse":{"raiMediaFilteredCount":1,"raiMediaFilteredReasons":["The prompt could not be submitted. It may violate our policies."]}}`,
			"content_filtered", "Veo filtered the video: The prompt could not be submitted. It may violate our policies."},
		{"error", `"error":{"code":3,"message":"The input image is not supported."}`, "invalid_argument", "The input image is not supported."},
		{"error with status", `"error":{"code":13,"message":"Internal error, retry.","status":"INTERNAL"}`, "internal", "Internal error, retry."},
		{"nothing", `"response":{"generateVideoResponse":{}}`, "no_video", "Veo finished without a video"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, p := newFakeVeo(t, tc.outcome)
			ctx := context.Background()
			st, err := p.StartVideo(ctx, &providers.VideoRequest{Model: veoModel, Prompt: "x"})
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if st, err = p.PollVideo(ctx, veoModel, st.NativeID); err != nil {
					t.Fatal(err)
				}
			}
			if st.Status != providers.JobFailed || st.ErrorCode != tc.code || st.ErrorMessage != tc.message || st.State != nil {
				t.Errorf("got %+v", st)
			}
		})
	}
}

func TestVeoVideoErrors(t *testing.T) {
	v, p := newFakeVeo(t, veoDone)
	ctx := context.Background()
	st, err := p.StartVideo(ctx, &providers.VideoRequest{Model: veoModel, Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	v.mu.Lock()
	v.rateLimited = 1
	v.mu.Unlock()
	_, err = p.PollVideo(ctx, veoModel, st.NativeID)
	if ue := asUpstream(t, err); ue.Category != providers.CategoryRateLimited || !ue.Retryable || ue.RetryAfter != 7*time.Second {
		t.Errorf("429: %+v", ue)
	}
	if st, err = p.PollVideo(ctx, veoModel, st.NativeID); err != nil || st.Status != providers.JobInProgress {
		t.Fatalf("poll after the 429: %+v %v", st, err)
	}

	_, err = p.PollVideo(ctx, veoModel, "models/"+veoModel+"/operations/unknown")
	if ue := asUpstream(t, err); ue.Status != 404 || ue.Category != providers.CategoryNotFound || ue.Retryable || ue.Code != "NOT_FOUND" {
		t.Errorf("unknown operation: %+v", ue)
	}

	before := len(v.requests())
	for _, id := range []string{"models/x/operations/../../files/y", "models/x/operations/a?alt=media", "files/abc", ""} {
		_, err := p.PollVideo(ctx, veoModel, id)
		if ue := asUpstream(t, err); ue.Category != providers.CategoryNotFound {
			t.Errorf("operation %q: %+v", id, ue)
		}
	}
	if len(v.requests()) != before {
		t.Errorf("a malformed operation name reached the upstream")
	}

	_, err = p.StartVideo(ctx, &providers.VideoRequest{Model: "veo-9-unknown", Prompt: "x"})
	if ue := asUpstream(t, err); ue.Status != 404 || ue.Category != providers.CategoryModelUnavailable {
		t.Errorf("unknown model at create: %+v", ue)
	}

	wrongKey := v.provider(t, func(c *Config) { c.APIKey = "AIzaSyWRONG-key-00000000000000" })
	_, err = wrongKey.PollVideo(ctx, veoModel, "models/"+veoModel+"/operations/op1")
	if ue := asUpstream(t, err); ue.Category != providers.CategoryCredentialsInvalid {
		t.Errorf("wrong key: %+v", ue)
	}
	noKeyIn(t, err)
}

func TestVeoVideoContentRefusals(t *testing.T) {
	v, p := newFakeVeo(t, veoDone)
	ctx := context.Background()
	state := func(uris ...string) []byte {
		var s veoState
		for _, u := range uris {
			s.Samples = append(s.Samples, veoSample{URI: strings.ReplaceAll(u, "{base}", v.srv.URL)})
		}
		b, _ := json.Marshal(s)
		return b
	}
	for _, tc := range []struct {
		name     string
		req      providers.VideoContentRequest
		category providers.Category
	}{
		{"thumbnail", providers.VideoContentRequest{Variant: "thumbnail", State: state("{base}/v1beta/files/vid2:download")}, providers.CategoryNotFound},
		{"index past the samples", providers.VideoContentRequest{Index: 1, State: state("{base}/v1beta/files/vid2:download")}, providers.CategoryNotFound},
		{"no state", providers.VideoContentRequest{}, providers.CategoryNotFound},
		{"another host", providers.VideoContentRequest{State: state("https://collector.example.net/files/vid2")}, providers.CategoryServerError},
		{"googleapis over http", providers.VideoContentRequest{State: state("http://generativelanguage.googleapis.com/v1beta/files/x")}, providers.CategoryServerError},
		{"a look-alike host", providers.VideoContentRequest{State: state("https://generativelanguage.googleapis.com.example.net/x")}, providers.CategoryServerError},
		{"credentials in the URL", providers.VideoContentRequest{State: state("https://user:pw@generativelanguage.googleapis.com/x")}, providers.CategoryServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(v.requests())
			_, err := p.VideoContent(ctx, &tc.req)
			if ue := asUpstream(t, err); ue.Category != tc.category {
				t.Errorf("got %+v", ue)
			}
			if len(v.requests()) != before {
				t.Errorf("the refusal called the upstream")
			}
		})
	}

	// A redirect to a host the gateway does not follow is refused, and not followed.
	_, err := p.VideoContent(ctx, &providers.VideoContentRequest{State: state("{base}/v1beta/files/away:download")})
	ue := asUpstream(t, err)
	if ue.Category != providers.CategoryServerError || !errors.Is(err, errVideoHost) || !strings.Contains(ue.Message, "collector.example.net") {
		t.Errorf("redirect away: %+v", ue)
	}
	// A sample the upstream no longer has is not found.
	_, err = p.VideoContent(ctx, &providers.VideoContentRequest{State: state("{base}/v1beta/files/gone:download")})
	if ue := asUpstream(t, err); ue.Category != providers.CategoryNotFound {
		t.Errorf("gone: %+v", ue)
	}
}

func TestVeoKeyHosts(t *testing.T) {
	base := mustURL(t, "https://generativelanguage.googleapis.com/v1beta")
	proxy := mustURL(t, "http://127.0.0.1:8080/gemini/v1beta")
	for _, tc := range []struct {
		base        string
		u           string
		key, follow bool
	}{
		{"google", "https://generativelanguage.googleapis.com/v1beta/files/a:download?alt=media", true, true},
		{"google", "https://storage.googleapis.com/bucket/a", true, true},
		{"google", "https://googleapis.com/a", true, true},
		{"google", "https://video-downloads.googleusercontent.com/a", false, true},
		{"google", "https://generativelanguage.googleapis.com:8443/a", false, false},
		{"google", "https://evilgoogleapis.com/a", false, false},
		{"google", "https://googleapis.com.evil.net/a", false, false},
		{"google", "http://127.0.0.1:8080/gemini/a", false, false},
		{"proxy", "http://127.0.0.1:8080/elsewhere", true, true},
		{"proxy", "http://127.0.0.1:9090/a", false, false},
		{"proxy", "https://generativelanguage.googleapis.com/a", true, true},
	} {
		b := base
		if tc.base == "proxy" {
			b = proxy
		}
		u := mustURL(t, tc.u)
		if got := keyHost(b, u); got != tc.key {
			t.Errorf("%s: keyHost(%s) = %v", tc.base, tc.u, got)
		}
		if got := redirectHost(b, u); got != tc.follow {
			t.Errorf("%s: redirectHost(%s) = %v", tc.base, tc.u, got)
		}
	}
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestVeoRules(t *testing.T) {
	v, p := newFakeVeo(t, veoDone)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		req   providers.VideoRequest
		param string
		// params is what is sent when the request is accepted.
		params string
	}{
		{name: "defaults", req: providers.VideoRequest{}, params: `{"durationSeconds":8,"aspectRatio":"16:9","resolution":"720p"}`},
		{name: "720p 4s portrait", req: providers.VideoRequest{Seconds: 4, Resolution: "720p", AspectRatio: "9:16"}, params: `{"durationSeconds":4,"aspectRatio":"9:16","resolution":"720p"}`},
		{name: "size", req: providers.VideoRequest{Seconds: 6, Size: "1280x720"}, params: `{"durationSeconds":6,"aspectRatio":"16:9","resolution":"720p"}`},
		{name: "2160p is 4k", req: providers.VideoRequest{Resolution: "2160P"}, params: `{"durationSeconds":8,"aspectRatio":"16:9","resolution":"4k"}`},
		{name: "seconds 5", req: providers.VideoRequest{Seconds: 5}, param: "seconds"},
		{name: "seconds 12", req: providers.VideoRequest{Seconds: 12}, param: "seconds"},
		{name: "1080p at 6s", req: providers.VideoRequest{Seconds: 6, Size: "1920x1080"}, param: "seconds"},
		{name: "4k at 4s", req: providers.VideoRequest{Seconds: 4, Resolution: "4k"}, param: "seconds"},
		{name: "square", req: providers.VideoRequest{AspectRatio: "1:1"}, param: "aspect_ratio"},
		{name: "sora size", req: providers.VideoRequest{Size: "1792x1024"}, param: "size"},
		{name: "480p", req: providers.VideoRequest{Resolution: "480p"}, param: "resolution"},
		{name: "lite 4k", req: providers.VideoRequest{Model: "veo-3.1-lite-generate-preview", Resolution: "4k"}, param: "resolution"},
		{name: "veo 2 1080p", req: providers.VideoRequest{Model: "veo-2.0-generate-001", Size: "1920x1080"}, param: "resolution"},
		{name: "veo 2 4s", req: providers.VideoRequest{Model: "veo-2.0-generate-001", Seconds: 4}, param: "seconds"},
		{name: "not an image", req: providers.VideoRequest{InputReference: &providers.ImageInput{Data: []byte("%PDF-1.7\n")}}, param: "input_reference"},
		{name: "empty image", req: providers.VideoRequest{InputReference: &providers.ImageInput{MIMEType: "image/png"}}, param: "input_reference"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(v.requests())
			if tc.req.Model == "" {
				tc.req.Model = veoModel
			}
			tc.req.Prompt = "x"
			_, err := p.StartVideo(ctx, &tc.req)
			if tc.param != "" {
				ue := asUpstream(t, err)
				if ue.Category != providers.CategoryInvalidRequest || ue.Param != tc.param || !ue.Unsupported || !errors.Is(err, ErrUnsupportedRequest) {
					t.Errorf("refusal %+v", ue)
				}
				if len(v.requests()) != before {
					t.Error("a refused request reached the upstream")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var body struct {
				Parameters json.RawMessage `json:"parameters"`
			}
			_ = json.Unmarshal(v.requests()[before].Body, &body)
			if string(body.Parameters) != tc.params {
				t.Errorf("parameters %s, want %s", body.Parameters, tc.params)
			}
		})
	}
}

// Veo 2 takes no resolution: none is sent, and 720p is reported.
func TestVeo2SendsNoResolution(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, `{"name":"models/veo-2.0-generate-001/operations/x9"}`)
	})
	st, err := f.provider(t).StartVideo(context.Background(), &providers.VideoRequest{Model: "veo-2.0-generate-001", Prompt: "x", Seconds: 5})
	if err != nil {
		t.Fatal(err)
	}
	if body := string(f.requests()[0].Body); body != `{"instances":[{"prompt":"x"}],"parameters":{"durationSeconds":5,"aspectRatio":"16:9"}}` {
		t.Errorf("body %s", body)
	}
	if st.Resolution != "720p" || st.Size != "1280x720" || st.Seconds != 5*time.Second {
		t.Errorf("status %+v", st)
	}
}

func TestBase64Reader(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 3, 4, 3071, 3072, 3073, 10_000} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(rng.Uint32())
		}
		want := base64.StdEncoding.EncodeToString(src)
		got, err := io.ReadAll(iotest.OneByteReader(&base64Reader{src: src}))
		if err != nil || string(got) != want {
			t.Errorf("%d bytes one at a time: %v, %d chars, want %d", n, err, len(got), len(want))
		}
		if err := iotest.TestReader(&base64Reader{src: src}, []byte(want)); err != nil {
			t.Errorf("%d bytes: %v", n, err)
		}
	}
}
