package module

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"image"
	"image/png"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/modelgateway/caddy-modelgateway/providers/mock"
)

// videoBytesPerSecond is the mock's video size in these tests: a 4-second video is 1 MiB.
const videoBytesPerSecond = 256 << 10

// videoConfig is a gateway of mock video upstreams: videos render in a second (mockvid,
// mockvid2) or half a minute (mockslow); video-fail's jobs fail; video-fallback's first
// route is down, its second makes the video.
func videoConfig() string {
	return `		secret_key {env.GATEWAY_TEST_SECRET_KEY}
		provider mockvid {
			type mock
			video_render 1s
			video_bytes_per_second 256KiB
		}
		provider mockvid2 {
			type mock
			video_render 1s
			video_bytes_per_second 256KiB
		}
		provider mockslow {
			type mock
			video_render 30s
		}
		model video-model {
			route mockvid mock-video {
				output_video_seconds 0.10 resolution 720p
				output_video_seconds 0.30 resolution 1080p
			}
		}
		model video-slow {
			route mockslow mock-video {
				output_video_seconds 0.10 resolution 720p
			}
		}
		model video-fail {
			route mockvid mock-video-fail {
				output_video_seconds 0.10 resolution 720p
			}
		}
		model video-fallback {
			route mockvid mock-video-down {
				output_video_seconds 0.50 resolution 720p
			}
			route mockvid2 mock-video {
				output_video_seconds 0.20 resolution 720p
			}
		}
		model video-down {
			route mockvid mock-video-down {
				output_video_seconds 0.10 resolution 720p
			}
		}
		model video-4k-only {
			route mockvid mock-video {
				output_video_seconds 1.00 resolution 2160p
			}
		}`
}

func startVideoGateway(t *testing.T) *gatewayEnv {
	t.Helper()
	t.Setenv("GATEWAY_TEST_SECRET_KEY", newSecretKey(t))
	return startGateway(t, videoConfig(), "")
}

// mockVideoSum is the sha256 of the content the mock upstream makes for the job id of
// workspace ws, read from the job's native id as the upstream knows it.
func (e *gatewayEnv) mockVideoSum(ws, id string) ([32]byte, int64) {
	e.t.Helper()
	j, err := e.store.GetJob(context.Background(), ws, id)
	if err != nil {
		e.t.Fatal(err)
	}
	rd, n, err := mock.New(mock.Config{VideoBytesPerSecond: videoBytesPerSecond}).VideoBytes(j.NativeID)
	if err != nil {
		e.t.Fatal(err)
	}
	h := sha256.New()
	_, _ = io.Copy(h, rd)
	return [32]byte(h.Sum(nil)), n
}

func tinyPNG(t *testing.T) []byte {
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewRGBA(image.Rect(0, 0, 4, 4))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// rawGet sends a GET with headers and returns the answer, its body read.
func rawGet(t *testing.T, rawURL, key string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, rawURL, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := doRetryingDial(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

func errorCode(t *testing.T, body []byte) string {
	t.Helper()
	var v struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("not an error: %s", body)
	}
	return v.Error.Code
}

// TestVideosEndToEnd makes videos through Caddy with openai-go as a user would: multipart
// creates with and without an input reference, polled to completion at the pace the
// gateway asks, charged exactly their seconds at their resolution's price; their content
// streamed whole and by range as the upstream made it; links that need no key until they
// expire or are altered; deletion of ended jobs only; workspaces fenced; failures free.
func TestVideosEndToEnd(t *testing.T) {
	env := startVideoGateway(t)
	a, b := env.team(10*usd), env.team(10*usd)
	ctx := context.Background()
	client := env.openai(a.std)

	// A create holds the worst case: 4 s at 720p's 0.10 USD.
	var raw *http.Response
	v, err := client.Videos.New(ctx, openai.VideoNewParams{Model: "video-model", Prompt: "a cat on a skateboard", Seconds: "4", Size: "720x1280"},
		option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	if v.Object != "video" || v.Model != "video-model" || v.Seconds != "4" || v.Size != "720x1280" || v.Prompt != "a cat on a skateboard" ||
		(v.Status != "queued" && v.Status != "in_progress") || !strings.HasPrefix(v.ID, "video_") || v.CreatedAt == 0 || v.ExpiresAt != v.CreatedAt+24*3600 {
		t.Fatalf("created %s", v.RawJSON())
	}
	if raw.Header.Get("openai-poll-after-ms") != "250" {
		t.Fatalf("openai-poll-after-ms %q, want the upstream's 250", raw.Header.Get("openai-poll-after-ms"))
	}
	if bal := env.balance(a.ws); bal.BalanceNanos != 10*usd || bal.ReservedNanos != 400_000_000 {
		t.Fatalf("wallet while the job runs: %+v; want 0.40 USD held", bal)
	}
	done, err := client.Videos.PollStatus(ctx, v.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != openai.VideoStatusCompleted || done.Progress != 100 || done.CompletedAt == 0 || done.Seconds != "4" {
		t.Fatalf("completed %s", done.RawJSON())
	}
	if bal := env.balance(a.ws); bal.BalanceNanos != 10*usd-400_000_000 || bal.ReservedNanos != 0 {
		t.Fatalf("wallet after completion: %+v; want 10 - 4 s x 0.10 USD exactly, nothing held", bal)
	}
	obj := env.expect(200, http.MethodGet, a.std, "/videos/"+v.ID, "")
	billing, usage := obj["billing"].(map[string]any), obj["usage"].(map[string]any)
	if obj["lifecycle_status"] != "completed" || billing["status"] != "settled" || billing["cost_nanos"] != float64(400_000_000) ||
		usage["seconds"] != float64(4) || usage["resolution"] != "720p" || obj["error"] != nil ||
		obj["polling_url"] != env.baseURL+"/v1/videos/"+v.ID || obj["websocket_url"] != strings.Replace(env.baseURL, "http", "ws", 1)+"/v1/async/video/"+v.ID+"/ws" {
		t.Fatalf("completed object %v", obj)
	}
	if _, h, _ := env.call(http.MethodGet, a.std, "/videos/"+v.ID, ""); h.Get("openai-poll-after-ms") != "" {
		t.Fatal("an ended job still asks to be polled")
	}

	// The content is the upstream's, byte for byte, streamed whole or by range.
	resp, err := client.Videos.DownloadContent(ctx, v.ID, openai.VideoDownloadContentParams{})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want, size := env.mockVideoSum(a.ws, v.ID)
	if sha256.Sum256(body) != want || int64(len(body)) != size || size != 4*videoBytesPerSecond || resp.Header.Get("Content-Type") != "video/mp4" || string(body[4:8]) != "ftyp" {
		t.Fatalf("content: %d bytes of %s, want %d of the upstream's", len(body), resp.Header.Get("Content-Type"), size)
	}
	part, partBody := rawGet(t, env.baseURL+"/v1/videos/"+v.ID+"/content", a.std, map[string]string{"Range": "bytes=1000-5095"})
	if part.StatusCode != 206 || part.Header.Get("Content-Range") != "bytes 1000-5095/1048576" || part.Header.Get("Content-Length") != "4096" ||
		part.Header.Get("Accept-Ranges") != "bytes" || !bytes.Equal(partBody, body[1000:5096]) {
		t.Fatalf("range: %d %v, %d bytes", part.StatusCode, part.Header, len(partBody))
	}
	if r, body := rawGet(t, env.baseURL+"/v1/videos/"+v.ID+"/content", a.std, map[string]string{"Range": "bytes=2000000-"}); r.StatusCode != 416 || errorCode(t, body) != "range_not_satisfiable" {
		t.Fatalf("a range past the end: %d %s", r.StatusCode, body)
	}
	thumb, err := client.Videos.DownloadContent(ctx, v.ID, openai.VideoDownloadContentParams{Variant: openai.VideoDownloadContentParamsVariantThumbnail})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(thumb.Body); err != nil || thumb.Header.Get("Content-Type") != "image/png" {
		t.Fatalf("thumbnail: %v", err)
	}
	thumb.Body.Close()
	_, err = client.Videos.DownloadContent(ctx, v.ID, openai.VideoDownloadContentParams{Variant: openai.VideoDownloadContentParamsVariantSpritesheet})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("a variant the upstream has not: %v", err)
	}

	// A signed link needs no key, and is refused once altered.
	link := env.expect(200, http.MethodPost, a.std, "/videos/"+v.ID+"/download_url", `{"ttl_seconds": 60}`)
	linkURL := link["url"].(string)
	if exp := int64(link["expires_at"].(float64)); exp < time.Now().Unix()+55 || exp > time.Now().Unix()+61 || !strings.HasPrefix(linkURL, env.baseURL+"/v1/videos/"+v.ID+"/content?") {
		t.Fatalf("link %v", link)
	}
	if r, got := rawGet(t, linkURL, "", nil); r.StatusCode != 200 || sha256.Sum256(got) != want {
		t.Fatalf("the link without a key: %d, %d bytes", r.StatusCode, len(got))
	}
	u, _ := url.Parse(linkURL)
	for name, alter := range map[string]func(q url.Values){
		"signature": func(q url.Values) { q.Set("sig", strings.Repeat("A", len(q.Get("sig")))) },
		"expiry":    func(q url.Values) { q.Set("expires", "9999999999") },
		"workspace": func(q url.Values) { q.Set("ws", b.ws) },
		"variant":   func(q url.Values) { q.Set("variant", "thumbnail") },
	} {
		q := u.Query()
		alter(q)
		altered := *u
		altered.RawQuery = q.Encode()
		if r, got := rawGet(t, altered.String(), "", nil); r.StatusCode != 403 || errorCode(t, got) != "invalid_link_signature" {
			t.Errorf("a link with its %s altered: %d %s", name, r.StatusCode, got)
		}
	}
	if r, got := rawGet(t, env.baseURL+"/v1/videos/"+v.ID+"/content", "", nil); r.StatusCode != 401 {
		t.Fatalf("no key and no link: %d %s", r.StatusCode, got)
	}
	env.expectError(400, "validation_error", "ttl_seconds", http.MethodPost, a.std, "/videos/"+v.ID+"/download_url", `{"ttl_seconds": 30}`)

	// With an input reference, as the SDK uploads it.
	withRef, err := client.Videos.New(ctx, openai.VideoNewParams{
		Model: "video-model", Prompt: "the cat jumps", Seconds: "8", Size: "1280x720",
		InputReference: openai.VideoNewParamsInputReferenceUnion{OfFile: openai.File(bytes.NewReader(tinyPNG(t)), "first.png", "image/png")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if ended, err := client.Videos.PollStatus(ctx, withRef.ID, 0); err != nil || ended.Status != openai.VideoStatusCompleted || ended.Seconds != "8" {
		t.Fatalf("with a reference: %v %v", ended, err)
	}
	if bal := env.balance(a.ws); bal.BalanceNanos != 10*usd-400_000_000-800_000_000 {
		t.Fatalf("wallet after the second video: %+v", bal)
	}

	// Another workspace sees none of it.
	for _, call := range []struct{ method, path string }{
		{http.MethodGet, "/videos/" + v.ID}, {http.MethodGet, "/videos/" + v.ID + "/content"}, {http.MethodDelete, "/videos/" + v.ID},
		{http.MethodPost, "/videos/" + v.ID + "/download_url"}, {http.MethodPost, "/videos/" + v.ID + "/cancel"},
	} {
		env.expectError(404, "not_found", "video_id", call.method, b.std, call.path, "")
	}
	if list := env.expect(200, http.MethodGet, b.std, "/videos", ""); len(list["data"].([]any)) != 0 {
		t.Fatalf("another workspace lists %v", list)
	}
	env.expectError(501, "not_implemented_yet", "", http.MethodPost, a.std, "/videos/"+v.ID+"/cancel", "")

	// A running job can be neither read nor deleted; a slow one asks to be polled at its
	// upstream's pace.
	slow, err := client.Videos.New(ctx, openai.VideoNewParams{Model: "video-slow", Prompt: "a long take", Seconds: "4"}, option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	// Asked no size, it shows the one its upstream said at the start it makes.
	if raw.Header.Get("openai-poll-after-ms") != "7500" || slow.Size != "720x1280" {
		t.Fatalf("slow job: poll after %q, %s", raw.Header.Get("openai-poll-after-ms"), slow.RawJSON())
	}
	env.expectError(409, "video_not_terminal", "", http.MethodDelete, a.std, "/videos/"+slow.ID, "")
	env.expectError(409, "video_not_ready", "", http.MethodGet, a.std, "/videos/"+slow.ID+"/content", "")
	env.expectError(409, "video_not_ready", "", http.MethodPost, a.std, "/videos/"+slow.ID+"/download_url", "")

	// A failed job is charged nothing.
	before := env.balance(a.ws)
	failed, err := client.Videos.New(ctx, openai.VideoNewParams{Model: "video-fail", Prompt: "doomed", Seconds: "4", Size: "1280x720"})
	if err != nil {
		t.Fatal(err)
	}
	ended, err := client.Videos.PollStatus(ctx, failed.ID, 0)
	if err != nil || ended.Status != openai.VideoStatusFailed || ended.Error.Code != "video_generation_failed" || ended.Error.Message == "" {
		t.Fatalf("failed job: %v %v", ended, err)
	}
	if bal := env.balance(a.ws); bal.BalanceNanos != before.BalanceNanos || bal.ReservedNanos != before.ReservedNanos {
		t.Fatalf("wallet after a failed job: %+v, before %+v", bal, before)
	}
	if obj := env.expect(200, http.MethodGet, a.std, "/videos/"+failed.ID, ""); obj["lifecycle_status"] != "failed" || obj["billing"].(map[string]any)["status"] != "released" {
		t.Fatalf("failed object %v", obj)
	}

	// The list walks every page with the SDK's auto-pager, newest first, filtered by status.
	var listed []string
	pager := client.Videos.ListAutoPaging(ctx, openai.VideoListParams{Limit: openai.Int(2)})
	for pager.Next() {
		listed = append(listed, pager.Current().ID)
	}
	if err := pager.Err(); err != nil {
		t.Fatal(err)
	}
	if wantIDs := []string{failed.ID, slow.ID, withRef.ID, v.ID}; !slices.Equal(listed, wantIDs) {
		t.Fatalf("listed %v, want %v", listed, wantIDs)
	}
	if got := env.walkList(a.std, "/videos?status=completed&order=asc", 1); !slices.Equal(got, []string{v.ID, withRef.ID}) {
		t.Fatalf("completed, oldest first: %v", got)
	}
	env.expectError(400, "validation_error", "order", http.MethodGet, a.std, "/videos?order=sideways", "")
	env.expectError(400, "validation_error", "limit", http.MethodGet, a.std, "/videos?limit=0", "")
	env.expectError(400, "validation_error", "status", http.MethodGet, a.std, "/videos?status=done", "")

	// Deleting an ended job deletes it at the upstream and here.
	del, err := client.Videos.Delete(ctx, v.ID)
	if err != nil || !del.Deleted || del.ID != v.ID || del.Object != "video.deleted" {
		t.Fatalf("delete: %v %v", del, err)
	}
	env.expectError(404, "not_found", "video_id", http.MethodGet, a.std, "/videos/"+v.ID, "")
	if r, _ := rawGet(t, linkURL, "", nil); r.StatusCode != 404 {
		t.Fatalf("the link of a deleted video: %d", r.StatusCode)
	}
}

// TestVideoCreates covers the create's other paths: JSON bodies, a webhook endpoint named,
// unknown and invalid fields, a resolution no route prices, and a route that cannot
// start the job passed for the next.
func TestVideoCreates(t *testing.T) {
	env := startVideoGateway(t)
	a := env.team(10 * usd)
	ctx := context.Background()

	hook := env.expect(201, http.MethodPost, a.mgmt, "/webhook-endpoints", `{"name": "videos", "url": "https://hooks.example.com/gw", "events": ["video.completed"]}`)
	created := env.expect(200, http.MethodPost, a.std, "/videos",
		`{"model": "video-model", "prompt": "json", "seconds": 8, "resolution": "1080p", "aspect_ratio": "16:9", "seed": 7,
		  "webhook": {"endpoint_id": "`+hook["id"].(string)+`", "events": ["video.completed"]}, "metadata": {"scene": "1"}}`)
	if created["seconds"] != "8" || created["size"] != "1920x1080" || created["resolution"] != "1080p" || created["metadata"].(map[string]any)["scene"] != "1" {
		t.Fatalf("json create %v", created)
	}
	j, err := env.store.GetJob(ctx, a.ws, created["id"].(string))
	if err != nil || !strings.Contains(string(j.Webhook), hook["id"].(string)) || j.HeldNanos != 8*300_000_000 {
		t.Fatalf("stored job %+v, %v", j, err)
	}

	// The same through the SDK's multipart, the webhook and metadata as its extra fields
	// (which it sends as text fields only, named as the form nests them).
	sdk := env.openai(a.std)
	withHook := openai.VideoNewParams{Model: "video-model", Prompt: "multipart", Seconds: "4", Size: "1280x720"}
	withHook.SetExtraFields(map[string]any{
		"webhook[endpoint_id]": hook["id"], "webhook[events][]": "video.failed", "metadata[scene]": "2",
	})
	mv, err := sdk.Videos.New(ctx, withHook)
	if err != nil {
		t.Fatal(err)
	}
	if j, err := env.store.GetJob(ctx, a.ws, mv.ID); err != nil || !strings.Contains(string(j.Webhook), hook["id"].(string)) ||
		!strings.Contains(string(j.Webhook), "video.failed") || !strings.Contains(string(j.Request), `"scene":"2"`) {
		t.Fatalf("multipart job %+v, %v", j, err)
	}

	for _, tc := range []struct{ body, code, param string }{
		{`{"model": "video-model", "prompt": "x", "duration": 4}`, "validation_error", "duration"},
		{`{"model": "video-model", "prompt": "x", "seconds": "forever"}`, "validation_error", "seconds"},
		{`{"model": "video-model", "prompt": "x", "size": "huge"}`, "validation_error", "size"},
		{`{"model": "video-model", "prompt": "x", "size": "1280x720", "resolution": "720p"}`, "validation_error", "size"},
		{`{"model": "video-model", "prompt": ""}`, "validation_error", "prompt"},
		{`{"model": "video-model", "prompt": "x", "webhook": {"endpoint_id": "nope"}}`, "validation_error", "webhook.endpoint_id"},
		{`{"model": "video-model", "prompt": "x", "input_reference": {"image_url": "https://example.com/a.png"}}`, "validation_error", "input_reference"},
		{`{"model": "no-such-model", "prompt": "x"}`, "unsupported_model_or_endpoint", "model"},
	} {
		env.expectError(400, tc.code, tc.param, http.MethodPost, a.std, "/videos", tc.body)
	}
	// A multipart create names its unknown fields too.
	extra := openai.VideoNewParams{Model: "video-model", Prompt: "x"}
	extra.SetExtraFields(map[string]any{"duration": "4"})
	client := env.openai(a.std)
	_, err = client.Videos.New(ctx, extra)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, `"duration"`) {
		t.Fatalf("unknown multipart field: %v", err)
	}
	// No route prices 720p: refused, never made for free.
	env.expectError(400, "validation_error", "resolution", http.MethodPost, a.std, "/videos", `{"model": "video-4k-only", "prompt": "x", "size": "1280x720"}`)

	// The first route is down: the second makes the video, at its price.
	fb := env.expect(200, http.MethodPost, a.std, "/videos", `{"model": "video-fallback", "prompt": "x", "seconds": "4", "size": "1280x720"}`)
	if j, err := env.store.GetJob(ctx, a.ws, fb["id"].(string)); err != nil || j.Provider != "mockvid2" || j.HeldNanos != 4*500_000_000 {
		t.Fatalf("fallback job %+v, %v", j, err)
	}

	// No route can start it: the upstream's failure, and the hold given back.
	before := env.balance(a.ws)
	env.expectError(502, "upstream_error", "", http.MethodPost, a.std, "/videos", `{"model": "video-down", "prompt": "x"}`)
	if after := env.balance(a.ws); after != before {
		t.Fatalf("wallet after a job no route started: %+v, before %+v", after, before)
	}
	// A wallet short of the worst case (and of the 1.00 USD preflight) is refused.
	poor := env.team(usd / 2)
	env.expectError(402, "insufficient_funds", "", http.MethodPost, poor.std, "/videos", `{"model": "video-model", "prompt": "x", "seconds": "4", "size": "1280x720"}`)

	models := env.expect(200, http.MethodGet, a.std, "/videos/models", "")
	m := findItem(t, models, "video-model")
	prices := m["pricing"].(map[string]any)["per_second"].([]any)
	if m["status"] != "active" || !slices.Equal(toStrings(m["providers"]), []string{"mockvid"}) || len(prices) != 2 ||
		prices[0].(map[string]any)["resolution"] != "720p" || prices[0].(map[string]any)["nanos"] != float64(100_000_000) {
		t.Fatalf("video model %v", m)
	}
	if fbm := findItem(t, models, "video-fallback"); !slices.Equal(toStrings(fbm["providers"]), []string{"mockvid", "mockvid2"}) {
		t.Fatalf("fallback model %v", fbm)
	}
}

func toStrings(v any) []string {
	var out []string
	for _, s := range v.([]any) {
		out = append(out, s.(string))
	}
	return out
}

// TestVideosOnPostgres makes, reads and deletes a video with the gateway's store on
// PostgreSQL: the job's row, its polls, its settlement and its deletion there.
func TestVideosOnPostgres(t *testing.T) {
	dsn := postgresSchema(t)
	t.Setenv("GATEWAY_TEST_SECRET_KEY", newSecretKey(t))
	env := startPostgresGateway(t, dsn, "\t\tcredit_lease_linger 0\n"+videoConfig())
	env.store = openPostgres(t, dsn)
	a := env.team(10 * usd)
	ctx := context.Background()
	client := env.openai(a.std)
	v, err := client.Videos.New(ctx, openai.VideoNewParams{Model: "video-model", Prompt: "on postgres", Seconds: "4", Size: "1280x720"})
	if err != nil {
		t.Fatal(err)
	}
	if done, err := client.Videos.PollStatus(ctx, v.ID, 0); err != nil || done.Status != openai.VideoStatusCompleted {
		t.Fatalf("%v %v", done, err)
	}
	if bal := env.balance(a.ws); bal.BalanceNanos != 10*usd-400_000_000 || bal.ReservedNanos != 0 {
		t.Fatalf("wallet %+v", bal)
	}
	resp, err := client.Videos.DownloadContent(ctx, v.ID, openai.VideoDownloadContentParams{})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want, _ := env.mockVideoSum(a.ws, v.ID); sha256.Sum256(body) != want {
		t.Fatal("the content differs from the upstream's")
	}
	if del, err := client.Videos.Delete(ctx, v.ID); err != nil || !del.Deleted {
		t.Fatalf("delete: %v %v", del, err)
	}
	env.expectError(404, "not_found", "video_id", http.MethodGet, a.std, "/videos/"+v.ID, "")
}

// TestVideoPollNeedsNoCredit: polling a job is never refused for credit. With the wallet
// taken down below what a new request needs, the job's polls, its end and its charge go
// on, while another create is refused.
func TestVideoPollNeedsNoCredit(t *testing.T) {
	env := startVideoGateway(t)
	a := env.team(10 * usd)
	ctx := context.Background()
	client := env.openai(a.std)
	v, err := client.Videos.New(ctx, openai.VideoNewParams{Model: "video-model", Prompt: "a slow cat", Seconds: "4", Size: "720x1280"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.store.AddCredits(ctx, a.ws, -9_300_000_000, "taken back"); err != nil {
		t.Fatal(err)
	}
	env.expectError(http.StatusPaymentRequired, "insufficient_funds", "", http.MethodPost, a.std, "/videos",
		`{"model": "video-model", "prompt": "another", "seconds": "4", "size": "720x1280"}`)
	env.expect(http.StatusOK, http.MethodGet, a.std, "/videos/"+v.ID, "")
	done, err := client.Videos.PollStatus(ctx, v.ID, 0)
	if err != nil || done.Status != openai.VideoStatusCompleted {
		t.Fatalf("polled to %v, %v; want completed", done, err)
	}
	if bal := env.balance(a.ws); bal.BalanceNanos != 700_000_000-400_000_000 || bal.ReservedNanos != 0 {
		t.Fatalf("wallet %+v; want 0.70 USD less the job's 0.40", bal)
	}
}

// TestFreeVideoModelChargedNothing: a ":free" model's video job is charged nothing, though
// a paid model with the same route (video-fallback's second) sorts before it.
func TestFreeVideoModelChargedNothing(t *testing.T) {
	t.Setenv("GATEWAY_TEST_SECRET_KEY", newSecretKey(t))
	env := startGateway(t, videoConfig()+`
		model video-free:free {
			route mockvid2 mock-video {
				output_video_seconds 0.20 resolution 720p
			}
		}`, "")
	a := env.team(10 * usd)
	ctx := context.Background()
	client := env.openai(a.std)
	v, err := client.Videos.New(ctx, openai.VideoNewParams{Model: "video-free:free", Prompt: "a free cat", Seconds: "4", Size: "720x1280"})
	if err != nil {
		t.Fatal(err)
	}
	done, err := client.Videos.PollStatus(ctx, v.ID, 0)
	if err != nil || done.Status != openai.VideoStatusCompleted {
		t.Fatalf("polled to %v, %v; want completed", done, err)
	}
	if bal := env.balance(a.ws); bal.BalanceNanos != 10*usd || bal.ReservedNanos != 0 {
		t.Fatalf("wallet %+v; want the free model's video charged nothing", bal)
	}
}
