package elevenlabs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"unicode/utf8"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/wav"
)

// speechFormat is how one OpenAI response format is asked of ElevenLabs.
type speechFormat struct {
	// output is ElevenLabs' output_format.
	output      string
	contentType string
	// wav wraps the PCM ElevenLabs sends in a WAV header.
	wav bool
}

// pcmRate is the sample rate of OpenAI's pcm, 16-bit mono little-endian, which the pcm and
// wav formats are asked in.
const pcmRate = 24000

// speechFormats maps the OpenAI response formats ElevenLabs can produce. aac and flac have
// no ElevenLabs output_format.
var speechFormats = map[string]speechFormat{
	"mp3":  {output: "mp3_44100_128", contentType: "audio/mpeg"},
	"opus": {output: "opus_48000_64", contentType: "audio/ogg"},
	"pcm":  {output: "pcm_24000", contentType: "audio/pcm"},
	"wav":  {output: "pcm_24000", contentType: "audio/wav", wav: true},
}

// Synthesize streams the speech of req.Input in req.Voice. It returns once ElevenLabs'
// response headers arrive; the Body yields the audio as it comes, and fails with an
// *UpstreamError when the connection breaks or stays silent longer than the idle timeout.
// A format ElevenLabs cannot produce (aac, flac) and an OpenAI voice name ("alloy") are
// refused before any call.
func (p *Provider) Synthesize(ctx context.Context, req *providers.SpeechRequest) (*providers.SpeechResponse, error) {
	format := req.Format
	if format == "" {
		format = "mp3" // OpenAI's default
	}
	f, ok := speechFormats[format]
	if !ok {
		return nil, unsupported(p.name, "response_format", fmt.Sprintf(
			"ElevenLabs cannot produce response_format %q; it produces mp3, opus, wav and pcm", format))
	}
	if req.Voice == "" {
		return nil, unsupported(p.name, "voice", "ElevenLabs needs a voice: the id of an ElevenLabs voice")
	}
	if providers.OpenAIVoice(req.Voice) {
		return nil, unsupported(p.name, "voice", fmt.Sprintf("voice %q is an OpenAI voice; ElevenLabs takes the id of an ElevenLabs voice", req.Voice))
	}
	sb := SpeechBody{Text: req.Input, ModelID: req.Model}
	if req.Speed != 0 {
		sb.VoiceSettings = &VoiceSettings{Speed: req.Speed}
	}
	body, err := json.Marshal(&sb)
	if err != nil {
		return nil, fmt.Errorf("provider %s: encoding request: %w", p.name, err)
	}
	u := p.base + "/v1/text-to-speech/" + url.PathEscape(req.Voice) + "/stream?output_format=" + f.output
	resp, at, err := p.up.SendBody(ctx, u, upstreamhttp.Body{
		Reader: bytes.NewReader(body), Length: int64(len(body)), Accept: "*/*",
	}, false, nil)
	if err != nil {
		return nil, err
	}
	// The audio arrives over time like a stream: the idle timeout applies to it.
	audio := p.up.RawResponse(ctx, at, resp, true, p.idle).Body
	if f.wav {
		audio = newWAVBody(audio, pcmRate)
	}
	return &providers.SpeechResponse{
		ContentType: f.contentType,
		Body:        audio,
		Usage:       providers.MediaUsage{InputCharacters: int64(utf8.RuneCountInString(req.Input))},
		UsageKnown:  true,
	}, nil
}

// wavHeader is the header of a streamed WAV of 16-bit mono PCM at rate, of unknown length.
func wavHeader(rate int) []byte { return wav.AppendHeader(nil, rate, 1, -1) }

// wavBody is PCM audio read as a WAV file: the header first, then the PCM as it arrives.
type wavBody struct {
	header []byte
	pcm    io.ReadCloser
}

func newWAVBody(pcm io.ReadCloser, rate int) *wavBody {
	return &wavBody{header: wavHeader(rate), pcm: pcm}
}

func (b *wavBody) Read(p []byte) (int, error) {
	if len(b.header) > 0 {
		n := copy(p, b.header)
		b.header = b.header[n:]
		return n, nil
	}
	return b.pcm.Read(p)
}

// Close closes the PCM body, which ends the attempt.
func (b *wavBody) Close() error { return b.pcm.Close() }
