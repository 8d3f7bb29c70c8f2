// Package music is the music job family's work beyond HTTP: the jobs.Kind that makes a song
// upstream and keeps its audio in the blob store, and the sweep that removes the audio of
// jobs whose retention ran out. handlers/music.go serves the routes; module runs the sweep
// as a worker.
//
// A music job runs in one of two shapes, as its route's adapter says (providers.MusicPlanner):
//
//   - synchronous (ElevenLabs, the mock's mock-music): nothing is called as the job is
//     created; its first poll marks it in progress, the next calls GenerateMusic, which
//     answers with the audio, and keeps it. The call is made in the worker, never in the
//     client's request.
//   - a task (the mock's mock-music-async): GenerateMusic is called as the job is created
//     and names the task (the job's NativeID); each poll asks PollMusic where it stands,
//     and the one that finds it completed keeps its audio.
//
// The audio is streamed into the blob store under BlobKey (never held whole), measured on
// the way (internal/audioprobe; else the length the upstream says; else the length asked),
// and the job is charged for that many started seconds of output audio, at most the
// seconds it held for.
package music

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/modelgateway/caddy-modelgateway/blobs"
	"github.com/modelgateway/caddy-modelgateway/internal/audioprobe"
	"github.com/modelgateway/caddy-modelgateway/internal/background"
	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/jobs"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/store"
)

func init() { jobs.Register(store.JobMusic, Kind{}) }

// DefaultRetention is how long the audio of a completed job is kept when the operator sets
// no retention.
const DefaultRetention = 7 * 24 * time.Hour

// Formats are the music formats and their media types.
var Formats = map[string]string{"mp3": "audio/mpeg", "wav": "audio/wav", "ogg": "audio/ogg", "aac": "audio/aac"}

// Request is what a music job was asked: the job's stored request, which its polls read.
type Request struct {
	Prompt string `json:"prompt"`
	// Duration is the length asked, in seconds; 0 leaves it to the upstream.
	Duration     int    `json:"duration,omitempty"`
	Format       string `json:"format"`
	Instrumental bool   `json:"instrumental,omitempty"`
	// MaxSeconds is the most seconds of audio the job is charged for: what its hold holds.
	MaxSeconds int `json:"max_seconds"`
	// RetentionSeconds is how long the audio is kept once the job has completed.
	RetentionSeconds int64 `json:"retention_seconds"`
}

// Neutral is the request as the route's adapter is asked it.
func (r Request) Neutral(upstreamModel string) *providers.MusicRequest {
	return &providers.MusicRequest{
		Model: upstreamModel, Prompt: r.Prompt, Duration: time.Duration(r.Duration) * time.Second,
		Format: r.Format, Instrumental: r.Instrumental,
	}
}

// Retention is how long the job's audio is kept after it completed.
func (r Request) Retention() time.Duration {
	if r.RetentionSeconds <= 0 {
		return DefaultRetention
	}
	return time.Duration(r.RetentionSeconds) * time.Second
}

// Result is what a completed music job made: its stored result.
type Result struct {
	BlobKey     string `json:"blob_key"`
	Bytes       int64  `json:"bytes"`
	SHA256      string `json:"sha256"`
	ContentType string `json:"content_type"`
	// DurationMs is the audio's length as measured (or, when it could not be, as the
	// upstream said, else as asked).
	DurationMs int64 `json:"duration_ms"`
	// ExpiresAt is when the audio is removed.
	ExpiresAt time.Time `json:"expires_at"`
}

// ReadRequest and ReadResult read a job's stored request and result.
func ReadRequest(j store.Job) (Request, error) {
	var r Request
	if err := json.Unmarshal(j.Request, &r); err != nil {
		return r, fmt.Errorf("music job %s: its request does not read: %w", j.ID, err)
	}
	return r, nil
}

// ReadResult reads the result of a completed job; false when it has none.
func ReadResult(j store.Job) (Result, bool) {
	var r Result
	if len(j.Result) == 0 || json.Unmarshal(j.Result, &r) != nil || r.BlobKey == "" {
		return Result{}, false
	}
	return r, true
}

// BlobKey is where the audio of job id of workspace ws is kept, in format (its extension).
func BlobKey(ws, id, format string) string { return "music/" + ws + "/" + id + "." + format }

// Kind polls music jobs.
type Kind struct{}

// CallTimeout bounds the poll that makes a song synchronously and keeps it: the upstream's
// default bound of one attempt (a song of minutes can take one or more to make).
const CallTimeout = 10 * time.Minute

// PollTimeout lets the poll that calls a synchronous upstream run for CallTimeout
// (jobs.LongPoller); the other polls keep the engine's bound.
func (Kind) PollTimeout(j store.Job) time.Duration {
	if j.NativeID == "" && j.Status != jobs.StatusQueued {
		return CallTimeout
	}
	return 0
}

// Poll makes the job advance: see the package documentation for the two shapes.
func (Kind) Poll(ctx context.Context, env jobs.Env, j store.Job) (jobs.Report, error) {
	req, err := ReadRequest(j)
	if err != nil {
		return jobs.Report{}, &jobs.Failure{Code: "invalid_job", Message: err.Error()}
	}
	if env.Blobs == nil {
		return jobs.Report{}, &jobs.Failure{Code: "blob_store_not_configured",
			Message: "the gateway has no blob store to keep the audio in; nothing was charged"}
	}
	rt, ok := env.Route(j)
	if !ok {
		return jobs.Report{}, fmt.Errorf("route %s/%s is not in the gateway's configuration", j.Provider, j.UpstreamModel)
	}
	gen, ok := rt.Upstream.(providers.MusicGenerator)
	if !ok {
		return jobs.Report{}, &jobs.Failure{Code: "unsupported_model_or_endpoint",
			Message: fmt.Sprintf("provider %s no longer makes music", j.Provider)}
	}
	var st *providers.MusicStatus
	if j.NativeID == "" {
		if j.Status == jobs.StatusQueued {
			// The call may take minutes: the job shows in progress while it runs.
			return jobs.Report{Status: jobs.StatusInProgress, PollAfter: time.Nanosecond}, nil
		}
		// A poll that kept the audio but whose job was not ended (the store failed to
		// settle it) finds it kept: the song is not made, nor paid upstream, twice.
		if rep, ok := kept(ctx, env.Blobs, j, req); ok {
			return rep, nil
		}
		st, err = gen.GenerateMusic(ctx, req.Neutral(j.UpstreamModel))
	} else {
		st, err = gen.PollMusic(ctx, j.UpstreamModel, j.NativeID)
	}
	if err != nil {
		return jobs.Report{}, failure(err)
	}
	if st.Audio != nil && st.Status != providers.JobCompleted {
		_ = st.Audio.Close()
	}
	switch st.Status {
	case providers.JobQueued, providers.JobInProgress:
		return jobs.Report{Status: st.Status, Progress: st.Progress, PollAfter: st.PollAfter}, nil
	case providers.JobFailed:
		code := st.ErrorCode
		if code == "" {
			code = "upstream_error"
		}
		return jobs.Report{Status: jobs.StatusFailed, ErrorCode: code, ErrorMessage: st.ErrorMessage}, nil
	case providers.JobCompleted:
		if st.Audio == nil {
			return jobs.Report{}, &providers.UpstreamError{Provider: j.Provider, Category: providers.CategoryServerError, Retryable: true,
				Message: "the provider reported the song made but gave no audio"}
		}
		return keep(ctx, env.Blobs, j, req, st)
	}
	if st.Audio != nil {
		_ = st.Audio.Close()
	}
	return jobs.Report{}, fmt.Errorf("the provider reported music status %q", st.Status)
}

// failure is the error of a poll whose upstream call failed: retried by the engine when
// another try may succeed, else the job's end.
func failure(err error) error {
	ue, ok := providers.AsUpstreamError(err)
	if !ok || ue.Retryable {
		return err
	}
	code := ue.Code
	if code == "" {
		code = string(ue.Category)
	}
	msg := ue.Message
	if msg == "" {
		msg = ue.Error()
	}
	return &jobs.Failure{Code: code, Message: "provider " + ue.Provider + ": " + msg}
}

// keep streams the audio of st into the blob store, measuring it on the way, and reports
// the job completed with its usage and result.
func keep(ctx context.Context, b blobs.Store, j store.Job, req Request, st *providers.MusicStatus) (jobs.Report, error) {
	defer func() { _ = st.Audio.Close() }()
	format := formatOf(st.ContentType, req.Format)
	ct := st.ContentType
	if ct == "" {
		ct = Formats[format]
	}
	pr, pw := io.Pipe()
	measured := make(chan probe, 1)
	go func() {
		var p probe
		if panicked := background.Call("measuring music", func() { p.d, _, p.err = audioprobe.Duration(pr) }); panicked != nil {
			p.err = panicked
		}
		// Whatever the probe left unread is drained, so that the copy into the store never
		// waits on it.
		_, _ = io.Copy(io.Discard, pr)
		measured <- p
	}()
	info, err := b.Put(ctx, BlobKey(j.WorkspaceID, j.ID, format), io.TeeReader(st.Audio, pw), st.Size, ct)
	_ = pw.CloseWithError(err)
	p := <-measured
	if err != nil {
		if ue, ok := providers.AsUpstreamError(err); ok {
			// The audio broke off: retried, or the job's end.
			return jobs.Report{}, failure(ue)
		}
		return jobs.Report{}, fmt.Errorf("keeping the audio: %w", err)
	}
	return completed(j, req, info, length(p, st.Duration, req))
}

// kept reports the job completed from audio an earlier poll kept, when there is some.
func kept(ctx context.Context, b blobs.Store, j store.Job, req Request) (jobs.Report, bool) {
	for format := range Formats {
		info, err := b.Stat(ctx, BlobKey(j.WorkspaceID, j.ID, format))
		if err != nil || info.SHA256 == "" {
			continue
		}
		rc, _, err := b.Open(ctx, info.Key, 0, -1)
		if err != nil {
			return jobs.Report{}, false
		}
		var p probe
		p.d, _, p.err = audioprobe.Duration(rc)
		_ = rc.Close()
		rep, err := completed(j, req, info, length(p, 0, req))
		return rep, err == nil
	}
	return jobs.Report{}, false
}

type probe struct {
	d   time.Duration
	err error
}

// length is the audio's length: as measured, else as the upstream said, else as asked (or
// the most the job holds for).
func length(p probe, said time.Duration, req Request) time.Duration {
	switch {
	case p.err == nil && p.d > 0:
		return p.d
	case said > 0:
		return said
	case req.Duration > 0:
		return time.Duration(req.Duration) * time.Second
	}
	return time.Duration(req.MaxSeconds) * time.Second
}

// completed is the report of a job whose audio is kept as info and lasts d: charged its
// started seconds, at most the seconds it held for.
func completed(j store.Job, req Request, info blobs.Info, d time.Duration) (jobs.Report, error) {
	billed := d
	if req.MaxSeconds > 0 {
		billed = min(billed, time.Duration(req.MaxSeconds)*time.Second)
	}
	res := Result{BlobKey: info.Key, Bytes: info.Size, SHA256: info.SHA256, ContentType: info.ContentType,
		DurationMs: d.Milliseconds(), ExpiresAt: time.Now().Add(req.Retention()).UTC().Truncate(time.Second)}
	raw, err := json.Marshal(res)
	if err != nil {
		return jobs.Report{}, err
	}
	return jobs.Report{Status: jobs.StatusCompleted, Progress: 100, Usage: pricing.Usage{OutputAudio: billed}, Result: raw}, nil
}

// formatOf is the format of audio of media type ct, or asked when the type says none.
func formatOf(ct, asked string) string {
	mt, _, _ := strings.Cut(ct, ";")
	switch strings.TrimSpace(strings.ToLower(mt)) {
	case "audio/mpeg", "audio/mp3":
		return "mp3"
	case "audio/wav", "audio/x-wav", "audio/wave":
		return "wav"
	case "audio/ogg", "audio/opus":
		return "ogg"
	case "audio/aac":
		return "aac"
	}
	if _, ok := Formats[asked]; ok {
		return asked
	}
	return "mp3"
}

// Interface guards.
var _ jobs.LongPoller = Kind{}
