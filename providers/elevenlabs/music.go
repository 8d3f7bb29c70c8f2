package elevenlabs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
)

// DefaultMusicModel is ElevenLabs' music model, sent as model_id when the route names none.
const DefaultMusicModel = "music_v1"

// Bounds of ElevenLabs' music_length_ms.
const (
	MinMusicLength = 3 * time.Second
	MaxMusicLength = 10 * time.Minute
)

// MusicBody is the JSON body of POST /v1/music: what the neutral request carries. The
// composition plan and the detailed (multipart) answer have no neutral field.
type MusicBody struct {
	Prompt            string `json:"prompt"`
	MusicLengthMs     int64  `json:"music_length_ms,omitempty"`
	ModelID           string `json:"model_id"`
	ForceInstrumental bool   `json:"force_instrumental"`
}

// musicFormat is how one music format is asked of ElevenLabs.
type musicFormat struct {
	output, contentType string
}

// musicFormats maps the gateway's music formats that ElevenLabs makes. It makes no WAV
// (its PCM output comes without a header whose layout the gateway could vouch for) and no
// AAC.
var musicFormats = map[string]musicFormat{
	"mp3": {output: "mp3_44100_128", contentType: "audio/mpeg"},
	"ogg": {output: "opus_48000_128", contentType: "audio/ogg"},
}

// PlanMusic tells that ElevenLabs makes music synchronously, and refuses before any call
// what it cannot make: a format other than mp3 or ogg, a length out of its bounds.
func (p *Provider) PlanMusic(req *providers.MusicRequest) (bool, error) {
	_, err := p.musicFormat(req)
	if err != nil {
		return false, err
	}
	if req.Duration != 0 && (req.Duration < MinMusicLength || req.Duration > MaxMusicLength) {
		return false, unsupported(p.name, "duration", fmt.Sprintf("ElevenLabs makes music of %v to %v, not %v", MinMusicLength, MaxMusicLength, req.Duration))
	}
	return false, nil
}

func (p *Provider) musicFormat(req *providers.MusicRequest) (musicFormat, error) {
	format := req.Format
	if format == "" {
		format = "mp3"
	}
	f, ok := musicFormats[format]
	if !ok {
		return f, unsupported(p.name, "format", fmt.Sprintf("ElevenLabs cannot make music in format %q; it makes mp3 and ogg", format))
	}
	return f, nil
}

// GenerateMusic composes a song with POST /v1/music, which answers with the audio itself:
// the status returned is completed, its Audio streaming the response body as it arrives
// (never read whole here; the caller closes it), its NativeID the song-id header. A read
// error of the audio, and a silence longer than the idle timeout, is an *UpstreamError.
// ElevenLabs does not say how long the song is: Duration stays 0, for the gateway to measure.
func (p *Provider) GenerateMusic(ctx context.Context, req *providers.MusicRequest) (*providers.MusicStatus, error) {
	if _, err := p.PlanMusic(req); err != nil {
		return nil, err
	}
	f, _ := p.musicFormat(req)
	mb := MusicBody{Prompt: req.Prompt, MusicLengthMs: req.Duration.Milliseconds(), ModelID: req.Model, ForceInstrumental: req.Instrumental}
	if mb.ModelID == "" {
		mb.ModelID = DefaultMusicModel
	}
	body, err := json.Marshal(&mb)
	if err != nil {
		return nil, fmt.Errorf("provider %s: encoding request: %w", p.name, err)
	}
	resp, at, err := p.up.SendBody(ctx, p.base+"/v1/music?output_format="+f.output, upstreamhttp.Body{
		Reader: bytes.NewReader(body), Length: int64(len(body)), Accept: "*/*",
	}, false, nil)
	if err != nil {
		return nil, err
	}
	raw := p.up.RawResponse(ctx, at, resp, true, p.idle)
	ct := resp.Header.Get("Content-Type")
	if ct == "" || ct == "application/octet-stream" {
		ct = f.contentType
	}
	size := resp.ContentLength
	if size < 0 {
		size = -1
	}
	return &providers.MusicStatus{
		NativeID: resp.Header.Get("song-id"), Status: providers.JobCompleted, Progress: 100,
		Audio: raw.Body, Size: size, ContentType: ct,
	}, nil
}

// PollMusic is refused: ElevenLabs answers GenerateMusic with the audio, so it has no task
// to poll. The refusal is an *UpstreamError of category invalid_request wrapping
// ErrUnsupportedRequest.
func (p *Provider) PollMusic(context.Context, string, string) (*providers.MusicStatus, error) {
	return nil, unsupported(p.name, "", "ElevenLabs makes music synchronously: there is no music task to poll")
}

// Interface guards.
var (
	_ providers.MusicGenerator = (*Provider)(nil)
	_ providers.MusicPlanner   = (*Provider)(nil)
)
