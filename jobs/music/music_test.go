package music

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/blobs"
	"github.com/modelgateway/caddy-modelgateway/internal/audiogen"
	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/jobs"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/sqlite"
)

// scripted is a music upstream that answers GenerateMusic with its audio or its error,
// counting its calls.
type scripted struct {
	audio       []byte
	contentType string
	said        time.Duration
	err         error
	calls       int
}

func (s *scripted) Name() string { return "scripted" }

func (s *scripted) GenerateMusic(context.Context, *providers.MusicRequest) (*providers.MusicStatus, error) {
	s.calls++
	if s.err != nil {
		return nil, s.err
	}
	return &providers.MusicStatus{Status: providers.JobCompleted, Audio: io.NopCloser(bytes.NewReader(s.audio)), Size: -1,
		ContentType: s.contentType, Duration: s.said}, nil
}

func (s *scripted) PollMusic(context.Context, string, string) (*providers.MusicStatus, error) {
	return nil, errors.New("no task")
}

func env(b blobs.Store, up providers.Provider) jobs.Env {
	return jobs.Env{Blobs: b, Route: func(j store.Job) (jobs.Route, bool) {
		return jobs.Route{Upstream: up}, j.Provider == "up" && j.UpstreamModel == "m"
	}}
}

func job(t *testing.T, req Request, status string) store.Job {
	t.Helper()
	raw, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return store.Job{ID: ids.New("music"), WorkspaceID: "ws_1", Kind: store.JobMusic, Provider: "up", UpstreamModel: "m",
		Status: status, Request: raw}
}

func newBlobs(t *testing.T) blobs.Store {
	t.Helper()
	b, err := blobs.NewFS(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wavOf is a WAV of d of noise at 8 kHz, as a synchronous upstream answers it.
func wavOf(d time.Duration) []byte {
	n := int(d * 8000 / time.Second)
	return audiogen.WAV(8000, 0, [][]int16{audiogen.PCM(n, 1)})
}

// TestPollSynchronous: the first poll marks the job in progress without a call; the next
// makes the song, keeps it whole in the blob store, measures it and charges its seconds,
// at most those held for. A poll after the audio was kept does not make it again.
func TestPollSynchronous(t *testing.T) {
	b := newBlobs(t)
	audio := wavOf(5 * time.Second)
	up := &scripted{audio: audio, contentType: "audio/wav", said: time.Hour}
	for _, tc := range []struct {
		name       string
		maxSeconds int
		billed     time.Duration
	}{
		{"measured", 300, 5 * time.Second},
		{"capped at the hold", 4, 4 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := job(t, Request{Prompt: "x", Format: "wav", MaxSeconds: tc.maxSeconds, RetentionSeconds: 60}, jobs.StatusQueued)
			calls := up.calls
			rep, err := Kind{}.Poll(context.Background(), env(b, up), j)
			if err != nil || rep.Status != jobs.StatusInProgress || up.calls != calls {
				t.Fatalf("first poll %+v, %v (calls %d)", rep, err, up.calls-calls)
			}
			if (Kind{}).PollTimeout(j) != 0 {
				t.Error("a queued job's poll asks for a long bound")
			}
			j.Status = jobs.StatusInProgress
			if (Kind{}).PollTimeout(j) != CallTimeout {
				t.Error("the call's poll does not ask for a long bound")
			}
			rep, err = Kind{}.Poll(context.Background(), env(b, up), j)
			if err != nil || rep.Status != jobs.StatusCompleted || rep.Usage.OutputAudio != tc.billed {
				t.Fatalf("poll %+v, %v; want completed, %v billed", rep, err, tc.billed)
			}
			var res Result
			if err := json.Unmarshal(rep.Result, &res); err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(audio)
			if res.BlobKey != BlobKey("ws_1", j.ID, "wav") || res.Bytes != int64(len(audio)) || res.SHA256 != hex.EncodeToString(sum[:]) ||
				res.ContentType != "audio/wav" || res.DurationMs != 5000 || time.Until(res.ExpiresAt) > time.Minute || time.Until(res.ExpiresAt) < 58*time.Second {
				t.Fatalf("result %+v", res)
			}
			rc, _, err := b.Open(context.Background(), res.BlobKey, 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			kept, _ := io.ReadAll(rc)
			_ = rc.Close()
			if !bytes.Equal(kept, audio) {
				t.Fatal("the kept audio differs from the upstream's")
			}
			calls = up.calls
			again, err := Kind{}.Poll(context.Background(), env(b, up), j)
			if err != nil || up.calls != calls || again.Status != jobs.StatusCompleted || again.Usage != rep.Usage {
				t.Fatalf("poll after keeping: %+v, %v, %d calls", again, err, up.calls-calls)
			}
		})
	}
}

// TestPollFailures: a retryable upstream error is the poll's (the engine retries it), a
// permanent one ends the job, and so does a missing blob store; an unmeasurable audio is
// charged what the upstream said it lasts.
func TestPollFailures(t *testing.T) {
	b := newBlobs(t)
	j := job(t, Request{Prompt: "x", Format: "mp3", MaxSeconds: 300}, jobs.StatusInProgress)
	var fail *jobs.Failure
	busy := &scripted{err: &providers.UpstreamError{Provider: "up", Status: 429, Category: providers.CategoryRateLimited, Retryable: true}}
	if _, err := (Kind{}).Poll(context.Background(), env(b, busy), j); err == nil || errors.As(err, &fail) {
		t.Fatalf("retryable: %v", err)
	}
	refused := &scripted{err: &providers.UpstreamError{Provider: "up", Status: 400, Code: "bad_prompt", Message: "no", Category: providers.CategoryInvalidRequest}}
	if _, err := (Kind{}).Poll(context.Background(), env(b, refused), j); !errors.As(err, &fail) || fail.Code != "bad_prompt" {
		t.Fatalf("permanent: %v", err)
	}
	if _, err := (Kind{}).Poll(context.Background(), env(nil, refused), j); !errors.As(err, &fail) || fail.Code != "blob_store_not_configured" {
		t.Fatalf("no blob store: %v", err)
	}
	noise := &scripted{audio: []byte("not audio at all"), contentType: "audio/mpeg", said: 2500 * time.Millisecond}
	rep, err := (Kind{}).Poll(context.Background(), env(b, noise), j)
	if err != nil || rep.Usage.OutputAudio != 2500*time.Millisecond {
		t.Fatalf("unmeasured: %+v, %v", rep, err)
	}
}

// TestSweep: the audio of a completed job is removed once its retention ran out and not
// before (its item put back until then); an item whose job never came is dropped.
func TestSweep(t *testing.T) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: "ws_1", Name: "w"}); err != nil {
		t.Fatal(err)
	}
	b := newBlobs(t)
	now := time.Now()
	put := func(expires time.Time) store.Job {
		j := job(t, Request{Prompt: "x", Format: "mp3", RetentionSeconds: 60}, jobs.StatusCompleted)
		j.ExpiresAt, j.CompletedAt = now.Add(time.Hour), now
		info, err := b.Put(ctx, BlobKey(j.WorkspaceID, j.ID, "mp3"), bytes.NewReader([]byte("song")), 4, "audio/mpeg")
		if err != nil {
			t.Fatal(err)
		}
		j.Result, _ = json.Marshal(Result{BlobKey: info.Key, Bytes: 4, ExpiresAt: expires})
		if err := s.CreateJob(ctx, j, now.Add(time.Hour), nil); err != nil {
			t.Fatal(err)
		}
		if err := ScheduleExpiry(ctx, s, j, 0, now); err != nil {
			t.Fatal(err)
		}
		return j
	}
	old, fresh := put(now.Add(-time.Second)), put(now.Add(time.Hour))
	ghost := store.Job{ID: "music_ghost", WorkspaceID: "ws_1", Kind: store.JobMusic}
	if err := ScheduleExpiry(ctx, s, ghost, 0, now); err != nil {
		t.Fatal(err)
	}
	var logged []error
	removed, err := Sweep(ctx, s, b, "test", now.Add(time.Millisecond), func(_ string, err error) { logged = append(logged, err) })
	if err != nil || removed != 2 || len(logged) != 0 {
		t.Fatalf("sweep removed %d, %v, logged %v", removed, err, logged)
	}
	if _, err := b.Stat(ctx, BlobKey("ws_1", old.ID, "mp3")); !errors.Is(err, blobs.ErrNotFound) {
		t.Fatalf("expired audio: %v", err)
	}
	if _, err := b.Stat(ctx, BlobKey("ws_1", fresh.ID, "mp3")); err != nil {
		t.Fatalf("audio not yet expired: %v", err)
	}
	// The fresh job's item waits for its expiry: nothing is due before.
	if removed, _ := Sweep(ctx, s, b, "test", now.Add(time.Millisecond), nil); removed != 0 {
		t.Fatalf("swept %d before their time", removed)
	}
	if err := s.Reschedule(ctx, ExpiryQueue, fresh.ID, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if removed, _ := Sweep(ctx, s, b, "test", now.Add(2*time.Hour), nil); removed != 1 {
		t.Fatalf("swept %d at its expiry", removed)
	}
	if _, err := b.Stat(ctx, BlobKey("ws_1", fresh.ID, "mp3")); !errors.Is(err, blobs.ErrNotFound) {
		t.Fatalf("audio at its expiry: %v", err)
	}
}
