package handlers

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/blobs"
	"github.com/modelgateway/caddy-modelgateway/delivery"
	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/jobs"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/mock"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// musicGateway is a gateway with music models on the mock (synchronous and async shapes)
// at 0.01 USD a second, a file blob store, and a jobs engine polling in the background.
type musicGateway struct {
	*adminGateway
	blobs blobs.Store
}

const musicSecond = usdNanos / 100

func newMusicGateway(t *testing.T) *musicGateway {
	t.Helper()
	mp := mock.New(mock.Config{Name: "mock"})
	priced := func(upstream string, perSecond int64) Route {
		return Route{ProviderName: "mock", Provider: mp, UpstreamModel: upstream, Price: pricing.Price{OutputAudioSeconds: perSecond}}
	}
	models := []*Model{
		{Name: "song", Routes: []Route{priced("mock-music", musicSecond)}},
		{Name: "song-async", Routes: []Route{priced("mock-music-async", musicSecond)}},
		{Name: "song-unpriced", Routes: []Route{{ProviderName: "mock", Provider: mp, UpstreamModel: "mock-music", Price: pricing.Price{PerRequest: musicSecond}}}},
		{Name: "chatty", Routes: []Route{route("stub", "gpt", "1", "2")}},
	}
	fs, err := blobs.NewFS(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	mg := &musicGateway{blobs: fs}
	sealer, err := delivery.NewSealer(base64.StdEncoding.EncodeToString(make([]byte, 32)))
	if err != nil {
		t.Fatal(err)
	}
	mg.adminGateway = newAdminGateway(t, models, func(g *Gateway) {
		g.Blobs, g.BasePath, g.WebhookSealer = fs, "/v1", sealer
		g.Jobs = &jobs.Engine{Store: g.Store, Logger: zap.NewNop(), Owner: "test", MinPoll: 10 * time.Millisecond, Pace: 20 * time.Millisecond, Idle: 10 * time.Millisecond}
	})
	g := mg.g
	g.Jobs.Env = func() jobs.Env {
		return jobs.Env{Blobs: fs, Route: g.Registry.JobRoute}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Jobs.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return mg
}

// poll polls music id until it ends.
func (mg *musicGateway) poll(key, id string) map[string]any {
	mg.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, h, v := mg.doHeader(http.MethodGet, "/music/generate/"+id, key, "")
		if status != 200 {
			mg.t.Fatalf("poll: %d %v", status, v)
		}
		if v["status"] == "completed" || v["status"] == "failed" {
			if h.Get("openai-poll-after-ms") != "" {
				mg.t.Errorf("an ended job still asks to be polled")
			}
			return v
		}
		if h.Get("openai-poll-after-ms") == "" {
			mg.t.Errorf("a live job does not say when to poll again: %v", v)
		}
		if time.Now().After(deadline) {
			mg.t.Fatalf("the job did not end: %v", v)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (mg *musicGateway) balance(ws string) store.Balance {
	mg.t.Helper()
	b, err := mg.s.GetBalance(context.Background(), ws)
	if err != nil {
		mg.t.Fatal(err)
	}
	return b
}

// content fetches the audio of a completed music object, with a Range header when set.
func (mg *musicGateway) content(key, url, rangeHeader string) (*http.Response, []byte) {
	mg.t.Helper()
	path := url[strings.Index(url, "/v1/")+3:]
	r := httptest.NewRequest(http.MethodGet, "http://gw/v1"+path, nil)
	r.Header.Set("Authorization", "Bearer "+key)
	if rangeHeader != "" {
		r.Header.Set("Range", rangeHeader)
	}
	w := httptest.NewRecorder()
	mg.g.ServeHTTP(w, r, path)
	return w.Result(), w.Body.Bytes()
}

// TestMusicJobs: a song of each shape is created queued under a hold of its duration at the
// second's price, made by the engine, kept in the blob store and charged exactly its
// seconds once; its audio comes back whole and by range; another workspace sees nothing.
func TestMusicJobs(t *testing.T) {
	mg := newMusicGateway(t)
	ws, std, _ := mg.workspace(10 * usdNanos)
	_, otherKey, _ := mg.workspace(10 * usdNanos)
	charged := int64(0)
	for _, tc := range []struct {
		model, format, wantType string
		seconds                 int
	}{
		{"song", "wav", "audio/wav", 4},
		{"song-async", "mp3", "audio/mpeg", 3},
	} {
		t.Run(tc.model, func(t *testing.T) {
			status, h, v := mg.doHeader(http.MethodPost, "/music/generate", std,
				`{"model":"`+tc.model+`","prompt":"a calm tune","duration":`+strconv.Itoa(tc.seconds)+`,"format":"`+tc.format+`","instrumental":true}`)
			if status != 200 || v["object"] != "music" || v["status"] != "queued" || v["lifecycle_status"] != "pending" ||
				v["model"] != tc.model || v["provider"] != "mock" || v["format"] != tc.format || v["duration"] != float64(tc.seconds) ||
				h.Get("openai-poll-after-ms") == "" {
				t.Fatalf("create: %d %v", status, v)
			}
			id := v["id"].(string)
			if !strings.HasPrefix(id, "music_") || v["polling_url"] != "http://gw/v1/music/generate/"+id ||
				v["websocket_url"] != "ws://gw/v1/async/music/"+id+"/ws" || len(v["output"].([]any)) != 0 || v["usage"] != nil {
				t.Fatalf("create: %v", v)
			}
			if b := mg.balance(ws); b.ReservedNanos != int64(tc.seconds)*musicSecond {
				t.Fatalf("held %d, want %d", b.ReservedNanos, int64(tc.seconds)*musicSecond)
			}
			done := mg.poll(std, id)
			out := done["output"].([]any)
			if done["status"] != "completed" || done["lifecycle_status"] != "completed" || done["progress"] != float64(100) ||
				done["completed_at"] == nil || done["expires_at"] == nil || len(out) != 1 || done["error"] != nil {
				t.Fatalf("done: %v", done)
			}
			if u := done["usage"].(map[string]any); u["output_audio_seconds"] != float64(tc.seconds) {
				t.Fatalf("usage %v", u)
			}
			o := out[0].(map[string]any)
			resp, audio := mg.content(std, o["audio_url"].(string), "")
			sum := sha256.Sum256(audio)
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != tc.wantType || o["content_type"] != tc.wantType ||
				float64(len(audio)) != o["bytes"] || hex.EncodeToString(sum[:]) != o["sha256"] {
				t.Fatalf("content %d %v: %d bytes; output %v", resp.StatusCode, resp.Header, len(audio), o)
			}
			if d := o["duration"].(float64); d != float64(tc.seconds) {
				t.Errorf("duration %v, want %d s", d, tc.seconds)
			}
			resp, part := mg.content(std, o["audio_url"].(string), "bytes=10-99")
			if resp.StatusCode != http.StatusPartialContent || string(part) != string(audio[10:100]) ||
				resp.Header.Get("Content-Range") != "bytes 10-99/"+strconv.Itoa(len(audio)) {
				t.Fatalf("range: %d %v %d bytes", resp.StatusCode, resp.Header, len(part))
			}
			charged += int64(tc.seconds) * musicSecond
			if b := mg.balance(ws); b.BalanceNanos != 10*usdNanos-charged || b.ReservedNanos != 0 {
				t.Fatalf("wallet %+v, want %d charged and nothing held", b, charged)
			}
			status, v = mg.do(http.MethodGet, "/music/generate/"+id, otherKey, "")
			wantError(t, "another workspace", status, v, 404, CodeNotFound, "")
			if v["message"] != "music not found or not owned" || v["reason"] != "music_not_found_or_not_owned" {
				t.Fatalf("another workspace: %v", v)
			}
			if resp, _ := mg.content(otherKey, o["audio_url"].(string), ""); resp.StatusCode != 404 {
				t.Fatalf("another workspace read the audio: %d", resp.StatusCode)
			}
		})
	}
}

// TestMusicJobFails: a song the upstream refuses ends failed, in either shape, and its hold
// is released: nothing is charged.
func TestMusicJobFails(t *testing.T) {
	mg := newMusicGateway(t)
	ws, std, _ := mg.workspace(10 * usdNanos)
	for _, model := range []string{"song", "song-async"} {
		status, v := mg.do(http.MethodPost, "/music/generate", std, `{"model":"`+model+`","prompt":"mock:fail","duration":5}`)
		if status != 200 {
			t.Fatalf("%s: %d %v", model, status, v)
		}
		done := mg.poll(std, v["id"].(string))
		e, _ := done["error"].(map[string]any)
		if done["status"] != "failed" || done["lifecycle_status"] != "failed" || e == nil || e["code"] == "" || e["message"] == "" ||
			len(done["output"].([]any)) != 0 || done["usage"] != nil {
			t.Fatalf("%s: %v", model, done)
		}
	}
	if b := mg.balance(ws); b.BalanceNanos != 10*usdNanos || b.ReservedNanos != 0 {
		t.Fatalf("wallet %+v, want untouched", b)
	}
}

// TestMusicRequestErrors: each mistake is a 400 naming its field, before anything is held.
func TestMusicRequestErrors(t *testing.T) {
	mg := newMusicGateway(t)
	ws, std, _ := mg.workspace(10 * usdNanos)
	_, poor, _ := mg.workspace(0)
	tests := []struct {
		name, key, body string
		status          int
		code, param     string
	}{
		{"no model", std, `{"prompt":"x"}`, 400, CodeModelRequired, "model"},
		{"unknown field", std, `{"model":"song","prompt":"x","lyrics":"la"}`, 400, CodeValidation, "lyrics"},
		{"no prompt", std, `{"model":"song"}`, 400, CodeValidation, "prompt"},
		{"duration zero", std, `{"model":"song","prompt":"x","duration":0}`, 400, CodeValidation, "duration"},
		{"duration too long", std, `{"model":"song","prompt":"x","duration":601}`, 400, CodeValidation, "duration"},
		{"duration fraction", std, `{"model":"song","prompt":"x","duration":2.5}`, 400, CodeValidation, "duration"},
		{"format", std, `{"model":"song","prompt":"x","format":"flac"}`, 400, CodeValidation, "format"},
		{"format the upstream cannot make", std, `{"model":"song","prompt":"x","format":"ogg"}`, 400, "unsupported_value", "format"},
		{"instrumental", std, `{"model":"song","prompt":"x","instrumental":"yes"}`, 400, CodeValidation, "instrumental"},
		{"elevenlabs unsupported field", std, `{"model":"song","prompt":"x","elevenlabs":{"composition_plan":{}}}`, 400, CodeValidation, "elevenlabs.composition_plan"},
		{"elevenlabs model_id", std, `{"model":"song","prompt":"x","elevenlabs":{"model_id":"music_v1"}}`, 400, CodeValidation, "elevenlabs.model_id"},
		{"elevenlabs length not whole seconds", std, `{"model":"song","prompt":"x","elevenlabs":{"music_length_ms":1500}}`, 400, CodeValidation, "elevenlabs.music_length_ms"},
		{"elevenlabs length disagrees", std, `{"model":"song","prompt":"x","duration":3,"elevenlabs":{"music_length_ms":4000}}`, 400, CodeValidation, "elevenlabs.music_length_ms"},
		{"webhook without endpoint", std, `{"model":"song","prompt":"x","webhook":{}}`, 400, CodeValidation, "webhook"},
		{"webhook unknown endpoint", std, `{"model":"song","prompt":"x","webhook":{"endpoint_id":"0190d7a0-0000-7000-8000-000000000000"}}`, 400, CodeValidation, "webhook.endpoint_id"},
		{"unknown model", std, `{"model":"nope","prompt":"x"}`, 400, CodeUnsupportedModel, "model"},
		{"chat model", std, `{"model":"chatty","prompt":"x"}`, 400, CodeUnsupportedModel, "model"},
		{"no price per second", std, `{"model":"song-unpriced","prompt":"x"}`, 400, CodeUnsupportedModel, ""},
		{"no credit", poor, `{"model":"song","prompt":"x","duration":5}`, 402, CodeInsufficientFunds, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, v := mg.do(http.MethodPost, "/music/generate", tc.key, tc.body)
			wantError(t, tc.name, status, v, tc.status, tc.code, tc.param)
		})
	}
	if b := mg.balance(ws); b.BalanceNanos != 10*usdNanos || b.ReservedNanos != 0 {
		t.Fatalf("wallet %+v, want untouched", b)
	}
	status, v := mg.do(http.MethodGet, "/music/generate/music_nope", std, "")
	wantError(t, "missing", status, v, 404, CodeNotFound, "")
}

// TestMusicElevenLabsBlock: the elevenlabs block's fields stand for the top-level ones, and a
// request without a duration is held for the longest song.
func TestMusicElevenLabsBlock(t *testing.T) {
	mg := newMusicGateway(t)
	ws, std, _ := mg.workspace(10 * usdNanos)
	status, v := mg.do(http.MethodPost, "/music/generate", std,
		`{"model":"song","elevenlabs":{"prompt":"a tune","music_length_ms":3000,"force_instrumental":true}}`)
	if status != 200 || v["duration"] != float64(3) {
		t.Fatalf("%d %v", status, v)
	}
	if b := mg.balance(ws); b.ReservedNanos != 3*musicSecond {
		t.Fatalf("held %d", b.ReservedNanos)
	}
	mg.poll(std, v["id"].(string))
	status, v = mg.do(http.MethodPost, "/music/generate", std, `{"model":"song","prompt":"a tune"}`)
	if status != 200 || v["duration"] != nil {
		t.Fatalf("%d %v", status, v)
	}
	if b := mg.balance(ws); b.ReservedNanos != DefaultMusicMaxSeconds*musicSecond {
		t.Fatalf("held %d, want the longest song's", b.ReservedNanos)
	}
	done := mg.poll(std, v["id"].(string))
	// The mock makes 10 s when none is asked: that is what is charged.
	if u := done["usage"].(map[string]any); u["output_audio_seconds"] != float64(mock.MusicDefaultLength/time.Second) {
		t.Fatalf("usage %v", u)
	}
	if b := mg.balance(ws); b.BalanceNanos != 10*usdNanos-13*musicSecond || b.ReservedNanos != 0 {
		t.Fatalf("wallet %+v", b)
	}
}

// TestMusicWebhook: a job's webhook names one of the workspace's endpoints and events of
// music jobs; the job keeps it as its webhook configuration, whose events the engine makes.
func TestMusicWebhook(t *testing.T) {
	mg := newMusicGateway(t)
	ws, std, _ := mg.workspace(10 * usdNanos)
	otherWS, _, _ := mg.workspace(0)
	endpoint := func(ws string) string {
		e, err := mg.s.CreateWebhookEndpoint(context.Background(), store.WebhookEndpoint{
			ID: uuid.NewString(), WorkspaceID: ws, Name: "hooks", URL: "https://hooks.example.com/gw", Events: []string{"*"}, Secret: []byte("sealed"),
		})
		if err != nil {
			t.Fatal(err)
		}
		return e.ID
	}
	mine, theirs := endpoint(ws), endpoint(otherWS)
	status, v := mg.do(http.MethodPost, "/music/generate", std,
		`{"model":"song","prompt":"x","duration":3,"webhook":{"endpoint_id":"`+mine+`","events":["music.completed","music.failed"]}}`)
	if status != 200 {
		t.Fatalf("%d %v", status, v)
	}
	j, err := mg.s.GetJob(context.Background(), ws, v["id"].(string))
	if err != nil {
		t.Fatal(err)
	}
	var cfg jobs.WebhookConfig
	if err := json.Unmarshal(j.Webhook, &cfg); err != nil || cfg.EndpointID != mine || len(cfg.Events) != 2 || cfg.Events[0] != "music.completed" {
		t.Fatalf("webhook %s (%v)", j.Webhook, err)
	}
	if ev := jobs.WebhookEvents(zap.NewNop(), nil)(j, "completed"); len(ev) != 1 || ev[0].Type != "music.completed" || ev[0].Target != mine {
		t.Fatalf("events %+v", ev)
	}
	for _, tc := range []struct{ name, hook, param string }{
		{"another workspace's endpoint", `{"endpoint_id":"` + theirs + `"}`, "webhook.endpoint_id"},
		{"another kind's events", `{"endpoint_id":"` + mine + `","events":["video.completed"]}`, "webhook.events"},
		{"unknown phase", `{"endpoint_id":"` + mine + `","events":["music.done"]}`, "webhook.events"},
		{"unknown field", `{"endpoint_id":"` + mine + `","url":"https://x"}`, "webhook"},
	} {
		status, v := mg.do(http.MethodPost, "/music/generate", std, `{"model":"song","prompt":"x","webhook":`+tc.hook+`}`)
		wantError(t, tc.name, status, v, 400, CodeValidation, tc.param)
	}
}

// TestMusicOff: without a jobs engine or a blob store, music is refused before anything is
// held, saying what is missing.
func TestMusicOff(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(g *Gateway)
		want  string
	}{
		{"no blob store", func(g *Gateway) { g.Jobs = &jobs.Engine{Store: g.Store, Logger: zap.NewNop()} }, "blob_store"},
		{"no jobs engine", func(g *Gateway) {}, "jobs engine"},
	} {
		a := newAdminGateway(t, nil, tc.setup)
		_, std, _ := a.workspace(10 * usdNanos)
		status, v := a.do(http.MethodPost, "/music/generate", std, `{"model":"song","prompt":"x"}`)
		wantError(t, tc.name, status, v, 503, CodeNotConfigured, "")
		if !strings.Contains(v["message"].(string), tc.want) {
			t.Errorf("%s: %v", tc.name, v["message"])
		}
		status, v = a.do(http.MethodGet, "/music/generate/music_1/content", std, "")
		wantError(t, tc.name+": content", status, v, 503, CodeNotConfigured, "")
	}
}

// refusingTasks is an upstream with music tasks that refuses every task it is asked for.
type refusingTasks struct{}

func (refusingTasks) Name() string                                    { return "tasks" }
func (refusingTasks) PlanMusic(*providers.MusicRequest) (bool, error) { return true, nil }
func (refusingTasks) GenerateMusic(context.Context, *providers.MusicRequest) (*providers.MusicStatus, error) {
	return nil, &providers.UpstreamError{Provider: "tasks", Status: 400, Code: "bad_prompt", Message: "the prompt is refused", Category: providers.CategoryInvalidRequest}
}
func (refusingTasks) PollMusic(context.Context, string, string) (*providers.MusicStatus, error) {
	return nil, errors.New("no task")
}

// TestMusicTaskRefusedAtCreate: an upstream with tasks is asked as the job is created; its
// refusal answers the request, and the hold taken for it is released.
func TestMusicTaskRefusedAtCreate(t *testing.T) {
	a := newAdminGateway(t, []*Model{{Name: "tasks", Routes: []Route{{ProviderName: "tasks", Provider: refusingTasks{}, UpstreamModel: "t1",
		Price: pricing.Price{OutputAudioSeconds: musicSecond}}}}}, func(g *Gateway) {
		g.Blobs, _ = blobs.NewFS(t.TempDir())
		g.Jobs = &jobs.Engine{Store: g.Store, Logger: zap.NewNop()}
	})
	ws, std, _ := a.workspace(10 * usdNanos)
	status, v := a.do(http.MethodPost, "/music/generate", std, `{"model":"tasks","prompt":"x","duration":30}`)
	wantError(t, "refused task", status, v, 400, "bad_prompt", "")
	if b, err := a.s.GetBalance(context.Background(), ws); err != nil || b.BalanceNanos != 10*usdNanos || b.ReservedNanos != 0 {
		t.Fatalf("wallet %+v, %v; want untouched", b, err)
	}
	if listed, err := a.s.ListJobs(context.Background(), store.JobQuery{WorkspaceID: ws, Page: store.Page{Limit: 10}}); err != nil || len(listed) != 0 {
		t.Fatalf("jobs %v, %v; want none", listed, err)
	}
}
