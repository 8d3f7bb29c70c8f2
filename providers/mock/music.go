package mock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/wav"
)

// Music of the mock. A model whose name ends in "-async" (mock-music-async) makes music as
// an upstream with tasks does: GenerateMusic answers a queued task, and PollMusic reports it
// in progress MusicPolls-1 times (asking to be polled again after MusicPollAfter), then
// completed with the audio. Any other model
// (mock-music) is synchronous: GenerateMusic answers the audio at once.
//
// The audio is the speech's 400 Hz tone as a WAV file, or silent MP3 frames (the default),
// of the length asked (in whole 24 ms frames for MP3, none beyond it) (MusicDefaultLength when none is), so that its length can be
// measured, and the same bytes for the same request. ogg and aac are refused before any
// call. A prompt containing "mock:fail" fails: at once with a 400 for the synchronous
// shape, as a failed task for the async one.
const (
	MusicPolls         = 3
	MusicPollAfter     = 100 * time.Millisecond
	MusicDefaultLength = 10 * time.Second
	musicFailTrigger   = "mock:fail"
	musicAsyncSuffix   = "-async"
	musicIDPrefix      = "mockmus"
)

// musicTasks counts the polls of the async shape's tasks, by native id.
type musicTasks struct {
	seq   atomic.Int64
	mu    sync.Mutex
	polls map[string]int
}

// PlanMusic tells the shape of the model and refuses the formats the mock does not make.
func (p *Provider) PlanMusic(req *providers.MusicRequest) (bool, error) {
	if _, err := p.musicFormat(req.Format); err != nil {
		return false, err
	}
	return strings.HasSuffix(req.Model, musicAsyncSuffix), nil
}

func (p *Provider) musicFormat(format string) (string, error) {
	switch format {
	case "", "mp3":
		return "mp3", nil
	case "wav":
		return "wav", nil
	}
	return "", providers.Unsupported(p.cfg.Name, "format", fmt.Sprintf("the mock makes music as mp3 or wav, not %q", format), errUnsupportedMusic)
}

var errUnsupportedMusic = errors.New("music format not made by the mock")

// GenerateMusic answers the audio (synchronous shape) or a queued task (async shape),
// after the latency.
func (p *Provider) GenerateMusic(ctx context.Context, req *providers.MusicRequest) (*providers.MusicStatus, error) {
	async, err := p.PlanMusic(req)
	if err != nil {
		return nil, err
	}
	format, _ := p.musicFormat(req.Format)
	length := req.Duration
	if length <= 0 {
		length = MusicDefaultLength
	}
	fail := strings.Contains(req.Prompt, musicFailTrigger)
	if err := p.delay(ctx); err != nil {
		return nil, fmt.Errorf("provider %s: %w", p.cfg.Name, err)
	}
	if !async {
		if fail {
			return nil, p.invalid("the prompt asks the mock to fail (" + musicFailTrigger + ")")
		}
		return p.musicAudio(ctx, "", format, length), nil
	}
	failed := "ok"
	if fail {
		failed = "fail"
	}
	id := fmt.Sprintf("%s_%s_%d_%s_%d", musicIDPrefix, format, length.Milliseconds(), failed, p.music.seq.Add(1))
	return &providers.MusicStatus{NativeID: id, Status: providers.JobQueued, PollAfter: MusicPollAfter}, nil
}

// PollMusic reports a task of the async shape: in progress for MusicPolls-1 polls, then
// completed with its audio (or failed, for a prompt that asked so). The task's request is
// read from its id, so that a gateway restarted mid-task still finishes it.
func (p *Provider) PollMusic(ctx context.Context, model, nativeID string) (*providers.MusicStatus, error) {
	parts := strings.Split(nativeID, "_")
	var ms int64
	var err error
	if len(parts) == 5 && parts[0] == musicIDPrefix {
		ms, err = strconv.ParseInt(parts[2], 10, 64)
	}
	if len(parts) != 5 || parts[0] != musicIDPrefix || err != nil || ms <= 0 {
		return nil, &providers.UpstreamError{Provider: p.cfg.Name, Status: 404, Category: providers.CategoryModelUnavailable,
			Message: fmt.Sprintf("no music task %q", nativeID)}
	}
	if err := p.delay(ctx); err != nil {
		return nil, fmt.Errorf("provider %s: %w", p.cfg.Name, err)
	}
	t := &p.music
	t.mu.Lock()
	if t.polls == nil {
		t.polls = map[string]int{}
	}
	t.polls[nativeID]++
	n := t.polls[nativeID]
	if n >= MusicPolls {
		delete(t.polls, nativeID)
	}
	t.mu.Unlock()
	if n < MusicPolls {
		return &providers.MusicStatus{NativeID: nativeID, Status: providers.JobInProgress, Progress: 100 * n / MusicPolls, PollAfter: MusicPollAfter}, nil
	}
	if parts[3] == "fail" {
		return &providers.MusicStatus{NativeID: nativeID, Status: providers.JobFailed, ErrorCode: "mock_failure",
			ErrorMessage: "the prompt asked the mock to fail (" + musicFailTrigger + ")"}, nil
	}
	return p.musicAudio(ctx, nativeID, parts[1], time.Duration(ms)*time.Millisecond), nil
}

// musicAudio is a completed status whose audio is length of the tone (wav) or of silent
// frames (mp3), made as it is read.
func (p *Provider) musicAudio(ctx context.Context, nativeID, format string, length time.Duration) *providers.MusicStatus {
	samples := int64(length) * speechRate / int64(time.Second)
	b := &audioBody{name: p.cfg.Name, ctx: ctx, interval: p.cfg.ChunkInterval, closed: make(chan struct{})}
	st := &providers.MusicStatus{NativeID: nativeID, Status: providers.JobCompleted, Progress: 100, Audio: b}
	if format == "wav" {
		b.size, b.gen = wav.HeaderSize+2*samples, wavAt(samples)
		st.ContentType, st.Duration = "audio/wav", time.Duration(samples)*time.Second/speechRate
	} else {
		// Whole frames of 24 ms, never longer than asked: a song is billed by started seconds.
		frames := max(samples/mp3FrameSamples, 1)
		b.size, b.gen = frames*mp3FrameSize, mp3At
		st.ContentType, st.Duration = "audio/mpeg", time.Duration(frames*mp3FrameSamples)*time.Second/speechRate
	}
	b.chunks = min(int64(p.cfg.Chunks), b.size)
	st.Size = b.size
	return st
}

// Interface guards.
var (
	_ providers.MusicGenerator = (*Provider)(nil)
	_ providers.MusicPlanner   = (*Provider)(nil)
)
