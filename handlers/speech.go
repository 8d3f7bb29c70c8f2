package handlers

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/sse"
)

var speechCapability = capability{
	endpoint: "/audio/speech", format: providers.FormatOpenAISpeech,
	meters:  []string{pricing.DimInputCharacters, pricing.DimInput, pricing.DimOutputAudioTokens, pricing.DimRequest},
	neutral: func(p providers.Provider) bool { _, ok := p.(providers.SpeechSynthesizer); return ok },
}

// speechFormats are the audio formats of POST /audio/speech and their media types.
var speechFormats = map[string]string{
	"mp3": "audio/mpeg", "opus": "audio/opus", "aac": "audio/aac", "flac": "audio/flac", "wav": "audio/wav", "pcm": "audio/pcm",
}

// maxSpeechInput bounds the text of one speech request, in characters: OpenAI takes 4,096,
// ElevenLabs' long-form models up to 40,000.
const maxSpeechInput = 40_000

// speechRequest is a POST /audio/speech body as the gateway reads it.
type speechRequest struct {
	model, input, voice, instructions string
	chars                             int64 // input's characters, what character prices bill
	// format is the audio format asked (mp3 by default); events tells stream_format "sse".
	format string
	events bool
	speed  float64
	meta   bool
}

// parseSpeech validates an OpenAI speech request.
func parseSpeech(body []byte) (*speechRequest, *APIError) {
	var raw struct {
		Model          *string         `json:"model"`
		Input          *string         `json:"input"`
		Voice          json.RawMessage `json:"voice"`
		Instructions   *string         `json:"instructions"`
		ResponseFormat *string         `json:"response_format"`
		Speed          *float64        `json:"speed"`
		StreamFormat   *string         `json:"stream_format"`
		Meta           *bool           `json:"meta"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, badField(CodeInvalidJSON, "", "the request body must be a JSON object with the documented field types: "+err.Error())
	}
	if raw.Model == nil || *raw.Model == "" {
		return nil, badField(CodeModelRequired, "model", "model is required")
	}
	req := &speechRequest{model: *raw.Model, format: "mp3"}
	if raw.Input == nil || *raw.Input == "" {
		return nil, badField(CodeValidation, "input", "input is required: the text to speak")
	}
	req.input = *raw.Input
	req.chars = int64(utf8.RuneCountInString(req.input))
	if req.chars > maxSpeechInput {
		return nil, badField(CodeValidation, "input", fmt.Sprintf("input has %d characters; at most %d are allowed", req.chars, maxSpeechInput))
	}
	voice := rawjson.TrimSpace(raw.Voice)
	switch {
	case len(voice) == 0 || rawjson.IsNull(voice):
		return nil, badField(CodeValidation, "voice", "voice is required: a voice name such as \"alloy\" or {\"id\": \"voice_...\"}")
	case voice[0] == '"':
		_ = json.Unmarshal(voice, &req.voice)
	case voice[0] == '{':
		var v struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(voice, &v)
		req.voice = v.ID
	}
	if req.voice == "" {
		return nil, badField(CodeValidation, "voice", "voice must be a non-empty voice name or an object {\"id\": \"voice_...\"}")
	}
	if raw.Instructions != nil {
		req.instructions = *raw.Instructions
	}
	if raw.ResponseFormat != nil {
		if _, ok := speechFormats[*raw.ResponseFormat]; !ok {
			return nil, badField(CodeValidation, "response_format", "response_format must be one of mp3, opus, aac, flac, wav, pcm")
		}
		req.format = *raw.ResponseFormat
	}
	if raw.Speed != nil {
		if *raw.Speed < 0.25 || *raw.Speed > 4 {
			return nil, badField(CodeValidation, "speed", "speed must be between 0.25 and 4.0")
		}
		req.speed = *raw.Speed
	}
	if raw.StreamFormat != nil {
		switch *raw.StreamFormat {
		case "audio":
		case "sse":
			req.events = true
		default:
			return nil, badField(CodeValidation, "stream_format", `stream_format must be "audio" or "sse"`)
		}
	}
	if raw.Meta != nil {
		req.meta = *raw.Meta
	}
	return req, nil
}

// speechUsage is the usage a speech request is billed before its answer says more: its
// characters, known up front, and its text as tokens (no tokenizer packs less than a byte a
// token) with audio tokens from its length: about 21 audio tokens a second of speech (OpenAI's
// gpt-4o-mini-tts) and 15 characters a second, stretched by a slow speed.
func (req *speechRequest) usage(worst bool) pricing.Usage {
	chars := req.chars
	speed := req.speed
	if speed == 0 {
		speed = 1
	}
	audio := int64(float64(chars) * 21 / 15 / speed)
	input := estimateTokens(len(req.input) + len(req.instructions))
	if !worst {
		input = (input + 3) / 4
	} else {
		audio = 2*audio + 1000
	}
	return pricing.Usage{InputCharacters: chars, Input: input, OutputAudioTokens: audio}
}

// speech serves POST /audio/speech: audio bytes relayed as the upstream makes them (or
// speech.audio.* events with stream_format "sse"), billed per character (known before the
// audio ends) or per token, as the route prices it.
func (g *Gateway) speech(w http.ResponseWriter, r *http.Request, caller *Caller) error {
	body, apiErr := g.readBody(w, r)
	if apiErr != nil {
		return apiErr
	}
	req, apiErr := parseSpeech(body)
	if apiErr != nil {
		return apiErr
	}
	worst := req.usage(true)
	// The estimate stands until the upstream reports tokens; the characters are exact.
	est := req.usage(false)
	return g.serveMedia(w, r, caller, &speechEndpoint, &mediaRequest{
		model: req.model, promptBytes: len(body), meta: req.meta, relayed: true, streamed: req.events, metered: &est,
		worst: func(rt Route) (int64, error) {
			_, total, err := rt.Price.Cost(worst)
			return total, err
		},
		attempt: func(c *call, ar *http.Request, rt Route) error {
			if fw, ok := forwarderFor(rt, providers.FormatOpenAISpeech); ok {
				return c.speechForward(w, ar, rt, fw, body, req)
			}
			return c.speechNeutral(w, ar, rt, req)
		},
	})
}

// speechEndpoint caps a charge by characters at its hold: they are counted before the call.
var speechEndpoint = mediaEndpoint{cp: &speechCapability, capAtHold: func(p pricing.Price) bool {
	return pricedOnlyBy(p, false, pricing.DimInputCharacters)
}}

// pricesSpeechTokens tells whether a route bills speech by tokens, which only the upstream's
// event stream reports (its binary answer carries no usage).
func pricesSpeechTokens(p pricing.Price) bool {
	return p.PerUnit(pricing.DimInput) > 0 || p.PerUnit(pricing.DimOutputAudioTokens) > 0
}

// speechForward serves the request from an OpenAI-wire upstream. A client that asked for
// audio from a route billed by tokens gets the audio of the upstream's event stream, whose
// final event reports the tokens.
func (c *call) speechForward(w http.ResponseWriter, r *http.Request, rt Route, fw providers.Forwarder, body []byte, req *speechRequest) error {
	up, err := upstreamBody(body, rt.UpstreamModel)
	if err != nil {
		return fmt.Errorf("rewriting the request: %w", err)
	}
	viaEvents := !req.events && pricesSpeechTokens(c.priceOf(rt))
	if viaEvents {
		if up, err = rawjson.Set(up, "stream_format", []byte(`"sse"`)); err != nil {
			return fmt.Errorf("rewriting the request: %w", err)
		}
	}
	raw := &providers.RawRequest{Format: providers.FormatOpenAISpeech, Body: up, Stream: req.events || viaEvents, Header: passHeaders(r)}
	if !raw.Stream {
		raw.Accept = "application/octet-stream"
	}
	began := c.g.Now()
	resp, err := fw.Forward(r.Context(), raw)
	if err != nil {
		c.recordAttempt(rt, began, err)
		return err
	}
	c.headersArrived()
	switch {
	case req.events:
		return c.relayEvents(w, r, rt, began, resp, mediaEvents{final: []string{"speech.audio.done"}, meter: req.meterEvent})
	case viaEvents:
		audio := &speechEventAudio{body: resp.Body, rd: sse.NewReader(resp.Body, maxMediaEvent), provider: rt.ProviderName}
		defer audio.rd.Release()
		return c.relayBinary(w, rt, began, binaryAnswer{body: audio, contentType: speechFormats[req.format], length: -1, meter: func() {
			if audio.done {
				req.meterTokens(c, audio.usage)
			}
		}})
	}
	ans := binaryAnswer{body: resp.Body, contentType: resp.Header.Get("Content-Type"), length: resp.ContentLength, disposition: resp.Header.Get("Content-Disposition")}
	if ans.contentType == "" {
		ans.contentType = speechFormats[req.format]
	}
	if ans.length <= 0 {
		ans.length = -1
	}
	return c.relayBinary(w, rt, began, ans)
}

// speechTokens is the usage of OpenAI's speech.audio.done event.
type speechTokens struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// meterEvent meters the call from a speech.audio.done event's usage.
func (req *speechRequest) meterEvent(c *call, data []byte) error {
	var ev struct {
		Usage *speechTokens `json:"usage"`
	}
	if err := json.Unmarshal(data, &ev); err != nil {
		return err
	}
	if ev.Usage == nil {
		return errors.New("speech.audio.done has no usage")
	}
	req.meterTokens(c, *ev.Usage)
	return nil
}

// meterTokens meters the request's characters and the tokens an upstream reported.
func (req *speechRequest) meterTokens(c *call, t speechTokens) {
	u := req.usage(false)
	u.Input, u.OutputAudioTokens = t.InputTokens, t.OutputTokens
	c.meter(u)
}

// speechEventAudio reads the audio of an OpenAI speech event stream as bytes, and the usage
// its speech.audio.done event ends with.
type speechEventAudio struct {
	body     io.ReadCloser
	rd       *sse.Reader
	provider string
	pending  []byte
	buf      []byte
	err      error
	done     bool
	usage    speechTokens
}

func (s *speechEventAudio) Read(p []byte) (int, error) {
	for len(s.pending) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		if !s.rd.Next() {
			switch s.err = s.rd.Err(); {
			case s.err != nil:
			case s.done:
				s.err = io.EOF
			default:
				// Cut short without its final event: the audio must not look whole.
				s.err = &providers.UpstreamError{Provider: s.provider, Category: providers.CategoryServerError, Retryable: true,
					Message: "the provider's speech stream ended before speech.audio.done"}
			}
			continue
		}
		data := s.rd.Event().Data
		var ev struct {
			Type  string        `json:"type"`
			Audio string        `json:"audio"`
			Usage *speechTokens `json:"usage"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			s.err = &providers.UpstreamError{Provider: s.provider, Category: providers.CategoryServerError, Retryable: true, Message: "the provider sent an invalid speech event: " + err.Error(), Payload: providers.Preview(data)}
			continue
		}
		switch ev.Type {
		case "speech.audio.delta":
			n := base64.StdEncoding.DecodedLen(len(ev.Audio))
			if cap(s.buf) < n {
				s.buf = make([]byte, n)
			}
			m, err := base64.StdEncoding.Decode(s.buf[:n], []byte(ev.Audio))
			if err != nil {
				s.err = &providers.UpstreamError{Provider: s.provider, Category: providers.CategoryServerError, Retryable: true, Message: "the provider sent audio that is not base64"}
				continue
			}
			s.pending = s.buf[:m]
		case "speech.audio.done":
			s.done = true
			if ev.Usage != nil {
				s.usage = *ev.Usage
			}
		case "error":
			msg := "the provider's speech stream failed"
			if ev.Error != nil && ev.Error.Message != "" {
				msg = ev.Error.Message
			}
			s.err = &providers.UpstreamError{Provider: s.provider, Category: providers.CategoryServerError, Retryable: true, Message: msg}
		}
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

func (s *speechEventAudio) Close() error { return s.body.Close() }

// speechNeutral serves the request through an adapter's SpeechSynthesizer: its audio as it
// comes, or as speech.audio.* events.
func (c *call) speechNeutral(w http.ResponseWriter, r *http.Request, rt Route, req *speechRequest) error {
	sy, ok := rt.Provider.(providers.SpeechSynthesizer)
	if !ok {
		return &providers.UpstreamError{Provider: rt.ProviderName, Category: providers.CategoryModelUnavailable, Message: "the provider cannot synthesize speech"}
	}
	began := c.g.Now()
	resp, err := sy.Synthesize(r.Context(), &providers.SpeechRequest{
		Model: rt.UpstreamModel, Input: req.input, Voice: req.voice, Instructions: req.instructions, Format: req.format, Speed: req.speed,
	})
	if err != nil {
		c.recordAttempt(rt, began, err)
		return err
	}
	c.headersArrived()
	meter := func() {
		u, known := resp.Usage, resp.UsageKnown
		if ur, ok := resp.Body.(providers.UsageReporter); ok {
			if eu, ok := ur.Usage(); ok {
				u, known = eu, true
			}
		}
		if known {
			u.InputCharacters = req.usage(false).InputCharacters
			if u.Input == 0 && u.OutputAudioTokens == 0 {
				est := req.usage(false)
				u.Input, u.OutputAudioTokens = est.Input, est.OutputAudioTokens
			}
			c.meter(u)
		}
	}
	if !req.events {
		ct := resp.ContentType
		if ct == "" {
			ct = speechFormats[req.format]
		}
		return c.relayBinary(w, rt, began, binaryAnswer{body: resp.Body, contentType: ct, length: -1, meter: meter})
	}
	return c.speechEvents(w, r, rt, began, resp.Body, meter)
}

// speechEvents writes audio read from body as OpenAI's speech events: speech.audio.delta per
// piece as it arrives, then speech.audio.done with the usage and its cost.
func (c *call) speechEvents(w http.ResponseWriter, r *http.Request, rt Route, began time.Time, body io.ReadCloser, meter func()) error {
	defer func() { _ = body.Close() }()
	out := newSSEWriter(w)
	defer out.release()
	p := mediaBufs.Get()
	defer mediaBufs.Put(p, *p)
	buf := (*p)[:cap(*p)]
	var ev []byte
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if !out.started {
				c.gotToken()
				c.relayCommit(out, &rt, began)
				c.FirstByte = c.g.Now()
			}
			ev = append(ev[:0], `{"type":"speech.audio.delta","audio":"`...)
			ev = base64.StdEncoding.AppendEncode(ev, buf[:n])
			ev = append(ev, `"}`...)
			out.event("", ev)
			if out.failed {
				c.streamDone()
				c.clientGone()
				return nil
			}
		}
		if err == nil {
			continue
		}
		c.streamDone()
		if err != io.EOF {
			if c.gone() {
				if !out.started {
					return err
				}
				c.clientGone()
				return nil
			}
			ue, ok := providers.AsUpstreamError(err)
			if !ok {
				ue = c.providerFault(rt, "the provider's audio broke off: "+err.Error(), nil)
			}
			if !out.started {
				c.recordAttempt(rt, began, ue)
				return ue
			}
			c.ErrorCode, c.ErrorOrigin, c.ErrorMessage = CodeUpstream, "upstream", ue.Error()
			c.failStream(out, r, "the provider's audio broke off")
			return nil
		}
		if !out.started {
			ue := c.providerFault(rt, "the provider answered no audio", nil)
			c.recordAttempt(rt, began, ue)
			return ue
		}
		meter()
		u := c.tokens()
		done := appendTokenUsage(append(ev[:0], `{"type":"speech.audio.done","usage":`...), u)
		c.writeFinalEvent(out, r, "", append(done, '}'), nil)
		return nil
	}
}
