package providers

import (
	"context"
	"io"
	"time"
)

// The capabilities of the job families: work an upstream does in minutes, which the
// gateway starts, polls (jobs.Engine) and whose result it streams to the client. An
// adapter reports where a job stands in the public statuses below; it never hands out an
// upstream's URL (they are credential-bound or expire): content is read through the
// adapter.

// Statuses an adapter reports a job in: the four openai-go's poll helper knows.
const (
	JobQueued     = "queued"
	JobInProgress = "in_progress"
	JobCompleted  = "completed"
	JobFailed     = "failed"
)

// VideoGenerator makes videos: it starts a job upstream, polls it, and streams what it
// made.
type VideoGenerator interface {
	// StartVideo asks the upstream to make a video; the answer's NativeID names the job
	// in the later calls, with the same upstream model.
	StartVideo(ctx context.Context, req *VideoRequest) (*VideoStatus, error)
	// PollVideo asks where the job stands.
	PollVideo(ctx context.Context, model, nativeID string) (*VideoStatus, error)
	// VideoContent streams what a completed job made: variant is "video" (the default),
	// "thumbnail" or "spritesheet" (an adapter without it answers CategoryNotFound);
	// index picks a sample when the upstream made several; rangeHeader, when set, is the
	// client's HTTP Range, passed on so that the upstream sends only the range.
	VideoContent(ctx context.Context, req *VideoContentRequest) (*VideoContent, error)
}

// VideoDeleter is a VideoGenerator whose upstream keeps what it made until told to
// delete it; the gateway deletes it with the job.
type VideoDeleter interface {
	DeleteVideo(ctx context.Context, model, nativeID string) error
}

// VideoRequest is the neutral video request (OpenAI's POST /videos, with what Veo adds).
type VideoRequest struct {
	// Model is the upstream model id.
	Model  string
	Prompt string
	// Seconds is the video's length; 0 leaves it to the upstream's default.
	Seconds int
	// Size is "WIDTHxHEIGHT" ("1280x720"), or empty; Resolution ("720p", "1080p") and
	// AspectRatio ("16:9") are the other way to ask for it. The handler fills whichever
	// pair is missing from the other when it can.
	Size, Resolution, AspectRatio string
	NegativePrompt                string
	Seed                          *int64
	// InputReference is the first frame (an image), when given.
	InputReference *ImageInput
}

// VideoStatus is where an upstream says a video job stands.
type VideoStatus struct {
	NativeID string
	// Status is JobQueued, JobInProgress, JobCompleted or JobFailed.
	Status string
	// Progress is a percentage, 0 to 100, when the upstream says.
	Progress int
	// PollAfter is when the upstream asks to be polled again; 0 when it does not say.
	PollAfter time.Duration
	// Seconds, Size and Resolution are what the upstream says it makes (or made); zero
	// values when it does not say.
	Seconds          time.Duration
	Size, Resolution string
	// Variants are the content variants a completed job has ("video", "thumbnail"...).
	Variants []string
	// Samples is how many videos a completed job made (1 when it does not say).
	Samples int
	// ErrorCode and ErrorMessage say why a failed job failed.
	ErrorCode, ErrorMessage string
	// State is what the adapter needs to keep between polls and for VideoContent (Veo's
	// result locations): opaque to the gateway, stored with the job, never shown.
	State []byte
}

// VideoContentRequest asks for the bytes of a completed video job.
type VideoContentRequest struct {
	Model, NativeID string
	// State is the VideoStatus.State of the job's last poll.
	State       []byte
	Variant     string
	Index       int
	RangeHeader string
}

// VideoContent is bytes of a video job being streamed.
type VideoContent struct {
	// Body yields the bytes; the caller closes it.
	Body io.ReadCloser
	// ContentType is the media type (video/mp4, image/webp...).
	ContentType string
	// Status is 200 for the whole content, 206 for a range (ContentRange set).
	Status       int
	ContentRange string
	// Length is the body's length, -1 when unknown.
	Length int64
}

// MusicGenerator makes music. An upstream that answers with the audio (ElevenLabs) is
// synchronous: GenerateMusic returns the audio, which the job's worker keeps in the blob
// store. One that answers with a task to poll returns its NativeID and PollMusic follows
// it, until the audio is ready to read (MusicStatus.Audio).
type MusicGenerator interface {
	GenerateMusic(ctx context.Context, req *MusicRequest) (*MusicStatus, error)
	PollMusic(ctx context.Context, model, nativeID string) (*MusicStatus, error)
}

// MusicPlanner is a MusicGenerator that tells, before any call, how it makes a request:
// as a task (async true: GenerateMusic is called as the job is created and returns the
// task's NativeID, which PollMusic follows) or synchronously (the job's worker calls
// GenerateMusic and keeps the audio it answers). Its error refuses a request the upstream
// cannot make (an *UpstreamError, often Unsupported), so that the request is answered at
// once rather than its job failing later. A MusicGenerator without it is synchronous and
// refuses nothing in advance.
type MusicPlanner interface {
	PlanMusic(req *MusicRequest) (async bool, err error)
}

// MusicRequest is the neutral music request (POST /music/generate).
type MusicRequest struct {
	// Model is the upstream model id.
	Model  string
	Prompt string
	// Duration is the length asked; 0 leaves it to the upstream.
	Duration time.Duration
	// Format is mp3, wav, ogg or aac ("" is mp3).
	Format       string
	Instrumental bool
}

// MusicStatus is where an upstream says a music job stands; a completed one carries its
// audio.
type MusicStatus struct {
	NativeID string
	// Status is JobQueued, JobInProgress, JobCompleted or JobFailed.
	Status    string
	Progress  int
	PollAfter time.Duration
	// Audio yields the audio of a completed job; the caller closes it. Size is its length
	// or -1; ContentType its media type.
	Audio       io.ReadCloser
	Size        int64
	ContentType string
	// Duration is the audio's length as the upstream says; the gateway measures it
	// otherwise.
	Duration                time.Duration
	ErrorCode, ErrorMessage string
}
