//go:build unix

package module

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/audiogen"
	"github.com/modelgateway/caddy-modelgateway/jobs"
	"github.com/modelgateway/caddy-modelgateway/jobs/music"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/mock"
)

// fakeElevenLabsMusic speaks ElevenLabs' POST /v1/music: it checks the request, answers an
// MP3 of the length asked (whole MPEG frames, none beyond it) with a song-id, streamed in
// pieces, or ElevenLabs' error for a prompt containing "refuse".
type fakeElevenLabsMusic struct {
	*httptest.Server
	calls atomic.Int64
	bad   atomic.Value // a request the fake did not expect, as an error

	mu sync.Mutex
	// last is the last song answered.
	last []byte
}

func (f *fakeElevenLabsMusic) lastSong() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

func newFakeElevenLabsMusic(t *testing.T) *fakeElevenLabsMusic {
	f := &fakeElevenLabsMusic{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := f.calls.Add(1)
		var body struct {
			Prompt            string `json:"prompt"`
			MusicLengthMs     int64  `json:"music_length_ms"`
			ModelID           string `json:"model_id"`
			ForceInstrumental bool   `json:"force_instrumental"`
		}
		err := json.NewDecoder(r.Body).Decode(&body)
		if err != nil || r.Method != http.MethodPost || r.URL.Path != "/v1/music" || r.URL.RawQuery != "output_format=mp3_44100_128" ||
			r.Header.Get("xi-api-key") != "xi-music-secret" || body.ModelID != "music_v1" || !body.ForceInstrumental || body.MusicLengthMs <= 0 {
			f.bad.Store(fmt.Errorf("unexpected request %s %s?%s %+v (%v)", r.Method, r.URL.Path, r.URL.RawQuery, body, err))
			http.Error(w, "unexpected", http.StatusTeapot)
			return
		}
		if strings.Contains(body.Prompt, "refuse") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"detail":{"status":"bad_prompt","message":"The prompt names a copyrighted work"}}`))
			return
		}
		song := audiogen.MP3(int(body.MusicLengthMs*44100/1152/1000), -1).Data
		f.mu.Lock()
		f.last = song
		f.mu.Unlock()
		w.Header().Set("Content-Type", "audio/mpeg")
		w.Header().Set("song-id", fmt.Sprintf("song_%d", n))
		for i := 0; i < len(song); i += 16 << 10 {
			_, _ = w.Write(song[i:min(i+16<<10, len(song))])
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(f.Close)
	return f
}

// musicGateway is the gateway block of the music tests: the mock's two shapes and an
// ElevenLabs route, each at 0.01 USD a second, audio kept for retention.
func musicGatewayBlock(elevenLabsURL, blobStore string, retention time.Duration) string {
	return fmt.Sprintf(`
		music_retention %s
		%s
		provider mockup {
			type mock
		}
		provider el {
			type elevenlabs
			base_url %s
			api_key xi-music-secret
			retries 0
		}
		model song {
			route mockup mock-music {
				output_audio_seconds 0.01
			}
		}
		model song-async {
			route mockup mock-music-async {
				output_audio_seconds 0.01
			}
		}
		model el-song {
			route el music_v1 {
				output_audio_seconds 0.01
			}
		}`, retention, blobStore, elevenLabsURL)
}

const centPerSecond = usd / 100

// musicAPI drives the music routes of a gateway for one workspace.
type musicAPI struct {
	env *gatewayEnv
	key string
}

func (m musicAPI) create(body string) map[string]any {
	m.env.t.Helper()
	status, h, data := m.env.post(m.key, "/music/generate", body)
	var v map[string]any
	_ = json.Unmarshal(data, &v)
	if status != 200 || v["status"] != "queued" || h.Get("openai-poll-after-ms") == "" {
		m.env.t.Fatalf("create %s: %d %s", body, status, data)
	}
	return v
}

// poll polls music id until it ends.
func (m musicAPI) poll(id string) map[string]any {
	m.env.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, data := m.env.get(m.key, "/music/generate/"+id)
		var v map[string]any
		_ = json.Unmarshal(data, &v)
		if status != 200 {
			m.env.t.Fatalf("poll %s: %d %s", id, status, data)
		}
		if v["status"] == "completed" || v["status"] == "failed" {
			return v
		}
		if time.Now().After(deadline) {
			m.env.t.Fatalf("music %s did not end: %s", id, data)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// content reads the audio at the music object's audio_url.
func (m musicAPI) content(url string) (int, []byte) {
	m.env.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+m.key)
	resp, err := doRetryingDial(req)
	if err != nil {
		m.env.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// mockSong is the audio the mock makes for a request, in either shape, made here the same
// way.
func mockSong(t *testing.T, format string, seconds int) []byte {
	t.Helper()
	st, err := mock.New(mock.Config{}).GenerateMusic(context.Background(), &providers.MusicRequest{
		Model: "mock-music", Prompt: "x", Duration: time.Duration(seconds) * time.Second, Format: format})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(st.Audio)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func checksum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestMusicEndToEnd runs songs of the mock's synchronous and async shapes and of an
// ElevenLabs upstream through the gateway, with the audio in each blob store backend: made
// by the jobs worker, kept byte for byte, read back through audio_url, charged exactly their
// seconds at the route's price once; a refused song leaves the wallet as it was; another
// workspace sees none of it; the audio is removed once its retention has run out.
func TestMusicEndToEnd(t *testing.T) {
	prev := musicSweepEvery.Load()
	musicSweepEvery.Store(int64(100 * time.Millisecond))
	t.Cleanup(func() { musicSweepEvery.Store(prev) })

	backend, s3 := startFakeS3(t, "music")

	for _, bc := range []struct {
		name      string
		blobStore string
		// exists tells whether the blob store holds key, in dir (the data directory).
		exists func(t *testing.T, dir, key string) bool
	}{
		{name: "file", exists: func(t *testing.T, dir, key string) bool {
			_, err := os.Stat(filepath.Join(dir, "data", "caddy", "model_gateway", "blobs", filepath.FromSlash(key)))
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			return err == nil
		}},
		{name: "s3", blobStore: `blob_store s3 {
			endpoint ` + strings.TrimPrefix(s3.URL, "http://") + `
			bucket music
			region us-east-1
			access_key_id music-key
			secret_access_key music-secret
			use_tls off
			path_style on
		}`, exists: func(t *testing.T, _, key string) bool {
			_, err := backend.HeadObject("music", key)
			return err == nil
		}},
	} {
		t.Run(bc.name, func(t *testing.T) {
			el := newFakeElevenLabsMusic(t)
			dir := t.TempDir()
			env := startGatewayIn(t, dir, musicGatewayBlock(el.URL, bc.blobStore, 3*time.Second), "")
			ws, key := env.workspace(10 * usd)
			api := musicAPI{env, key}
			_, otherKey := env.workspace(10 * usd)
			other := musicAPI{env, otherKey}

			var ended []map[string]any
			charged := int64(0)
			for _, tc := range []struct {
				model, format string
				seconds       int
				upstream      func() []byte
			}{
				{"song", "wav", 4, func() []byte { return mockSong(t, "wav", 4) }},
				{"song-async", "mp3", 3, func() []byte { return mockSong(t, "mp3", 3) }},
				{"el-song", "mp3", 5, nil},
			} {
				before := env.balance(ws)
				v := api.create(fmt.Sprintf(`{"model":%q,"prompt":"a calm tune","duration":%d,"format":%q,"instrumental":true}`, tc.model, tc.seconds, tc.format))
				id := v["id"].(string)
				if b := env.balance(ws); b.ReservedNanos != int64(tc.seconds)*centPerSecond {
					t.Fatalf("%s: held %d, want %d", tc.model, b.ReservedNanos, int64(tc.seconds)*centPerSecond)
				}
				done := api.poll(id)
				out, _ := done["output"].([]any)
				if done["status"] != "completed" || len(out) != 1 {
					t.Fatalf("%s: %v", tc.model, done)
				}
				o := out[0].(map[string]any)
				status, audio := api.content(o["audio_url"].(string))
				if status != 200 || checksum(audio) != o["sha256"] || float64(len(audio)) != o["bytes"] {
					t.Fatalf("%s: content %d, %d bytes, sha256 %s; output %v", tc.model, status, len(audio), checksum(audio), o)
				}
				want := el.lastSong()
				if tc.upstream != nil {
					want = tc.upstream()
				}
				if checksum(audio) != checksum(want) {
					t.Fatalf("%s: the audio (%d bytes) is not the upstream's (%d bytes)", tc.model, len(audio), len(want))
				}
				cost := int64(tc.seconds) * centPerSecond
				charged += cost
				if b := env.balance(ws); b.BalanceNanos != before.BalanceNanos-cost || b.ReservedNanos != 0 {
					t.Fatalf("%s: wallet %+v, want %d charged from %+v", tc.model, b, cost, before)
				}
				g := env.generation(ws, jobs.GenerationID(id))
				if g.CostNanos != cost || g.Model != tc.model || len(g.CostLines) != 1 || g.CostLines[0].Quantity != int64(tc.seconds) {
					t.Fatalf("%s: generation %+v", tc.model, g)
				}
				if !bc.exists(t, dir, music.BlobKey(ws, id, tc.format)) {
					t.Fatalf("%s: the audio is not in the %s blob store", tc.model, bc.name)
				}
				if status, _ := other.env.get(otherKey, "/music/generate/"+id); status != 404 {
					t.Fatalf("%s: another workspace polled it: %d", tc.model, status)
				}
				if status, _ := other.content(o["audio_url"].(string)); status != 404 {
					t.Fatalf("%s: another workspace read its audio: %d", tc.model, status)
				}
				ended = append(ended, done)
			}
			if b := env.balance(ws); b.BalanceNanos != 10*usd-charged {
				t.Fatalf("wallet %+v, want %d charged in all", b, charged)
			}

			// Refused songs end failed and charge nothing.
			for _, body := range []string{
				`{"model":"el-song","prompt":"refuse this","duration":5,"instrumental":true}`,
				`{"model":"song-async","prompt":"mock:fail","duration":5}`,
			} {
				before := env.balance(ws)
				done := api.poll(api.create(body)["id"].(string))
				if done["status"] != "failed" || done["error"] == nil {
					t.Fatalf("%s: %v", body, done)
				}
				if b := env.balance(ws); b != before {
					t.Fatalf("%s: wallet %+v, was %+v", body, b, before)
				}
			}
			if err, _ := el.bad.Load().(error); err != nil {
				t.Fatal(err)
			}

			// Past the retention, the sweep removes the audio, and the job shows it expired.
			for _, done := range ended {
				id := done["id"].(string)
				format := done["format"].(string)
				waitFor(t, "the audio of "+id+" removed", func() bool { return !bc.exists(t, dir, music.BlobKey(ws, id, format)) })
				status, data := env.get(key, "/music/generate/"+id)
				var v map[string]any
				_ = json.Unmarshal(data, &v)
				if status != 200 || v["status"] != "completed" || v["lifecycle_status"] != "expired" || len(v["output"].([]any)) != 0 {
					t.Fatalf("expired %s: %d %s", id, status, data)
				}
				url := done["output"].([]any)[0].(map[string]any)["audio_url"].(string)
				if status, _ := api.content(url); status != 404 {
					t.Fatalf("the expired audio of %s answered %d", id, status)
				}
			}
		})
	}
}
