package mock

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/audioprobe"
	"github.com/modelgateway/caddy-modelgateway/providers"
)

// readMusic reads a completed status's audio, checks its announced size and measures it.
func readMusic(t *testing.T, st *providers.MusicStatus) ([]byte, time.Duration) {
	t.Helper()
	if st.Status != providers.JobCompleted || st.Audio == nil {
		t.Fatalf("status %+v, want completed with audio", st)
	}
	b, err := io.ReadAll(st.Audio)
	_ = st.Audio.Close()
	if err != nil || int64(len(b)) != st.Size {
		t.Fatalf("audio of %d bytes (%v), announced %d", len(b), err, st.Size)
	}
	d, _, err := audioprobe.Duration(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the audio does not measure: %v", err)
	}
	if d != st.Duration {
		t.Errorf("measured %v, the mock says %v", d, st.Duration)
	}
	return b, d
}

// TestMockMusicSync: mock-music answers at once with audio of the length asked, the same
// bytes for the same request, in the format asked.
func TestMockMusicSync(t *testing.T) {
	p := New(Config{Chunks: 4})
	for _, tc := range []struct {
		format, wantType string
		length           time.Duration
	}{
		{"wav", "audio/wav", 7 * time.Second},
		{"", "audio/mpeg", 0},
		{"mp3", "audio/mpeg", 3 * time.Second},
	} {
		req := &providers.MusicRequest{Model: "mock-music", Prompt: "a tune", Duration: tc.length, Format: tc.format}
		if async, err := p.PlanMusic(req); async || err != nil {
			t.Fatalf("plan %v %v", async, err)
		}
		st, err := p.GenerateMusic(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		a, d := readMusic(t, st)
		want := tc.length
		if want == 0 {
			want = MusicDefaultLength
		}
		// MP3 frames hold 24 ms: the song is the length asked, in whole frames.
		if d > want || d < want-24*time.Millisecond || st.ContentType != tc.wantType {
			t.Errorf("%s: %v of %s, want %v of %s", tc.format, d, st.ContentType, want, tc.wantType)
		}
		st2, _ := p.GenerateMusic(context.Background(), req)
		if b, _ := readMusic(t, st2); sha256.Sum256(a) != sha256.Sum256(b) {
			t.Errorf("%s: two answers to one request differ", tc.format)
		}
	}
	_, err := p.GenerateMusic(context.Background(), &providers.MusicRequest{Model: "mock-music", Prompt: "please mock:fail"})
	if ue, ok := providers.AsUpstreamError(err); !ok || ue.Category != providers.CategoryInvalidRequest || ue.Retryable {
		t.Errorf("fail trigger: %v", err)
	}
	for _, f := range []string{"ogg", "aac"} {
		if _, err := p.PlanMusic(&providers.MusicRequest{Model: "mock-music", Format: f}); !errors.Is(err, errUnsupportedMusic) {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestMockMusicAsync: mock-music-async answers a task, in progress for MusicPolls-1 polls,
// then completed with its audio; a task asked to fail ends failed; an unknown task is 404.
func TestMockMusicAsync(t *testing.T) {
	p := New(Config{})
	req := &providers.MusicRequest{Model: "mock-music-async", Prompt: "a tune", Duration: 4 * time.Second, Format: "wav"}
	if async, err := p.PlanMusic(req); !async || err != nil {
		t.Fatalf("plan %v %v", async, err)
	}
	st, err := p.GenerateMusic(context.Background(), req)
	if err != nil || st.Status != providers.JobQueued || st.NativeID == "" || st.Audio != nil {
		t.Fatalf("created %+v, %v", st, err)
	}
	other, _ := p.GenerateMusic(context.Background(), req)
	if other.NativeID == st.NativeID {
		t.Fatal("two tasks share an id")
	}
	for i := 1; i < MusicPolls; i++ {
		ps, err := p.PollMusic(context.Background(), req.Model, st.NativeID)
		if err != nil || ps.Status != providers.JobInProgress || ps.Progress != 100*i/MusicPolls {
			t.Fatalf("poll %d: %+v, %v", i, ps, err)
		}
	}
	ps, err := p.PollMusic(context.Background(), req.Model, st.NativeID)
	if err != nil {
		t.Fatal(err)
	}
	if _, d := readMusic(t, ps); d != 4*time.Second {
		t.Errorf("measured %v, want 4s", d)
	}

	failing, _ := p.GenerateMusic(context.Background(), &providers.MusicRequest{Model: "mock-music-async", Prompt: "mock:fail"})
	for i := 0; i < MusicPolls; i++ {
		ps, err = p.PollMusic(context.Background(), req.Model, failing.NativeID)
	}
	if err != nil || ps.Status != providers.JobFailed || ps.ErrorCode != "mock_failure" {
		t.Errorf("failing task: %+v, %v", ps, err)
	}
	if _, err := p.PollMusic(context.Background(), req.Model, "song_nope"); err == nil {
		t.Error("an unknown task was polled")
	}
}
