package elevenlabs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// TestElevenLabsGenerateMusic: the request is POST /v1/music with the format's
// output_format, the key in xi-api-key and the JSON body; the answer is a completed status
// whose Audio is the upstream's bytes, streamed, and whose NativeID is the song-id header.
func TestElevenLabsGenerateMusic(t *testing.T) {
	song := audioOf(300_000)
	tests := []struct {
		name, format, wantOutput, wantType string
		duration                           time.Duration
		instrumental                       bool
		model, wantModel                   string
	}{
		{name: "default mp3", wantOutput: "mp3_44100_128", wantType: "audio/mpeg", duration: 30 * time.Second, wantModel: "music_v1"},
		{name: "ogg instrumental", format: "ogg", wantOutput: "opus_48000_128", wantType: "audio/ogg", instrumental: true, model: "music_v2", wantModel: "music_v2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got struct {
				method, path, query, key string
				body                     map[string]any
			}
			release := make(chan struct{})
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
				got.method, got.path, got.query, got.key = r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("xi-api-key")
				_ = json.NewDecoder(r.Body).Decode(&got.body)
				w.Header().Set("Content-Type", tc.wantType)
				w.Header().Set("song-id", "song_123")
				// Half the song, then the rest once the test has the status: the status
				// must come back before the audio ends.
				_, _ = w.Write(song[:len(song)/2])
				w.(http.Flusher).Flush()
				<-release
				_, _ = w.Write(song[len(song)/2:])
			})
			st, err := f.provider(t).GenerateMusic(context.Background(), &providers.MusicRequest{
				Model: tc.model, Prompt: "lo-fi beat", Duration: tc.duration, Format: tc.format, Instrumental: tc.instrumental,
			})
			close(release)
			if err != nil {
				t.Fatal(err)
			}
			audio, err := io.ReadAll(st.Audio)
			_ = st.Audio.Close()
			if err != nil || !bytes.Equal(audio, song) {
				t.Fatalf("audio %d bytes (%v), want the upstream's %d", len(audio), err, len(song))
			}
			if st.Status != providers.JobCompleted || st.NativeID != "song_123" || st.ContentType != tc.wantType || st.Size != -1 {
				t.Errorf("status %+v", st)
			}
			if got.method != http.MethodPost || got.path != "/v1/music" || got.query != "output_format="+tc.wantOutput || got.key != testKey {
				t.Errorf("request %s %s?%s key %q", got.method, got.path, got.query, got.key)
			}
			want := map[string]any{"prompt": "lo-fi beat", "model_id": tc.wantModel, "force_instrumental": tc.instrumental}
			if tc.duration > 0 {
				want["music_length_ms"] = float64(tc.duration.Milliseconds())
			}
			if len(got.body) != len(want) {
				t.Errorf("body %v, want %v", got.body, want)
			}
			for k, v := range want {
				if got.body[k] != v {
					t.Errorf("body %s = %v, want %v", k, got.body[k], v)
				}
			}
		})
	}
}

// TestElevenLabsMusicErrors: ElevenLabs' errors come back classified; what it cannot make is
// refused before any call; there is no task to poll.
func TestElevenLabsMusicErrors(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		body      string
		category  providers.Category
		retryable bool
		code      string
	}{
		{name: "quota", status: 401, body: `{"detail":{"status":"quota_exceeded","message":"This request exceeds your quota"}}`, category: providers.CategoryAccessMissing, code: "quota_exceeded"},
		{name: "bad prompt", status: 400, body: `{"detail":{"status":"bad_prompt","message":"The prompt names a copyrighted artist"}}`, category: providers.CategoryInvalidRequest, code: "bad_prompt"},
		{name: "busy", status: 429, body: `{"detail":{"status":"system_busy","message":"try later"}}`, category: providers.CategoryRateLimited, retryable: true, code: "system_busy"},
		{name: "server", status: 503, body: `{"detail":{"status":"unavailable","message":"down"}}`, category: providers.CategoryServerError, retryable: true, code: "unavailable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) { writeError(w, tc.status, tc.body) })
			_, err := f.provider(t).GenerateMusic(context.Background(), &providers.MusicRequest{Prompt: "x"})
			ue, ok := providers.AsUpstreamError(err)
			if !ok || ue.Category != tc.category || ue.Retryable != tc.retryable || ue.Code != tc.code || ue.Status != tc.status {
				t.Fatalf("error %#v", err)
			}
		})
	}

	f := newFake(t, func(w http.ResponseWriter, r *http.Request) { t.Error("an unsupported request reached the upstream") })
	p := f.provider(t)
	for _, req := range []providers.MusicRequest{{Format: "wav"}, {Format: "aac"}, {Duration: time.Second}, {Duration: 11 * time.Minute}} {
		if _, err := p.PlanMusic(&req); !errors.Is(err, ErrUnsupportedRequest) {
			t.Errorf("plan %+v: %v", req, err)
		}
		if _, err := p.GenerateMusic(context.Background(), &req); !errors.Is(err, ErrUnsupportedRequest) {
			t.Errorf("generate %+v: %v", req, err)
		}
	}
	if async, err := p.PlanMusic(&providers.MusicRequest{Format: "mp3", Duration: time.Minute}); async || err != nil {
		t.Errorf("plan: async %v, %v; want synchronous", async, err)
	}
	if _, err := p.PollMusic(context.Background(), "music_v1", "song_123"); !errors.Is(err, ErrUnsupportedRequest) {
		t.Errorf("poll: %v", err)
	}
}
