package module

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/modelgateway/caddy-modelgateway/jobs"
)

// The upstreams' credentials in these tests: neither may reach a client.
const (
	soraKey = "sk-sora-upstream-secret"
	veoKey  = "AIza-veo-upstream-secret"
)

// upstreamVideo is a fake upstream's video: distinct bytes at every offset, so that a
// range's slice shows, and an MP4 header.
func upstreamVideo(n int, salt byte) []byte {
	b := make([]byte, n)
	copy(b, "\x00\x00\x00\x18ftypmp42")
	for i := 12; i < n; i++ {
		b[i] = byte(i*31+i/251) ^ salt
	}
	return b
}

// fakeSora speaks OpenAI's /videos wire: a multipart create answered queued, polls
// answered in progress (with openai-poll-after-ms) until the job completes, the content's
// variants with ranges, and the deletion.
type fakeSora struct {
	*httptest.Server
	video, thumbnail []byte

	mu sync.Mutex
	// create is the multipart create's text fields; reference its input_reference part.
	create        map[string]string
	reference     []byte
	referenceType string
	// pollsLeft is how many polls answer in_progress before completed.
	pollsLeft                 int
	polls, completedPolls     int
	deletes, contentCalls     int
	contentAccept, badAuthors []string
}

const soraJobID = "video_upstream_1"

func newFakeSora(t *testing.T) *fakeSora {
	f := &fakeSora{video: upstreamVideo(300<<10, 0), thumbnail: tinyPNG(t), pollsLeft: 2}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeSora) object(status string, progress int) string {
	return fmt.Sprintf(`{"id":%q,"object":"video","model":"sora-2","status":%q,"progress":%d,"created_at":1767225600,`+
		`"completed_at":null,"expires_at":null,"prompt":"a fox","seconds":"8","size":"1280x720","error":null,"remixed_from_video_id":null}`,
		soraJobID, status, progress)
}

func (f *fakeSora) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+soraKey {
		f.badAuthors = append(f.badAuthors, r.Method+" "+r.URL.Path)
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	switch path := r.URL.Path; {
	case r.Method == http.MethodPost && path == "/v1/videos":
		if err := r.ParseMultipartForm(1 << 20); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = fmt.Fprintf(w, `{"error":{"message":%q,"type":"invalid_request_error","param":null,"code":null}}`, err.Error())
			return
		}
		f.create = map[string]string{}
		for k, v := range r.MultipartForm.Value {
			f.create[k] = strings.Join(v, ",")
		}
		if fh := r.MultipartForm.File["input_reference"]; len(fh) == 1 {
			rd, _ := fh[0].Open()
			f.reference, _ = io.ReadAll(rd)
			_ = rd.Close()
			f.referenceType = fh[0].Header.Get("Content-Type")
		}
		w.Header().Set("openai-poll-after-ms", "200")
		_, _ = io.WriteString(w, f.object("queued", 0))
	case r.Method == http.MethodGet && path == "/v1/videos/"+soraJobID:
		f.polls++
		if f.pollsLeft > 0 {
			f.pollsLeft--
			w.Header().Set("openai-poll-after-ms", "300")
			_, _ = io.WriteString(w, f.object("in_progress", 40))
			return
		}
		f.completedPolls++
		_, _ = io.WriteString(w, f.object("completed", 100))
	case r.Method == http.MethodGet && path == "/v1/videos/"+soraJobID+"/content":
		f.contentCalls++
		f.contentAccept = append(f.contentAccept, r.Header.Get("Accept"))
		content, ct := f.video, "video/mp4"
		switch r.URL.Query().Get("variant") {
		case "video":
		case "thumbnail":
			content, ct = f.thumbnail, "image/png"
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":{"message":"No such variant","type":"invalid_request_error","param":"variant","code":null}}`)
			return
		}
		w.Header().Set("Content-Type", ct)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(content))
	case r.Method == http.MethodDelete && path == "/v1/videos/"+soraJobID:
		f.deletes++
		_, _ = fmt.Fprintf(w, `{"id":%q,"object":"video.deleted","deleted":true}`, soraJobID)
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = fmt.Fprintf(w, `{"error":{"message":"Invalid URL (%s %s)","type":"invalid_request_error","param":null,"code":null}}`, r.Method, path)
	}
}

// fakeVeo speaks the Gemini API's long-running operations as Veo uses them: a create
// answers an operation, whose first poll is not done and the next done with the outcome the
// prompt names; the sample's URI, on this server, serves the video with ranges to the API key
// only (403 without it, as Google does).
type fakeVeo struct {
	*httptest.Server
	video []byte

	mu          sync.Mutex
	creates     []veoCreate
	createQuery []string
	polled      map[string]int
	downloads   int
	keyless     int
	otherMethod []string
}

// veoCreate is a predictLongRunning body, as the fake reads it.
type veoCreate struct {
	Instances []struct {
		Prompt string `json:"prompt"`
		Image  *struct {
			InlineData struct {
				MimeType string `json:"mimeType"`
				Data     string `json:"data"`
			} `json:"inlineData"`
		} `json:"image"`
	} `json:"instances"`
	Parameters map[string]any `json:"parameters"`
}

const veoUpstreamModel = "veo-3.1-generate-preview"

func newFakeVeo(t *testing.T) *fakeVeo {
	f := &fakeVeo{video: upstreamVideo(200<<10, 0x5a), polled: map[string]int{}}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func googleError(w http.ResponseWriter, code int, status, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = fmt.Fprintf(w, `{"error":{"code":%d,"message":%q,"status":%q}}`, code, msg, status)
}

func (f *fakeVeo) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("X-Goog-Api-Key") != veoKey {
		f.keyless++
		googleError(w, http.StatusForbidden, "PERMISSION_DENIED", "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.")
		return
	}
	const models = "/v1beta/models/" + veoUpstreamModel
	switch path := r.URL.Path; {
	case r.Method == http.MethodPost && path == models+":predictLongRunning":
		var c veoCreate
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil || len(c.Instances) != 1 {
			googleError(w, http.StatusBadRequest, "INVALID_ARGUMENT", fmt.Sprintf("Invalid JSON payload received: %v", err))
			return
		}
		f.creates = append(f.creates, c)
		f.createQuery = append(f.createQuery, r.URL.RawQuery)
		// The prompt names the outcome, so that one server plays every case.
		op := "op-ok"
		for _, outcome := range []string{"error", "filtered"} {
			if strings.Contains(c.Instances[0].Prompt, "["+outcome+"]") {
				op = "op-" + outcome
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"name":"models/%s/operations/%s"}`, veoUpstreamModel, op)
	case r.Method == http.MethodGet && strings.HasPrefix(path, models+"/operations/"):
		op := strings.TrimPrefix(path, models+"/operations/")
		name := fmt.Sprintf(`"name":"models/%s/operations/%s"`, veoUpstreamModel, op)
		f.polled[op]++
		w.Header().Set("Content-Type", "application/json")
		if f.polled[op] == 1 {
			_, _ = io.WriteString(w, `{`+name+`,"metadata":{"@type":"type.googleapis.com/google.ai.generativelanguage.v1beta.PredictLongRunningMetadata"}}`)
			return
		}
		switch op {
		case "op-ok":
			_, _ = io.WriteString(w, `{`+name+`,"done":true,"response":{"@type":"type.googleapis.com/google.ai.generativelanguage.v1beta.PredictLongRunningResponse",`+
				`"generateVideoResponse":{"generatedSamples":[{"video":{"uri":"`+f.URL+`/v1beta/files/sample1:download?alt=media"}}]}}}`)
		case "op-error":
			_, _ = io.WriteString(w, `{`+name+`,"done":true,"error":{"code":13,"message":"Video generation failed due to an internal error.","status":"INTERNAL"}}`)
		case "op-filtered":
			_, _ = io.WriteString(w, `{`+name+`,"done":true,"response":{"@type":"type.googleapis.com/google.ai.generativelanguage.v1beta.PredictLongRunningResponse",`+
				`"generateVideoResponse":{"raiMediaFilteredCount":1,"raiMediaFilteredReasons":["The prompt could not be submitted."]}}}`)
		default:
			googleError(w, http.StatusNotFound, "NOT_FOUND", "Operation not found: "+op)
		}
	case r.Method == http.MethodGet && path == "/v1beta/files/sample1:download":
		f.downloads++
		w.Header().Set("Content-Type", "video/mp4")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.video))
	default:
		f.otherMethod = append(f.otherMethod, r.Method+" "+path)
		googleError(w, http.StatusNotFound, "NOT_FOUND", "Requested entity was not found.")
	}
}

// videoUpstreamsConfig is a gateway with a route to each fake: sora-e2e (OpenAI's wire,
// 0.10 USD a second at 720p), veo-e2e (Veo, 0.40 at 720p, 0.60 at 1080p), and sora-or-veo
// (Sora's route first, Veo's next).
func videoUpstreamsConfig(sora, veo string) string {
	return fmt.Sprintf(`
		provider sora {
			type openai
			base_url %[1]s/v1
			api_key %[2]s
			retries 0
			circuit_breaker off
		}
		provider veo {
			type gemini
			base_url %[3]s/v1beta
			api_key %[4]s
			retries 0
			circuit_breaker off
		}
		model sora-e2e {
			route sora sora-2 {
				output_video_seconds 0.10 resolution 720p
				output_video_seconds 0.30 resolution 1080p
			}
		}
		model sora-or-veo {
			route sora sora-2 {
				output_video_seconds 0.10 resolution 720p
			}
			route veo %[5]s {
				output_video_seconds 0.40 resolution 720p
			}
		}
		model veo-e2e {
			route veo %[5]s {
				output_video_seconds 0.40 resolution 720p
				output_video_seconds 0.60 resolution 1080p
			}
		}`, sora, soraKey, veo, veoKey, veoUpstreamModel)
}

// videoUpstreams is a gateway on videoUpstreamsConfig's fakes, with a workspace of credits
// and an SDK client on its standard key.
type videoUpstreams struct {
	env    *gatewayEnv
	sora   *fakeSora
	veo    *fakeVeo
	team   team
	client openai.Client
}

func startVideoUpstreams(t *testing.T, credits int64) *videoUpstreams {
	sora, veo := newFakeSora(t), newFakeVeo(t)
	env := startGateway(t, videoUpstreamsConfig(sora.URL, veo.URL), "")
	a := env.team(credits)
	return &videoUpstreams{env: env, sora: sora, veo: veo, team: a, client: env.openai(a.std)}
}

// createWithFirstFrame creates a video of model with a PNG as its input reference, and
// returns it with the PNG and the openai-poll-after-ms it was answered with.
func (u *videoUpstreams) createWithFirstFrame(t *testing.T, model, prompt string, seconds openai.VideoSeconds) (*openai.Video, []byte, string) {
	t.Helper()
	first := tinyPNG(t)
	var raw *http.Response
	v, err := u.client.Videos.New(context.Background(), openai.VideoNewParams{
		Model: openai.VideoModel(model), Prompt: prompt, Seconds: seconds, Size: "1280x720",
		InputReference: openai.VideoNewParamsInputReferenceUnion{OfFile: openai.File(bytes.NewReader(first), "first.png", "image/png")},
	}, option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	return v, first, raw.Header.Get("openai-poll-after-ms")
}

// expectContent checks that video id's content, downloaded with the SDK, is want, and that
// its bytes from to to (inclusive), asked by Range, are want's 206 slice.
func (u *videoUpstreams) expectContent(t *testing.T, id string, want []byte, from, to int) {
	t.Helper()
	resp, err := u.client.Videos.DownloadContent(context.Background(), id, openai.VideoDownloadContentParams{})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if sha256.Sum256(body) != sha256.Sum256(want) || resp.Header.Get("Content-Type") != "video/mp4" ||
		resp.Header.Get("Content-Length") != fmt.Sprint(len(want)) {
		t.Fatalf("content: %d bytes of %s, want the upstream's %d", len(body), resp.Header.Get("Content-Type"), len(want))
	}
	part, partBody := rawGet(t, u.env.baseURL+"/v1/videos/"+id+"/content", u.team.std, map[string]string{"Range": fmt.Sprintf("bytes=%d-%d", from, to)})
	if part.StatusCode != http.StatusPartialContent || part.Header.Get("Content-Range") != fmt.Sprintf("bytes %d-%d/%d", from, to, len(want)) ||
		part.Header.Get("Content-Length") != fmt.Sprint(to-from+1) || !bytes.Equal(partBody, want[from:to+1]) {
		t.Fatalf("range: %d %v, %d bytes", part.StatusCode, part.Header, len(partBody))
	}
	past := fmt.Sprintf("bytes=%d-", len(want)+10)
	if r, got := rawGet(t, u.env.baseURL+"/v1/videos/"+id+"/content", u.team.std, map[string]string{"Range": past}); r.StatusCode != 416 || errorCode(t, got) != "range_not_satisfiable" {
		t.Fatalf("a range past the end: %d %s", r.StatusCode, got)
	}
}

// TestVideosThroughOpenAIUpstream makes a video through the openai adapter, end to end: the
// SDK's multipart create reaches the upstream as OpenAI's multipart, the job is polled at
// the upstream's pace to completion and charged its seconds once; its content, a range of
// it and its thumbnail are the upstream's bytes; its deletion reaches the upstream.
func TestVideosThroughOpenAIUpstream(t *testing.T) {
	u := startVideoUpstreams(t, 10*usd)
	env, sora, a, client, ctx := u.env, u.sora, u.team, u.client, context.Background()
	v, first, pollAfter := u.createWithFirstFrame(t, "sora-e2e", "a fox in the snow", "8")
	if pollAfter != "200" {
		t.Fatalf("openai-poll-after-ms %q, want the upstream's 200", pollAfter)
	}
	sora.mu.Lock()
	create, ref, refType := sora.create, sora.reference, sora.referenceType
	sora.mu.Unlock()
	if len(create) != 4 || create["model"] != "sora-2" || create["prompt"] != "a fox in the snow" || create["seconds"] != "8" || create["size"] != "1280x720" {
		t.Fatalf("the upstream's create fields: %v", create)
	}
	if !bytes.Equal(ref, first) || refType != "image/png" {
		t.Fatalf("the upstream's input_reference: %d bytes of %q", len(ref), refType)
	}
	if v.Status != openai.VideoStatusQueued && v.Status != openai.VideoStatusInProgress || v.Seconds != "8" || v.Size != "1280x720" {
		t.Fatalf("created %s", v.RawJSON())
	}
	if bal := env.balance(a.ws); bal.BalanceNanos != 10*usd || bal.ReservedNanos != 800_000_000 {
		t.Fatalf("wallet while the job runs: %+v, want 8 s x 0.10 USD held", bal)
	}

	done, err := client.Videos.PollStatus(ctx, v.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != openai.VideoStatusCompleted || done.Progress != 100 || done.Seconds != "8" || done.Size != "1280x720" {
		t.Fatalf("completed %s", done.RawJSON())
	}
	sora.mu.Lock()
	polls := sora.polls
	sora.mu.Unlock()
	if polls != 3 {
		t.Fatalf("the upstream was polled %d times, want 2 in progress then 1 completed", polls)
	}
	const cost = 8 * 100_000_000
	if bal := env.balance(a.ws); bal.BalanceNanos != 10*usd-cost || bal.ReservedNanos != 0 {
		t.Fatalf("wallet after completion: %+v, want 10 USD - 8 s x 0.10 USD, nothing held", bal)
	}
	if gen := env.generation(a.ws, jobs.GenerationID(v.ID)); gen.CostNanos != cost {
		t.Fatalf("generation %+v, want cost %d", gen, cost)
	}

	// The content is the upstream's bytes, whole, by range, and its thumbnail.
	u.expectContent(t, v.ID, sora.video, 70000, 70999)
	thumb, err := client.Videos.DownloadContent(ctx, v.ID, openai.VideoDownloadContentParams{Variant: openai.VideoDownloadContentParamsVariantThumbnail})
	if err != nil {
		t.Fatal(err)
	}
	thumbBody, _ := io.ReadAll(thumb.Body)
	_ = thumb.Body.Close()
	if !bytes.Equal(thumbBody, sora.thumbnail) || thumb.Header.Get("Content-Type") != "image/png" {
		t.Fatalf("thumbnail: %d bytes of %s", len(thumbBody), thumb.Header.Get("Content-Type"))
	}
	sora.mu.Lock()
	accepts := sora.contentAccept
	sora.mu.Unlock()
	for _, accept := range accepts {
		if accept != "application/binary" {
			t.Fatalf("content asked with Accept %q", accept)
		}
	}

	// The job's object carries nothing of the upstream's credential.
	if _, raw := rawGet(t, env.baseURL+"/v1/videos/"+v.ID, a.std, nil); bytes.Contains(raw, []byte(soraKey)) || bytes.Contains(raw, []byte(sora.URL)) {
		t.Fatalf("the video object shows the upstream: %s", raw)
	}

	del, err := client.Videos.Delete(ctx, v.ID)
	if err != nil || !del.Deleted || del.ID != v.ID {
		t.Fatalf("delete: %v %v", del, err)
	}
	sora.mu.Lock()
	deletes, bad, completedPolls := sora.deletes, sora.badAuthors, sora.completedPolls
	sora.mu.Unlock()
	if deletes != 1 || len(bad) != 0 {
		t.Fatalf("the upstream saw %d deletes, calls without its key: %v", deletes, bad)
	}
	env.expectError(404, "not_found", "video_id", http.MethodGet, a.std, "/videos/"+v.ID, "")

	// Charged once: the job is no longer polled, and the wallet stays where it was.
	time.Sleep(700 * time.Millisecond)
	sora.mu.Lock()
	later := sora.completedPolls
	sora.mu.Unlock()
	if later != completedPolls {
		t.Fatalf("an ended job is still polled: %d completed polls, then %d", completedPolls, later)
	}
	if bal := env.balance(a.ws); bal.BalanceNanos != 10*usd-cost || bal.ReservedNanos != 0 {
		t.Fatalf("wallet at the end: %+v", bal)
	}
}

// TestVideosThroughVeoUpstream makes videos through the gemini adapter, end to end: the
// create reaches predictLongRunning with the key in its header, the operation is polled
// until done, the content is fetched by the gateway with the key (the client never sees
// the sample's URI or the key) and streams whole and by range; the job is billed the
// seconds asked at the 720p price. An operation ending in error or filtered fails, free.
func TestVideosThroughVeoUpstream(t *testing.T) {
	u := startVideoUpstreams(t, 20*usd)
	env, veo, a, client, ctx := u.env, u.veo, u.team, u.client, context.Background()
	v, first, pollAfter := u.createWithFirstFrame(t, "veo-e2e", "a lighthouse at dawn", "6")
	if pollAfter != fmt.Sprint(jobs.DefaultPace.Milliseconds()) {
		t.Fatalf("openai-poll-after-ms %q, want the gateway's pace: Veo asks none", pollAfter)
	}
	// The failures run meanwhile: Veo's jobs end no quicker than the gateway's pace.
	failed, err := client.Videos.New(ctx, openai.VideoNewParams{Model: "veo-e2e", Prompt: "a storm [error]", Seconds: "8", Size: "1280x720"})
	if err != nil {
		t.Fatal(err)
	}
	filtered, err := client.Videos.New(ctx, openai.VideoNewParams{Model: "veo-e2e", Prompt: "something [filtered]", Seconds: "4", Size: "720x1280"})
	if err != nil {
		t.Fatal(err)
	}
	const held = (6 + 8 + 4) * 400_000_000
	if bal := env.balance(a.ws); bal.BalanceNanos != 20*usd || bal.ReservedNanos != held {
		t.Fatalf("wallet while the jobs run: %+v, want %d held", bal, held)
	}

	veo.mu.Lock()
	creates, queries := veo.creates, veo.createQuery
	veo.mu.Unlock()
	if len(creates) != 3 {
		t.Fatalf("the upstream saw %d creates", len(creates))
	}
	c := creates[0]
	if in := c.Instances[0]; in.Prompt != "a lighthouse at dawn" || in.Image == nil || in.Image.InlineData.MimeType != "image/png" ||
		in.Image.InlineData.Data != base64.StdEncoding.EncodeToString(first) {
		t.Fatalf("the upstream's instance: %+v", in)
	}
	if p := c.Parameters; len(p) != 3 || p["durationSeconds"] != float64(6) || p["aspectRatio"] != "16:9" || p["resolution"] != "720p" {
		t.Fatalf("the upstream's parameters: %v", p)
	}
	if p := creates[2].Parameters; p["durationSeconds"] != float64(4) || p["aspectRatio"] != "9:16" || p["resolution"] != "720p" {
		t.Fatalf("the portrait create's parameters: %v", p)
	}
	for _, q := range queries {
		if strings.Contains(q, veoKey) {
			t.Fatalf("the key went in the URL: %q", q)
		}
	}

	done, err := client.Videos.PollStatus(ctx, v.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Veo does not echo the length: the seconds asked are the job's, and what it is charged.
	if done.Status != openai.VideoStatusCompleted || done.Progress != 100 || done.Seconds != "6" || done.Size != "1280x720" {
		t.Fatalf("completed %s", done.RawJSON())
	}
	obj := env.expect(200, http.MethodGet, a.std, "/videos/"+v.ID, "")
	if u := obj["usage"].(map[string]any); u["seconds"] != float64(6) || u["resolution"] != "720p" {
		t.Fatalf("usage %v", u)
	}
	const cost = 6 * 400_000_000
	if gen := env.generation(a.ws, jobs.GenerationID(v.ID)); gen.CostNanos != cost {
		t.Fatalf("generation %+v, want cost %d (6 s x 0.40 USD)", gen, cost)
	}

	// The sample's URI is kept by the gateway, never shown: the object has neither it nor the key.
	j, err := env.store.GetJob(ctx, a.ws, v.ID)
	var kept struct {
		State []byte `json:"state"`
	}
	if err != nil || json.Unmarshal(j.Result, &kept) != nil || !bytes.Contains(kept.State, []byte(veo.URL+"/v1beta/files/sample1:download")) {
		t.Fatalf("the job's stored result keeps no sample URI: %s, %v", j.Result, err)
	}
	host := strings.TrimPrefix(veo.URL, "http://")
	for _, path := range []string{"/videos/" + v.ID, "/videos?limit=100"} {
		_, raw := rawGet(t, env.baseURL+"/v1"+path, a.std, nil)
		for _, secret := range []string{host, "sample1", veoKey} {
			if bytes.Contains(raw, []byte(secret)) {
				t.Fatalf("GET %s shows %q: %s", path, secret, raw)
			}
		}
	}

	// The content: the gateway fetches it with the key (the fake refuses it without).
	u.expectContent(t, v.ID, veo.video, 100, 1099)
	// Veo makes the video variant only.
	if r, got := rawGet(t, env.baseURL+"/v1/videos/"+v.ID+"/content?variant=thumbnail", a.std, nil); r.StatusCode != 404 || errorCode(t, got) != "not_found" {
		t.Fatalf("a thumbnail of Veo's: %d %s", r.StatusCode, got)
	}
	veo.mu.Lock()
	downloads, keyless := veo.downloads, veo.keyless
	veo.mu.Unlock()
	if downloads != 3 || keyless != 0 {
		t.Fatalf("the upstream served %d downloads, refused %d calls without the key", downloads, keyless)
	}

	// An operation that ends in error, and one filtered: failed, charged nothing.
	for _, tc := range []struct {
		id, code string
	}{{failed.ID, "internal"}, {filtered.ID, "content_filtered"}} {
		ended, err := client.Videos.PollStatus(ctx, tc.id, 0)
		if err != nil {
			t.Fatal(err)
		}
		if ended.Status != openai.VideoStatusFailed || ended.Error.Code != tc.code || ended.Error.Message == "" {
			t.Fatalf("%s: %s, want failed with %s", tc.id, ended.RawJSON(), tc.code)
		}
		if obj := env.expect(200, http.MethodGet, a.std, "/videos/"+tc.id, ""); obj["billing"].(map[string]any)["status"] != "released" {
			t.Fatalf("failed object %v", obj)
		}
	}
	if bal := env.balance(a.ws); bal.BalanceNanos != 20*usd-cost || bal.ReservedNanos != 0 {
		t.Fatalf("wallet at the end: %+v, want 20 USD - 6 s x 0.40 USD, nothing held", bal)
	}

	// Veo deletes nothing on request: the job goes here, and no call reaches the upstream.
	if del, err := client.Videos.Delete(ctx, v.ID); err != nil || !del.Deleted {
		t.Fatalf("delete: %v %v", del, err)
	}
	veo.mu.Lock()
	other := veo.otherMethod
	veo.mu.Unlock()
	if len(other) != 0 {
		t.Fatalf("unexpected upstream calls: %v", other)
	}
}

// TestVideoRefusalMovesOn: what an adapter refuses before any call (the /videos API has no
// negative prompt) moves the create on to the model's next route, whose upstream takes it;
// with no route left, the refusal is the answer, naming the field, and nothing is held.
func TestVideoRefusalMovesOn(t *testing.T) {
	u := startVideoUpstreams(t, 10*usd)
	env, sora, veo, a, ctx := u.env, u.sora, u.veo, u.team, context.Background()
	created := env.expect(200, http.MethodPost, a.std, "/videos",
		`{"model": "sora-or-veo", "prompt": "a quiet harbour", "seconds": "8", "size": "1280x720", "negative_prompt": "fog"}`)
	if j, err := env.store.GetJob(ctx, a.ws, created["id"].(string)); err != nil || j.Provider != "veo" || j.UpstreamModel != veoUpstreamModel {
		t.Fatalf("the job went to %s/%s (%v), want Veo's route", j.Provider, j.UpstreamModel, err)
	}
	veo.mu.Lock()
	creates := veo.creates
	veo.mu.Unlock()
	if len(creates) != 1 || creates[0].Parameters["negativePrompt"] != "fog" {
		t.Fatalf("Veo's creates: %+v", creates)
	}
	sora.mu.Lock()
	soraCreate := sora.create
	sora.mu.Unlock()
	if soraCreate != nil {
		t.Fatalf("Sora was called with what it cannot take: %v", soraCreate)
	}

	before := env.balance(a.ws)
	env.expectError(400, "unsupported_value", "negative_prompt", http.MethodPost, a.std, "/videos",
		`{"model": "sora-e2e", "prompt": "a quiet harbour", "seconds": "8", "size": "1280x720", "negative_prompt": "fog"}`)
	if after := env.balance(a.ws); after != before {
		t.Fatalf("wallet after a refused create: %+v, before %+v", after, before)
	}
}
