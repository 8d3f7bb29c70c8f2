package gemini

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/wav"
	"github.com/modelgateway/caddy-modelgateway/providers/sse"
)

// SpeechSampleRate is the rate of Gemini's speech, 16-bit mono PCM, and of the pcm format
// the gateway answers.
const SpeechSampleRate = 24000

// maxAudioEvent bounds one event of a speech stream: a chunk carries seconds of audio in
// base64, and a server that ignores streaming sends the whole clip in one.
const maxAudioEvent = upstreamhttp.MaxResponseBody

// Synthesize sends the text to streamGenerateContent?alt=sse with responseModalities AUDIO
// and returns the audio as it arrives. Gemini speaks 16-bit PCM (24 kHz mono) in base64
// inlineData, one piece per chunk; the body decodes each piece as it comes, and yields
// it raw for Format pcm or after a WAV header with placeholder sizes (0xFFFFFFFF, which
// players take as "to the end of the stream") for wav. Any other format is refused before
// the call, with CategoryInvalidRequest: Gemini has no encoder for it and the adapter
// transcodes nothing.
//
// Instructions go before the text ("Say in a cheerful tone: ..."), as Gemini's speech
// models take their direction from the prompt. Voice is a Gemini voice name ("Kore",
// "Puck"), sent as it is; none lets Gemini choose; an OpenAI voice name ("alloy") is
// refused before the call, like a format. Speed has no Gemini field: a speed other than 1
// is refused the same way (another route may honour it), never dropped unsaid.
//
// The first audio is read before Synthesize returns, so that a failure before it (an error
// in the stream, a blocked prompt, an answer without audio) fails the call and not its
// body. The usage returned is the input characters, known up front; Gemini reports its
// tokens at the end of the stream, so the body also implements providers.UsageReporter
// (interface{ Usage() (providers.MediaUsage, bool) }), which reports them, with the
// characters, once the body has been read to its end: promptTokenCount is Input,
// the audio share of candidatesTokenCount OutputAudioTokens.
func (p *Provider) Synthesize(ctx context.Context, req *providers.SpeechRequest) (*providers.SpeechResponse, error) {
	var contentType string
	switch req.Format {
	case "wav":
		contentType = "audio/wav"
	case "pcm":
		contentType = "audio/pcm"
	default:
		return nil, providers.Unsupported(p.name, "response_format",
			fmt.Sprintf("response_format %q is not available: Gemini speech answers only wav or pcm", req.Format), ErrUnsupportedRequest)
	}
	if strings.TrimSpace(req.Input) == "" {
		return nil, &providers.UpstreamError{Provider: p.name, Category: providers.CategoryInvalidRequest,
			Message: "input is empty: there is nothing to say"}
	}
	if providers.OpenAIVoice(req.Voice) {
		return nil, providers.Unsupported(p.name, "voice",
			fmt.Sprintf("voice %q is an OpenAI voice; Gemini speech takes a Gemini voice name, such as Kore or Puck", req.Voice), ErrUnsupportedRequest)
	}
	if req.Speed != 0 && req.Speed != 1 {
		return nil, providers.Unsupported(p.name, "speed",
			fmt.Sprintf("speed %g is not available: Gemini speech has no speed setting; omit speed or ask for the pace in instructions", req.Speed), ErrUnsupportedRequest)
	}
	model, err := modelPath(req.Model)
	if err != nil {
		return nil, &providers.UpstreamError{Provider: p.name, Category: providers.CategoryModelUnavailable, Message: err.Error(), Err: err}
	}
	body, err := encodeSpeech(req)
	if err != nil {
		return nil, requestError(p.name, fmt.Errorf("encoding request: %w", err))
	}
	resp, at, err := p.up.Send(ctx, p.base+"/"+model+":streamGenerateContent?alt=sse", body, true, nil)
	if err != nil {
		return nil, err
	}
	chars := int64(utf8.RuneCountInString(req.Input))
	b := &speechBody{provider: p.name, ctx: ctx, at: at, redact: p.up.Redact, wav: req.Format == "wav", chars: chars}
	if upstreamhttp.IsJSON(resp.Header) {
		// A server that ignored alt=sse: the whole answer, one object or an array of chunks.
		raw, err := p.up.ReadBody(ctx, at, resp)
		if err != nil {
			return nil, err
		}
		frames, err := splitFrames(raw)
		if err != nil {
			return nil, p.up.Malformed(resp.StatusCode, raw, err)
		}
		b.frames, b.replay = frames, true
	} else {
		b.body, b.rd, b.idle = resp.Body, sse.NewReader(resp.Body, maxAudioEvent), p.idle
		if b.idle > 0 {
			rc := resp.Body
			b.timer = time.AfterFunc(b.idle, func() {
				b.fired.Store(true)
				_ = rc.Close()
			})
			b.timer.Stop()
		}
	}
	b.fill()
	if b.err != nil && b.err != io.EOF {
		_ = b.Close()
		return nil, b.err
	}
	return &providers.SpeechResponse{
		ContentType: contentType,
		Body:        b,
		Usage:       providers.MediaUsage{InputCharacters: chars},
		UsageKnown:  true,
	}, nil
}

// encodeSpeech is the generateContent body of a speech request.
func encodeSpeech(req *providers.SpeechRequest) ([]byte, error) {
	gc := &GenerationConfig{ResponseModalities: []string{"AUDIO"}}
	if v := strings.TrimSpace(req.Voice); v != "" {
		gc.SpeechConfig = &SpeechConfig{VoiceConfig: &VoiceConfig{PrebuiltVoiceConfig: &PrebuiltVoiceConfig{VoiceName: v}}}
	}
	return json.Marshal(GenerateContentRequest{
		Contents:         []Content{{Role: "user", Parts: []Part{{Text: directed(req.Instructions, req.Input)}}}},
		GenerationConfig: gc,
	})
}

// directed puts the instructions before the text: "Say in a cheerful tone: Hello", or after
// a sentence of their own ("Speak slowly. Hello").
func directed(instructions, input string) string {
	instructions = strings.TrimSpace(instructions)
	if instructions == "" {
		return input
	}
	last, _ := utf8.DecodeLastRuneInString(instructions)
	if unicode.IsPunct(last) {
		return instructions + " " + input
	}
	return instructions + ": " + input
}

// speechFrame is one chunk of a speech stream, limited to what the body reads. The audio
// stays raw JSON: it is decoded from the frame's own bytes, without a string copy.
type speechFrame struct {
	Candidates []struct {
		Content *struct {
			Parts []struct {
				Text       string `json:"text"`
				Thought    bool   `json:"thought"`
				InlineData *struct {
					MimeType string          `json:"mimeType"`
					Data     json.RawMessage `json:"data"`
				} `json:"inlineData"`
			} `json:"parts"`
		} `json:"content"`
		FinishReason  string `json:"finishReason"`
		FinishMessage string `json:"finishMessage"`
		Index         int    `json:"index"`
	} `json:"candidates"`
	PromptFeedback *PromptFeedback     `json:"promptFeedback"`
	UsageMetadata  *MediaUsageMetadata `json:"usageMetadata"`
	Error          json.RawMessage     `json:"error"`
}

// speechBody is the audio of a speech stream: each Read hands on what the last chunk
// decoded to, and reads the next chunk only once that is used up, so that no more than one
// chunk is held. No goroutine is involved: the idle watchdog is a timer, armed only while
// the body waits for the upstream, that closes the connection. Read is for one goroutine;
// Close and Usage may be called from any.
type speechBody struct {
	provider string
	ctx      context.Context // the caller's: its cancellation is not an upstream failure
	at       *upstreamhttp.Attempt
	body     io.ReadCloser // nil when replaying
	rd       *sse.Reader
	redact   func([]byte) []byte

	// frames is the answer of a server that sent one JSON body, replayed.
	frames []json.RawMessage
	replay bool

	idle  time.Duration
	timer *time.Timer
	fired atomic.Bool

	wav   bool
	chars int64

	buf []byte // audio decoded and not yet read, from off
	off int
	err error // io.EOF or the failure, once the stream is over

	sawAudio    bool
	finishRaw   string
	finishMsg   string
	blockReason string
	blockMsg    string
	text        string // what the model said instead of speaking, for the error
	usage       providers.MediaUsage
	sawUsage    bool

	mu      sync.Mutex // guards final and finalOK, which Usage reads from any goroutine
	final   providers.MediaUsage
	finalOK bool

	releaseOnce sync.Once
	closed      atomic.Bool
}

// Read implements io.Reader. Errors other than io.EOF are *providers.UpstreamError, the
// caller's own cancellation (its context's error) or ErrClosed after Close.
func (b *speechBody) Read(p []byte) (int, error) {
	for b.off >= len(b.buf) {
		if b.err != nil {
			return 0, b.err
		}
		b.fill()
	}
	n := copy(p, b.buf[b.off:])
	b.off += n
	return n, nil
}

// Close implements io.Closer. It may be called at any time, from any goroutine, and more
// than once.
func (b *speechBody) Close() error {
	b.closed.Store(true)
	b.release()
	return nil
}

// Usage implements providers.UsageReporter: the tokens Gemini reported and the input
// characters, once the body has been read to its end; false before, after a failure, or
// when Gemini reported no usage.
func (b *speechBody) Usage() (providers.MediaUsage, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.finalOK {
		return providers.MediaUsage{InputCharacters: b.chars}, false
	}
	return b.final, true
}

// fill reads chunks until one yields audio or the stream is over.
func (b *speechBody) fill() {
	b.buf, b.off = b.buf[:0], 0
	for len(b.buf) == 0 && b.err == nil {
		data, ok := b.next()
		if !ok {
			b.finish()
			return
		}
		if err := b.handle(data); err != nil {
			b.fail(err)
		}
	}
}

// next returns the data of the next event, false at the end of the body or on an error.
func (b *speechBody) next() ([]byte, bool) {
	if b.replay {
		if len(b.frames) == 0 || b.closed.Load() {
			return nil, false
		}
		f := b.frames[0]
		b.frames = b.frames[1:]
		return f, true
	}
	for {
		if b.closed.Load() {
			return nil, false
		}
		if b.timer != nil {
			b.timer.Reset(b.idle)
		}
		ok := b.rd.Next()
		if b.timer != nil {
			b.timer.Stop()
		}
		if !ok {
			return nil, false
		}
		ev := b.rd.Event()
		switch ev.Name {
		case "", "message", "error":
			return ev.Data, true
		}
	}
}

// handle decodes one chunk: its audio into buf, its usage, finish and block.
func (b *speechBody) handle(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || string(data) == "[DONE]" {
		return nil
	}
	var f speechFrame
	if err := json.Unmarshal(data, &f); err != nil {
		var probe struct {
			Error json.RawMessage `json:"error"`
		}
		if json.Unmarshal(data, &probe) == nil && !isFalsy(probe.Error) {
			return streamError(b.provider, b.redact(data))
		}
		// Unlike a text stream's, a chunk of audio cannot be skipped without a gap.
		return upstreamhttp.Failure(b.provider, ErrMalformedFrame, err, b.redact(data))
	}
	if !isFalsy(f.Error) {
		return streamError(b.provider, b.redact(data))
	}
	if f.UsageMetadata != nil {
		// Running totals: the last one wins.
		b.usage, b.sawUsage = mediaUsage(f.UsageMetadata, "AUDIO"), true
	}
	if f.PromptFeedback != nil && f.PromptFeedback.BlockReason != "" {
		b.blockReason, b.blockMsg = f.PromptFeedback.BlockReason, f.PromptFeedback.BlockReasonMessage
	}
	for i := range f.Candidates {
		c := &f.Candidates[i]
		if c.Index != 0 {
			continue
		}
		if c.Content != nil {
			for _, part := range c.Content.Parts {
				switch {
				case part.InlineData != nil:
					if err := b.audio(part.InlineData.MimeType, part.InlineData.Data); err != nil {
						return upstreamhttp.Failure(b.provider, ErrMalformedFrame, err, b.redact(data))
					}
				case part.Text != "" && !part.Thought && len(b.text) < upstreamhttp.MaxMessage:
					b.text += part.Text
				}
			}
		}
		if c.FinishReason != "" {
			b.finishRaw, b.finishMsg = c.FinishReason, c.FinishMessage
		}
		break
	}
	return nil
}

// audio appends one piece of base64 PCM to buf, after the WAV header when it is the first.
func (b *speechBody) audio(mimeType string, data json.RawMessage) error {
	rate, channels, err := pcmFormat(mimeType)
	if err != nil {
		return err
	}
	src := bytes.TrimSpace(data)
	if len(src) < 2 || src[0] != '"' || src[len(src)-1] != '"' {
		return errors.New("inlineData.data is not a string")
	}
	src = src[1 : len(src)-1]
	if bytes.IndexByte(src, '\\') >= 0 {
		// An escaped string (some encoders write \/): unescape it first.
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		src = []byte(s)
	}
	if len(src) == 0 {
		return nil
	}
	if b.wav && !b.sawAudio {
		b.buf = wav.AppendHeader(b.buf, rate, channels, -1)
	}
	b.sawAudio = true
	b.buf, err = appendBase64(b.buf, src)
	if err != nil {
		return fmt.Errorf("inlineData.data: %w", err)
	}
	return nil
}

// pcmFormat reads the rate and channels of Gemini's audio type, "audio/L16;codec=pcm;
// rate=24000". The samples are little-endian whatever L16 says elsewhere (RFC 2586 has it
// big-endian): Google's own examples write them into a WAV file as they come. A type that
// is not PCM is an answer the adapter cannot convert.
func pcmFormat(mimeType string) (rate, channels int, err error) {
	mt, params, err := mime.ParseMediaType(mimeType)
	if err != nil {
		return 0, 0, fmt.Errorf("audio of type %q: %w", upstreamhttp.Truncate(mimeType, 100), err)
	}
	if mt != "audio/l16" && mt != "audio/pcm" && !(strings.HasPrefix(mt, "audio/") && strings.EqualFold(params["codec"], "pcm")) {
		return 0, 0, fmt.Errorf("audio of type %q is not PCM", upstreamhttp.Truncate(mimeType, 100))
	}
	rate, channels = SpeechSampleRate, 1
	if v, err := strconv.Atoi(params["rate"]); err == nil && v > 0 {
		rate = v
	}
	if v, err := strconv.Atoi(params["channels"]); err == nil && v > 0 && v <= 8 {
		channels = v
	}
	return rate, channels, nil
}

// appendBase64 decodes src, standard or URL-safe base64 with or without padding (protobuf
// JSON accepts all four), onto dst.
func appendBase64(dst, src []byte) ([]byte, error) {
	src = bytes.TrimRight(src, "=")
	enc := base64.RawStdEncoding
	if bytes.ContainsAny(src, "-_") {
		enc = base64.RawURLEncoding
	}
	n := enc.DecodedLen(len(src))
	dst = slices.Grow(dst, n)
	m, err := enc.Decode(dst[len(dst):len(dst)+n], src)
	return dst[:len(dst)+m], err
}

// finish ends the body at the end of the stream: cleanly when audio came, with the usage,
// or with the failure that explains why it did not.
func (b *speechBody) finish() {
	switch {
	case b.closed.Load():
		b.end(upstreamhttp.ErrClosed)
		return
	case b.fired.Load():
		b.fail(upstreamhttp.IdleTimeoutError(b.provider))
		return
	}
	if b.rd != nil {
		if err := b.rd.Err(); err != nil {
			if errors.Is(err, sse.ErrEventTooLarge) {
				b.fail(upstreamhttp.Failure(b.provider, ErrMalformedFrame, err, nil))
				return
			}
			b.fail(upstreamhttp.TransportError(b.provider, b.ctx, b.at, err))
			return
		}
	}
	if !b.sawAudio {
		b.fail(b.noAudio())
		return
	}
	b.mu.Lock()
	b.final, b.finalOK = b.usage, b.sawUsage
	b.final.InputCharacters = b.chars
	b.mu.Unlock()
	b.end(io.EOF)
}

// noAudio is the failure of a stream that ended without audio: the caller's fault when the
// prompt or the answer was blocked, a retryable failure otherwise (Gemini's speech models
// now and then end with OTHER, or answer in text, where another attempt speaks).
func (b *speechBody) noAudio() *providers.UpstreamError {
	if b.blockReason != "" {
		return &providers.UpstreamError{Provider: b.provider, Category: providers.CategoryInvalidRequest, Code: b.blockReason,
			Message: withDetail("Gemini blocked the input ("+b.blockReason+")", b.blockMsg)}
	}
	if r, _ := finishReason(b.finishRaw, false); r == providers.FinishContentFilter {
		return &providers.UpstreamError{Provider: b.provider, Category: providers.CategoryInvalidRequest, Code: b.finishRaw,
			Message: withDetail("Gemini produced no audio (finish reason "+b.finishRaw+")", b.finishMsg)}
	}
	reason := b.finishRaw
	if reason == "" {
		reason = "none"
	}
	detail := b.finishMsg
	if detail == "" && b.text != "" {
		detail = "the model answered in text: " + b.text
	}
	return &providers.UpstreamError{
		Provider: b.provider, Category: providers.CategoryServerError, Retryable: true, Code: b.finishRaw,
		Message: withDetail("Gemini produced no audio (finish reason "+reason+")", detail),
		Err:     fmt.Errorf("%w: no audio", ErrUnusableAnswer),
	}
}

// withDetail appends what the upstream said, bounded, to msg.
func withDetail(msg, detail string) string {
	if detail = strings.TrimSpace(detail); detail != "" {
		msg += ": " + detail
	}
	return upstreamhttp.Truncate(msg, upstreamhttp.MaxMessage)
}

func (b *speechBody) fail(err error) {
	b.buf = b.buf[:0]
	b.end(err)
}

func (b *speechBody) end(err error) {
	b.err = err
	b.release()
	if b.rd != nil {
		b.rd.Release()
	}
	b.frames = nil
}

// release stops the watchdog, closes the body and ends the attempt.
func (b *speechBody) release() {
	b.releaseOnce.Do(func() {
		if b.timer != nil {
			b.timer.Stop()
		}
		if b.body != nil {
			_ = b.body.Close()
		}
		b.at.Cancel()
	})
}

// mediaUsage splits usageMetadata by modality; out is the modality of the answer ("AUDIO",
// "IMAGE"), to which the whole candidates count goes when Gemini gives no details. Input
// text, audio and image tokens are counted apart, and the answer's text and thoughts are
// Output.
func mediaUsage(m *MediaUsageMetadata, out string) providers.MediaUsage {
	var u providers.MediaUsage
	for _, d := range m.PromptTokensDetails {
		switch d.Modality {
		case "IMAGE":
			u.ImageInputTokens += max(int64(d.TokenCount), 0)
		case "AUDIO":
			u.InputAudioTokens += max(int64(d.TokenCount), 0)
		}
	}
	u.Input = max(int64(m.PromptTokenCount)-u.ImageInputTokens-u.InputAudioTokens, 0)
	candidates := max(int64(m.CandidatesTokenCount), 0)
	media := candidates
	if len(m.CandidatesTokensDetails) > 0 {
		media = 0
		for _, d := range m.CandidatesTokensDetails {
			if d.Modality == out {
				media += max(int64(d.TokenCount), 0)
			}
		}
	}
	u.Output = max(candidates-media, 0) + max(int64(m.ThoughtsTokenCount), 0)
	switch out {
	case "AUDIO":
		u.OutputAudioTokens = media
	case "IMAGE":
		u.ImageOutputTokens = media
	}
	return u
}

// Interface guards.
var (
	_ providers.SpeechSynthesizer = (*Provider)(nil)
	_ providers.UsageReporter     = (*speechBody)(nil)
)
