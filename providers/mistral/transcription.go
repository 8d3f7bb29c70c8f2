package mistral

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
	"github.com/modelgateway/caddy-modelgateway/providers/sse"
)

// ErrMalformedFrame: a transcription event was not the JSON its name says, or was larger
// than the SSE reader's limit.
var ErrMalformedFrame = upstreamhttp.ErrMalformedFrame

// Mistral's transcription stream events (POST /v1/audio/transcriptions with stream).
const (
	eventLanguage  = "transcription.language"   // {audio_language}
	eventSegment   = "transcription.segment"    // {text, start, end, speaker_id?}
	eventTextDelta = "transcription.text.delta" // {text}
	eventDone      = "transcription.done"       // {model, text, language, segments, usage}
)

// normaliseTranscription rewrites the usage of Mistral's complete transcription
// ({model, text, language, segments, usage:{prompt_audio_seconds, prompt_tokens,
// completion_tokens, total_tokens}}) into OpenAI's (see appendUsage), every other member
// kept as it is. An answer without a usage object is returned as it is.
func normaliseTranscription(body []byte) ([]byte, error) {
	if !rawjson.Valid(body) {
		return nil, errors.New("transcription is not JSON")
	}
	raw, err := rawjson.Get(body, "usage")
	if err != nil {
		return nil, fmt.Errorf("reading the transcription: %w", err)
	}
	usage, ok := appendUsage(nil, raw)
	if !ok {
		return body, nil
	}
	return rawjson.Set(body, "usage", usage)
}

// appendUsage appends OpenAI's transcription usage for Mistral's usage object raw:
// {"type":"duration","seconds":S} when Mistral reports the audio's length
// (prompt_audio_seconds above zero), {"type":"tokens","input_tokens","output_tokens",
// "total_tokens"} from its token counts otherwise. ok is false when raw is no usage object.
func appendUsage(dst, raw []byte) (out []byte, ok bool) {
	if len(raw) == 0 || raw[0] != '{' {
		return dst, false
	}
	var u struct {
		Seconds    json.RawMessage `json:"prompt_audio_seconds"`
		Prompt     *int64          `json:"prompt_tokens"`
		Completion *int64          `json:"completion_tokens"`
		Total      *int64          `json:"total_tokens"`
	}
	if json.Unmarshal(raw, &u) != nil {
		return dst, false
	}
	if rawjson.IsNumber(u.Seconds) {
		if s, err := strconv.ParseFloat(string(u.Seconds), 64); err == nil && s > 0 {
			dst = append(dst, `{"type":"duration","seconds":`...)
			dst = append(dst, u.Seconds...)
			return append(dst, '}'), true
		}
	}
	if u.Prompt == nil && u.Completion == nil && u.Total == nil {
		return dst, false
	}
	var in, outTokens int64
	if u.Prompt != nil {
		in = *u.Prompt
	}
	if u.Completion != nil {
		outTokens = *u.Completion
	}
	total := in + outTokens
	if u.Total != nil {
		total = *u.Total
	}
	dst = append(dst, `{"type":"tokens","input_tokens":`...)
	dst = strconv.AppendInt(dst, in, 10)
	dst = append(dst, `,"output_tokens":`...)
	dst = strconv.AppendInt(dst, outTokens, 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, total, 10)
	return append(dst, '}'), true
}

// transcriptStream is the body of a streamed transcription: Mistral's events read one at a
// time as they arrive and handed on as OpenAI's, never more than one event held.
//
//	transcription.text.delta {text}             → transcript.text.delta {type, delta}
//	transcription.segment {text,start,end,...}  → transcript.text.segment {type, id, start, end, text, speaker?}
//	transcription.language                      → dropped
//	transcription.done {text, usage, ...}       → transcript.text.done {type, text, usage}
//
// Other events (an error event, [DONE]) pass as they came. The frames are data-only, as
// OpenAI's transcription streams are. A read error of the upstream body is returned as it
// is (the RawResponse body classified it); an event that is not the JSON its name says
// fails with ErrMalformedFrame. Close closes the upstream body and may be called from any
// goroutine.
type transcriptStream struct {
	body     io.ReadCloser
	sr       *sse.Reader
	provider string
	redact   func([]byte) []byte

	out      []byte // the frames of the last event, out[off:] not read yet
	off      int
	payload  []byte // scratch for an event's data
	segments int
	err      error // what Read returns once out is drained
}

func newTranscriptStream(body io.ReadCloser, provider string, redact func([]byte) []byte) *transcriptStream {
	return &transcriptStream{body: body, sr: sse.NewReader(body, 0), provider: provider, redact: redact}
}

func (s *transcriptStream) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if s.off < len(s.out) {
			n := copy(p, s.out[s.off:])
			s.off += n
			return n, nil
		}
		if s.err != nil {
			return 0, s.err
		}
		s.out, s.off = s.out[:0], 0
		if !s.sr.Next() {
			s.err = s.endErr(s.sr.Err())
			continue
		}
		var err error
		if s.out, err = s.translate(s.out, s.sr.Event()); err != nil {
			s.out, s.err = s.out[:0], err
			s.sr.Release()
		}
	}
}

// Close closes the upstream body, which ends the attempt.
func (s *transcriptStream) Close() error { return s.body.Close() }

// endErr is what the stream ends with once the reader stops with err.
func (s *transcriptStream) endErr(err error) error {
	switch {
	case err == nil:
		return io.EOF
	case errors.Is(err, sse.ErrEventTooLarge):
		return upstreamhttp.Failure(s.provider, ErrMalformedFrame, err, nil)
	}
	return err
}

// translate appends the frames of OpenAI's stream that stand for Mistral's event ev.
func (s *transcriptStream) translate(dst []byte, ev sse.Event) ([]byte, error) {
	name := ev.Name
	if name == "" || name == "message" {
		// The event's type, for a server that sends data-only frames.
		if rawjson.Valid(ev.Data) {
			if t, _ := rawjson.Get(ev.Data, "type"); t != nil {
				name, _ = rawjson.String(t)
			}
		}
	}
	switch name {
	case eventLanguage, eventTextDelta, eventSegment, eventDone:
	default:
		return sse.AppendEvent(dst, ev.Name, ev.Data)
	}
	if d := rawjson.TrimSpace(ev.Data); len(d) == 0 || d[0] != '{' || !rawjson.Valid(d) {
		return dst, s.malformed(ev.Data, errors.New(name+" is not a JSON object"))
	}
	b := s.payload[:0]
	switch name {
	case eventLanguage:
		// OpenAI's stream has no such event; the language is in Mistral's done event only.
		return dst, nil
	case eventTextDelta:
		text, err := member(ev.Data, "text", false)
		if err != nil {
			return dst, s.malformed(ev.Data, err)
		}
		b = append(b, `{"type":"transcript.text.delta","delta":`...)
		b = append(b, text...)
	case eventSegment:
		text, err := member(ev.Data, "text", false)
		start, err2 := member(ev.Data, "start", true)
		end, err3 := member(ev.Data, "end", true)
		if err = errors.Join(err, err2, err3); err != nil {
			return dst, s.malformed(ev.Data, err)
		}
		b = append(b, `{"type":"transcript.text.segment","id":"seg_`...)
		b = strconv.AppendInt(b, int64(s.segments), 10)
		s.segments++
		b = append(b, `","start":`...)
		b = append(b, start...)
		b = append(b, `,"end":`...)
		b = append(b, end...)
		b = append(b, `,"text":`...)
		b = append(b, text...)
		if speaker, _ := rawjson.Get(ev.Data, "speaker_id"); len(speaker) > 0 && speaker[0] == '"' {
			b = append(b, `,"speaker":`...)
			b = append(b, speaker...)
		}
	case eventDone:
		text, err := member(ev.Data, "text", false)
		if err != nil {
			return dst, s.malformed(ev.Data, err)
		}
		b = append(b, `{"type":"transcript.text.done","text":`...)
		b = append(b, text...)
		if usage, _ := rawjson.Get(ev.Data, "usage"); usage != nil {
			n := len(b)
			b = append(b, `,"usage":`...)
			var ok bool
			if b, ok = appendUsage(b, usage); !ok {
				b = b[:n] // no usage rather than one OpenAI's clients cannot read
			}
		}
	}
	b = append(b, '}')
	s.payload = b
	return sse.AppendEvent(dst, "", b)
}

// member returns the raw value of the member key of the object data: a number when number
// is set, a string otherwise.
func member(data []byte, key string, number bool) ([]byte, error) {
	v, err := rawjson.Get(data, key)
	switch {
	case err != nil:
		return nil, err
	case v == nil:
		return nil, fmt.Errorf("no %s", key)
	case number && !rawjson.IsNumber(v):
		return nil, fmt.Errorf("%s is not a number", key)
	case !number && v[0] != '"':
		return nil, fmt.Errorf("%s is not a string", key)
	}
	return v, nil
}

// malformed is the failure of a stream at an event it cannot read.
func (s *transcriptStream) malformed(data []byte, err error) error {
	if s.redact != nil {
		data = s.redact(data)
	}
	return upstreamhttp.Failure(s.provider, ErrMalformedFrame, err, data)
}
