package mock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelgateway/caddy-modelgateway/internal/audioprobe"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/wav"
)

// Speech of the mock: a 400 Hz tone, SpeechPerCharacter of it per input character (divided
// by the speed), at 24 kHz.
const (
	SpeechPerCharacter = 50 * time.Millisecond
	speechRate         = 24000
	toneHz             = 400
)

// speechTypes are the media types of the speech formats.
var speechTypes = map[string]string{
	"mp3":  "audio/mpeg",
	"opus": "audio/opus",
	"aac":  "audio/aac",
	"flac": "audio/flac",
	"wav":  "audio/wav",
	"pcm":  "audio/pcm",
}

// tone is one period of the tone, 16-bit samples at a tenth of full scale.
var tone = func() [speechRate / toneHz]int16 {
	var t [speechRate / toneHz]int16
	for i := range t {
		t[i] = int16(math.Round(3276 * math.Sin(2*math.Pi*float64(i)/float64(len(t)))))
	}
	return t
}()

// mp3Frame is the header of a silent MPEG-2 Layer III frame: 24 kHz, 32 kbit/s, mono, no
// CRC. The 92 bytes after it are zeros, side information that says "no audio data", which
// decoders play as 576 samples of silence.
var mp3Frame = [4]byte{0xFF, 0xF3, 0x44, 0xC0}

const (
	mp3FrameSize    = 96
	mp3FrameSamples = 576
)

// Synthesize answers a deterministic clip after the latency: a 400 Hz tone as a WAV file
// (with its true sizes) or raw PCM, silent MP3 frames, or, for opus, aac and flac, bytes
// derived from the input that only pass for audio by their media type. Its length is
// SpeechPerCharacter a character (at least one); the body yields it in Config.Chunks pieces
// with Config.ChunkInterval between them. An empty format is mp3, OpenAI's default. The
// usage is the input characters.
func (p *Provider) Synthesize(ctx context.Context, req *providers.SpeechRequest) (*providers.SpeechResponse, error) {
	format := req.Format
	if format == "" {
		format = "mp3"
	}
	contentType, ok := speechTypes[format]
	if !ok {
		return nil, p.invalid(fmt.Sprintf("response_format %q is not one of mp3, opus, aac, flac, wav and pcm", format))
	}
	chars := utf8.RuneCountInString(req.Input)
	d := time.Duration(max(chars, 1)) * SpeechPerCharacter
	if req.Speed > 0 {
		d = time.Duration(float64(d) / req.Speed)
	}
	samples := int64(d) * speechRate / int64(time.Second)
	b := &audioBody{name: p.cfg.Name, ctx: ctx, interval: p.cfg.ChunkInterval, closed: make(chan struct{})}
	switch format {
	case "wav":
		b.size, b.gen = wav.HeaderSize+2*samples, wavAt(samples)
	case "pcm":
		b.size, b.gen = 2*samples, pcmAt
	case "mp3":
		frames := (samples + mp3FrameSamples - 1) / mp3FrameSamples
		b.size, b.gen = frames*mp3FrameSize, mp3At
	default:
		// About 48 kbit/s, as the compressed formats run.
		block := make([]byte, 64)
		seed := hash(req.Model + "\x00" + format + "\x00" + req.Input)
		for i := range block {
			block[i] = byte(splitmix(&seed))
		}
		b.size = max(samples/4, 1)
		b.gen = func(off int64, p []byte) {
			for i := range p {
				p[i] = block[(off+int64(i))%int64(len(block))]
			}
		}
	}
	b.chunks = int64(min(int64(p.cfg.Chunks), b.size))
	if err := p.delay(ctx); err != nil {
		return nil, fmt.Errorf("provider %s: %w", p.cfg.Name, err)
	}
	return &providers.SpeechResponse{
		ContentType: contentType,
		Body:        b,
		Usage:       providers.MediaUsage{InputCharacters: int64(chars)},
		UsageKnown:  true,
	}, nil
}

// pcmAt writes the tone's bytes from offset off.
func pcmAt(off int64, p []byte) {
	for i := range p {
		o := off + int64(i)
		s := uint16(tone[(o/2)%int64(len(tone))])
		p[i] = byte(s >> (8 * (o % 2)))
	}
}

// wavAt writes a WAV file of samples samples of the tone from offset off.
func wavAt(samples int64) func(int64, []byte) {
	h := wav.AppendHeader(nil, speechRate, 1, 2*samples)
	return func(off int64, p []byte) {
		if off < int64(len(h)) {
			n := copy(p, h[off:])
			p, off = p[n:], off+int64(n)
		}
		pcmAt(off-int64(len(h)), p)
	}
}

// mp3At writes silent MP3 frames from offset off.
func mp3At(off int64, p []byte) {
	for i := range p {
		o := (off + int64(i)) % mp3FrameSize
		p[i] = 0
		if o < int64(len(mp3Frame)) {
			p[i] = mp3Frame[o]
		}
	}
}

// audioBody yields size bytes made by gen, in chunks pieces with interval between them. No
// goroutine is involved: Read waits out the interval itself. Read is for one goroutine;
// Close may be called from any.
type audioBody struct {
	name     string
	ctx      context.Context
	size     int64
	chunks   int64
	gen      func(off int64, p []byte)
	interval time.Duration

	pos   int64
	chunk int64 // the chunk pos is in
	timer *time.Timer

	closed    chan struct{}
	closeOnce sync.Once
}

// Read implements io.Reader.
func (b *audioBody) Read(p []byte) (int, error) {
	select {
	case <-b.closed:
		return 0, fmt.Errorf("provider %s: %w", b.name, errClosed)
	default:
	}
	if b.pos >= b.size {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	end := (b.chunk + 1) * b.size / b.chunks
	if b.pos == end {
		b.chunk++
		end = (b.chunk + 1) * b.size / b.chunks
		if b.interval > 0 && b.timer == nil {
			b.timer = time.NewTimer(b.interval)
			b.timer.Stop()
		}
		if err := wait(b.ctx, b.timer, b.closed, b.interval); err != nil {
			b.chunk-- // the next Read waits again
			return 0, fmt.Errorf("provider %s: %w", b.name, err)
		}
	}
	n := int(min(int64(len(p)), end-b.pos))
	b.gen(b.pos, p[:n])
	b.pos += int64(n)
	return n, nil
}

// Close implements io.Closer; it unblocks a Read that is waiting.
func (b *audioBody) Close() error {
	b.closeOnce.Do(func() { close(b.closed) })
	return nil
}

// transcriptWordTime is how long a word of a transcript lasts when the audio's length is
// unknown.
const transcriptWordTime = 300 * time.Millisecond

// Transcribe reads the whole file and answers "mock transcription of <name> (<n> bytes)"
// ("mock translation..." for a translation), after the latency. A WAV file (by its name or
// type) is measured, and its duration reported; the usage is left unknown, for the gateway
// to measure as it does for any upstream that reports none. Segments of four words come
// always (with speakers A and B in turn when diarization is asked), words when asked, spread
// evenly over the duration, or 300 ms each.
func (p *Provider) Transcribe(ctx context.Context, req *providers.TranscriptionRequest) (*providers.Transcription, error) {
	if req.File == nil {
		return nil, p.invalid("no audio file")
	}
	cr := &countingReader{r: req.File}
	// Like OpenAI, the mock refuses what it cannot read as audio.
	duration, _, err := audioprobe.Duration(cr)
	switch {
	case errors.Is(err, audioprobe.ErrUnknownFormat) || errors.Is(err, audioprobe.ErrMalformed) || errors.Is(err, audioprobe.ErrRefused):
		return nil, p.invalid(fmt.Sprintf("the file is not audio the mock can read (WAV, MP3, FLAC, Ogg, WebM or M4A): %v", err))
	case err != nil:
		return nil, fmt.Errorf("provider %s: reading the audio: %w", p.cfg.Name, err)
	}
	if _, err := io.Copy(io.Discard, cr); err != nil {
		return nil, fmt.Errorf("provider %s: reading the audio: %w", p.cfg.Name, err)
	}
	if err := p.delay(ctx); err != nil {
		return nil, fmt.Errorf("provider %s: %w", p.cfg.Name, err)
	}
	name := req.FileName
	if name == "" {
		name = "audio"
	}
	out := &providers.Transcription{
		Text:     fmt.Sprintf("mock transcription of %s (%d bytes)", name, cr.n),
		Language: req.Language,
		Duration: duration,
	}
	if req.Translate {
		out.Text = fmt.Sprintf("mock translation of %s (%d bytes)", name, cr.n)
		out.Language = "en"
	}
	if out.Language == "" {
		out.Language = "en"
	}
	words := strings.Fields(out.Text)
	at := func(k int) time.Duration { return time.Duration(k) * transcriptWordTime }
	if duration > 0 {
		at = func(k int) time.Duration { return duration * time.Duration(k) / time.Duration(len(words)) }
	}
	wantWords := false
	for _, g := range req.Timestamps {
		wantWords = wantWords || g == "word"
	}
	for i := 0; i < len(words); i += 4 {
		j := min(i+4, len(words))
		seg := providers.TranscriptionSegment{Start: at(i), End: at(j), Text: strings.Join(words[i:j], " ")}
		if req.Diarize {
			seg.Speaker = string(rune('A' + i/4%2))
		}
		out.Segments = append(out.Segments, seg)
		if wantWords {
			for k := i; k < j; k++ {
				out.Words = append(out.Words, providers.TranscriptionWord{
					Start: at(k), End: at(k + 1), Word: words[k], Speaker: seg.Speaker,
				})
			}
		}
	}
	return out, nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// invalid is the mock's answer to a request a real upstream would reject.
func (p *Provider) invalid(msg string) *providers.UpstreamError {
	return &providers.UpstreamError{
		Provider: p.cfg.Name,
		Status:   400,
		Type:     "invalid_request_error",
		Message:  msg,
		Category: providers.CategoryInvalidRequest,
	}
}

// Interface guards.
var (
	_ providers.SpeechSynthesizer = (*Provider)(nil)
	_ providers.Transcriber       = (*Provider)(nil)
)
