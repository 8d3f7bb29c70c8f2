package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/audioprobe"
	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/internal/readall"
	"github.com/modelgateway/caddy-modelgateway/internal/upload"
	"github.com/modelgateway/caddy-modelgateway/providers"
)

var transcriptionMeters = []string{pricing.DimInputAudioSeconds, pricing.DimInput, pricing.DimInputAudioTokens, pricing.DimOutput, pricing.DimRequest}

var (
	transcriptionsCapability = capability{
		endpoint: "/audio/transcriptions", format: providers.FormatOpenAITranscriptions, meters: transcriptionMeters,
		neutral: isTranscriber,
	}
	translationsCapability = capability{
		endpoint: "/audio/translations", format: providers.FormatOpenAITranslations, meters: transcriptionMeters,
		neutral: isTranscriber,
	}
)

func isTranscriber(p providers.Provider) bool { _, ok := p.(providers.Transcriber); return ok }

// transcriptionFormats are the response formats of the transcription endpoints; the last
// three are plain text, which carries no usage.
var transcriptionFormats = []string{"json", "verbose_json", "diarized_json", "text", "srt", "vtt"}

// transcriptionRequest is a transcription or translation request as the gateway reads it.
type transcriptionRequest struct {
	translate  bool
	model      string
	file       upload.Part
	format     string
	stream     bool
	language   string
	prompt     string
	temp       *float64
	timestamps []string
	meta       bool
	// duration is the gateway's measurement of the upload, 0 when it could not measure it
	// (probeErr says why).
	duration time.Duration
	probeErr error
}

// plainText tells whether the answer is text, srt or vtt: no usage, no JSON.
func (t *transcriptionRequest) plainText() bool {
	return t.format == "text" || t.format == "srt" || t.format == "vtt"
}

// parseTranscription reads the fields of a complete (spooled) form.
func parseTranscription(form *upload.Form, translate bool) (*transcriptionRequest, *APIError) {
	t := &transcriptionRequest{translate: translate, format: "json"}
	t.model, _ = form.Value("model")
	if t.model == "" {
		return nil, badField(CodeModelRequired, "model", "model is required")
	}
	files := form.Files("file")
	if len(files) != 1 {
		return nil, badField(CodeValidation, "file", fmt.Sprintf("exactly one audio file is required in the file field; got %d", len(files)))
	}
	t.file = files[0]
	if t.file.Size == 0 {
		return nil, badField(CodeValidation, "file", fmt.Sprintf("the file %q is empty: there is no audio to transcribe", t.file.FileName))
	}
	if v, ok := form.Value("response_format"); ok {
		if !slices.Contains(transcriptionFormats, v) || (translate && v == "diarized_json") {
			return nil, badField(CodeValidation, "response_format", "response_format must be one of json, verbose_json, diarized_json (transcriptions only), text, srt, vtt")
		}
		t.format = v
	}
	var err error
	var ok bool
	if t.stream, ok, err = form.Bool("stream"); err != nil {
		return nil, badField(CodeValidation, "stream", "stream must be true or false")
	} else if ok && t.stream && (translate || t.plainText() && t.format != "text") {
		return nil, badField(CodeValidation, "stream", "stream is only for transcriptions answered as json or text")
	}
	t.language, _ = form.Value("language")
	t.prompt, _ = form.Value("prompt")
	if v, ok, err := form.Float("temperature"); err != nil || ok && (v < 0 || v > 1) {
		return nil, badField(CodeValidation, "temperature", "temperature must be a number between 0 and 1")
	} else if ok {
		t.temp = &v
	}
	t.timestamps = form.Values("timestamp_granularities")
	for _, g := range t.timestamps {
		if g != "word" && g != "segment" {
			return nil, badField(CodeValidation, "timestamp_granularities", `timestamp_granularities[] must be "word" or "segment"`)
		}
	}
	if m, ok, err := form.Bool("meta"); err == nil && ok {
		t.meta = m
	}
	return t, nil
}

// measure reads the upload's duration from its container's headers.
func (t *transcriptionRequest) measure(form *upload.Form) {
	rd, err := form.Open(t.file)
	if err != nil {
		t.probeErr = err
		return
	}
	t.duration, _, t.probeErr = audioprobe.Duration(rd)
}

// usage is the usage a transcription is billed before its answer says more: the measured
// seconds (or, unmeasured, the most the upload can hold at 16 kbit/s, the least any speech
// codec in use spends), with tokens from them: about 17 audio tokens a second (OpenAI's
// gpt-4o-transcribe), and at most 10 text tokens a second of speech.
func (t *transcriptionRequest) usage(worst bool) pricing.Usage {
	d := t.duration
	if d == 0 {
		d = time.Duration(t.file.Size/2000+1) * time.Second
	}
	secs := int64(math.Ceil(d.Seconds()))
	u := pricing.Usage{InputAudio: d, InputAudioTokens: secs * 17, Output: secs * 4, Input: estimateTokens(len(t.prompt))}
	if worst {
		u.InputAudio += time.Second
		u.InputAudioTokens, u.Output = secs*34+100, secs*10+100
	}
	return u
}

// unmeasurable refuses a plain-text transcription of audio the gateway cannot measure on a
// route billed by the second: the answer would carry no duration either.
func unmeasurable(why error) *APIError {
	return badField(CodeValidation, "response_format", fmt.Sprintf(
		"the duration of the uploaded audio could not be measured (%v; send WAV, MP3, FLAC, Ogg, WebM or M4A), and a text, srt or vtt answer reports none, so it could not be billed; ask response_format json or verbose_json", why))
}

// forgedAudio refuses, on a route billed by the second, audio whose headers and contents
// disagree as only a forged file's do: the gateway cannot tell what the upstream will play
// and bill, so it cannot hold enough for it.
func forgedAudio(why error) *APIError {
	return badField(CodeValidation, "file", fmt.Sprintf(
		"the uploaded audio cannot be billed by its length (%v); send the file as its encoder wrote it", why))
}

// transcriptions serves POST /audio/transcriptions.
func (g *Gateway) transcriptions(w http.ResponseWriter, r *http.Request, caller *Caller) error {
	return g.transcribe(w, r, caller, &transcriptionEndpoint, false)
}

// translations serves POST /audio/translations.
func (g *Gateway) translations(w http.ResponseWriter, r *http.Request, caller *Caller) error {
	return g.transcribe(w, r, caller, &translationEndpoint, true)
}

// transcribe serves a transcription or translation. The upload is spooled whole (its
// duration is measured from it, and it can be sent again to another route), billed on the
// input seconds the upstream reports (usage.seconds, else duration), else on the gateway's
// measurement, or on tokens for routes priced by token.
func (g *Gateway) transcribe(w http.ResponseWriter, r *http.Request, caller *Caller, f *mediaEndpoint, translate bool) error {
	cp := f.cp
	form, apiErr := g.readForm(r, cp, DefaultAudioUpload)
	if apiErr != nil {
		return apiErr
	}
	defer func() { _ = form.Close() }()
	if apiErr := g.spoolForm(form, cp, DefaultAudioUpload); apiErr != nil {
		return apiErr
	}
	t, apiErr := parseTranscription(form, translate)
	if apiErr != nil {
		return apiErr
	}
	t.measure(form)
	worst := t.usage(true)
	est := t.usage(false)
	return g.serveMedia(w, r, caller, f, &mediaRequest{
		model: t.model, promptBytes: int(form.Size()), meta: t.meta, relayed: t.stream, streamed: t.stream, metered: &est,
		fit: g.uploadFit(form.Size(), DefaultAudioUpload),
		worst: func(rt Route) (int64, error) {
			perSecond := rt.Price.PerUnit(pricing.DimInputAudioSeconds) > 0
			if perSecond && errors.Is(t.probeErr, audioprobe.ErrRefused) {
				return 0, forgedAudio(t.probeErr)
			}
			if t.duration == 0 && t.plainText() && perSecond {
				return 0, unmeasurable(t.probeErr)
			}
			_, total, err := rt.Price.Cost(worst)
			return total, err
		},
		attempt: func(c *call, ar *http.Request, rt Route) error {
			if fw, ok := forwarderFor(rt, cp.format); ok {
				return c.transcriptionForward(w, ar, rt, fw, form, t, cp.format)
			}
			return c.transcriptionNeutral(w, ar, rt, form, t)
		},
	})
}

// The families of transcription and translation cap their charge at the hold: the worst
// case is sized from the audio measured, which bounds what an upstream can bill.
var (
	transcriptionEndpoint = mediaEndpoint{cp: &transcriptionsCapability, capAtHold: always}
	translationEndpoint   = mediaEndpoint{cp: &translationsCapability, capAtHold: always}
)

// transcriptionForward sends the upload to an OpenAI-wire upstream and relays its answer:
// events, JSON decorated with the cost, or plain text.
func (c *call) transcriptionForward(w http.ResponseWriter, r *http.Request, rt Route, fw providers.Forwarder, form *upload.Form, t *transcriptionRequest, format providers.WireFormat) error {
	began := c.g.Now()
	// A text answer carries no usage: a route billed by token is asked for JSON, whose usage
	// is billed, and its text is answered as asked.
	var opt upload.BodyOptions
	textOfJSON := !t.stream && t.format == "text" && pricesTranscriptionTokens(rt.Price)
	if textOfJSON {
		opt.Set = map[string]string{"response_format": "json"}
	}
	resp, err := c.forwardForm(r, rt, fw, form, format, t.stream, opt)
	if err != nil {
		return err
	}
	switch {
	case t.stream:
		return c.relayEvents(w, r, rt, began, resp, mediaEvents{final: []string{"transcript.text.done"}, meter: t.meterAnswer, usage: c.appendTranscriptionUsage})
	case !t.plainText():
		return c.answerForwarded(w, r, rt, began, resp, wireFormat{format: format, appendUsage: c.appendTranscriptionUsage, finish: noFinish, meter: t.meterAnswer, lenient: nullNonFinite})
	}
	// Plain text carries no usage: the measurement of the upload is billed.
	in := answerBufs.Get()
	data, err := readall.Append((*in)[:0], io.LimitReader(resp.Body, maxUpstreamBody), resp.ContentLength, maxUpstreamBody)
	defer answerBufs.Put(in, data)
	_ = resp.Body.Close()
	if err != nil {
		ue := c.providerFault(rt, err.Error(), data)
		c.recordAttempt(rt, began, ue)
		return ue
	}
	ct := resp.Header.Get("Content-Type")
	if textOfJSON {
		// A server that answered text all the same is billed the estimate, as text is.
		if text, ok := t.textOfJSON(c, data); ok {
			data, ct = append(append(data[:0], text...), '\n'), plainTextType(t.format)
		}
	}
	c.recordAttempt(rt, began, nil)
	c.FirstByte = c.g.Now()
	c.route = &rt
	if ct == "" {
		ct = plainTextType(t.format)
	}
	return c.answerText(w, r, ct, data)
}

// pricesTranscriptionTokens tells whether a route bills transcriptions by token, which only
// a JSON answer's usage reports.
func pricesTranscriptionTokens(p pricing.Price) bool {
	return p.PerUnit(pricing.DimInputAudioTokens) > 0 || p.PerUnit(pricing.DimOutput) > 0
}

// textOfJSON meters a JSON transcription asked in place of plain text and returns its
// text; false when the answer is not one.
func (t *transcriptionRequest) textOfJSON(c *call, data []byte) (string, bool) {
	raw, err := rawjson.Get(data, "text")
	if err != nil || raw == nil {
		return "", false
	}
	text, ok := rawjson.String(raw)
	if !ok || t.meterAnswer(c, data) != nil {
		return "", false
	}
	return text, true
}

// answerText settles and writes a plain-text answer, which has no room for the cost: the
// generation record (X-Generation-Id) has it.
func (c *call) answerText(w http.ResponseWriter, r *http.Request, contentType string, data []byte) error {
	c.Status = http.StatusOK
	if apiErr := c.settleAnswer(r.Context()); apiErr != nil {
		return apiErr
	}
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
	return nil
}

func plainTextType(format string) string {
	if format == "vtt" {
		return "text/vtt; charset=utf-8"
	}
	return "text/plain; charset=utf-8"
}

// transcriptionUsage is OpenAI's transcription usage: {type: "duration", seconds} or
// {type: "tokens", input_tokens, input_token_details: {audio_tokens, text_tokens}, output_tokens}.
type transcriptionUsage struct {
	Type              string   `json:"type"`
	Seconds           *float64 `json:"seconds"`
	InputTokens       int64    `json:"input_tokens"`
	OutputTokens      int64    `json:"output_tokens"`
	InputTokenDetails *struct {
		AudioTokens int64 `json:"audio_tokens"`
		TextTokens  int64 `json:"text_tokens"`
	} `json:"input_token_details"`
}

// meterAnswer meters the call from a transcription answer or transcript.text.done event:
// input seconds from usage.seconds, else duration, else the gateway's measurement; tokens
// when the usage counts them.
func (t *transcriptionRequest) meterAnswer(c *call, data []byte) error {
	var ans struct {
		Duration *float64           `json:"duration"`
		Usage    transcriptionUsage `json:"usage"`
	}
	if err := json.Unmarshal(data, &ans); err != nil {
		return err
	}
	u := t.usage(false)
	u.InputAudioTokens, u.Input, u.Output = 0, 0, 0
	switch {
	case ans.Usage.Seconds != nil:
		u.InputAudio = t.reported(seconds(*ans.Usage.Seconds), u.InputAudio)
	case ans.Duration != nil:
		u.InputAudio = t.reported(seconds(*ans.Duration), u.InputAudio)
	}
	tokens := ans.Usage.Type == "tokens" || ans.Usage.InputTokens > 0 || ans.Usage.OutputTokens > 0
	if tokens {
		u.InputAudioTokens, u.Output = ans.Usage.InputTokens, ans.Usage.OutputTokens
		if d := ans.Usage.InputTokenDetails; d != nil {
			u.InputAudioTokens, u.Input = d.AudioTokens, d.TextTokens
		}
	} else {
		// No token counts: a route billed by token is billed the estimate from the seconds.
		est := t.usage(false)
		u.InputAudioTokens, u.Output, u.Input = est.InputAudioTokens, est.Output, est.Input
	}
	c.meter(u)
	return nil
}

// seconds converts a reported number of seconds; nonsense counts as none.
func seconds(s float64) time.Duration {
	if s <= 0 || math.IsNaN(s) || s > 1e7 {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

// reported is the input length d that an upstream reported, if the upload can have played
// that long: more than nothing and at most twice what the request held for (an upstream may
// round up or bill a minimum; the charge is capped at the hold). Any other value (0, a
// negative one, 1e8 seconds for a file of minutes) describes nothing that played, so own,
// the gateway's reading, is billed instead.
func (t *transcriptionRequest) reported(d, own time.Duration) time.Duration {
	if d <= 0 || d > 2*t.usage(true).InputAudio {
		return own
	}
	return d
}

// nonFinite are the literals Python's json module writes for floats that JSON cannot hold:
// a transcription server in Python answers a duration it could not compute as NaN.
var nonFinite = [][]byte{[]byte("-Infinity"), []byte("Infinity"), []byte("NaN")}

// nullNonFinite replaces the nonFinite literals of a JSON answer, outside its strings, by
// null, which reads as a value not reported. An answer without any is returned as it is.
func nullNonFinite(data []byte) []byte {
	if !bytes.Contains(data, nonFinite[1]) && !bytes.Contains(data, nonFinite[2]) {
		return data
	}
	out := make([]byte, 0, len(data))
	inString, escaped := false, false
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case !inString:
			if lit := nonFiniteAt(data[i:]); lit > 0 {
				out = append(out, "null"...)
				i += lit - 1
				continue
			}
		}
		out = append(out, c)
	}
	return out
}

// nonFiniteAt is the length of the nonFinite literal b opens with, 0 if none.
func nonFiniteAt(b []byte) int {
	for _, lit := range nonFinite {
		if bytes.HasPrefix(b, lit) {
			return len(lit)
		}
	}
	return 0
}

// appendTranscriptionUsage writes the usage of an answer that has none: the seconds billed.
func (c *call) appendTranscriptionUsage(b []byte, u providers.Usage) []byte {
	if c.Metered && (c.Usage.InputAudio > 0 || u.Total() == 0) {
		b = append(b, `{"type":"duration","seconds":`...)
		b = strconv.AppendFloat(b, math.Ceil(c.Usage.InputAudio.Seconds()), 'f', -1, 64)
		return append(b, '}')
	}
	b = appendTokenCounts(append(b, `{"type":"tokens",`...), u)
	return append(b, '}')
}

// transcriptionNeutral serves the request through an adapter's Transcriber and answers in
// the format asked.
func (c *call) transcriptionNeutral(w http.ResponseWriter, r *http.Request, rt Route, form *upload.Form, t *transcriptionRequest) error {
	tr, ok := rt.Provider.(providers.Transcriber)
	if !ok {
		return &providers.UpstreamError{Provider: rt.ProviderName, Category: providers.CategoryModelUnavailable, Message: "the provider cannot transcribe audio"}
	}
	file, err := form.Open(t.file)
	if err != nil {
		return c.g.uploadError(err)
	}
	began := c.g.Now()
	res, err := tr.Transcribe(r.Context(), &providers.TranscriptionRequest{
		Model: rt.UpstreamModel, Translate: t.translate, File: file, Size: t.file.Size, FileName: t.file.FileName, FileContentType: t.file.ContentType,
		Language: t.language, Prompt: t.prompt, Temperature: t.temp, Timestamps: t.timestamps, Diarize: t.format == "diarized_json",
	})
	if err := c.neutralDone(rt, began, err); err != nil {
		return err
	}
	u := t.usage(false)
	u.InputAudio = t.reported(res.Duration, u.InputAudio)
	if res.UsageKnown {
		m := res.Usage
		u.InputAudio = t.reported(m.InputAudio, u.InputAudio)
		if m.InputAudioTokens > 0 || m.Output > 0 {
			u.InputAudioTokens, u.Input, u.Output = m.InputAudioTokens, m.Input, m.Output
		}
	}
	c.meter(u)
	if res.Duration == 0 {
		res.Duration = u.InputAudio
	}
	switch {
	case t.stream:
		return c.transcriptionEvents(w, r, rt, res)
	case t.plainText():
		return c.answerText(w, r, plainTextType(t.format), renderTranscript(res, t.format))
	}
	b, err := json.Marshal(transcriptionJSON(res, t))
	if err != nil {
		return err
	}
	return c.answerComplete(w, r, b, c.appendTranscriptionUsage)
}

// transcriptionEvents answers a neutral transcription as OpenAI's event stream: the text as
// one delta, then transcript.text.done with the usage and its cost.
func (c *call) transcriptionEvents(w http.ResponseWriter, r *http.Request, rt Route, res *providers.Transcription) error {
	out := newSSEWriter(w)
	defer out.release()
	c.relayCommit(out, &rt, c.g.Now())
	delta, _ := json.Marshal(map[string]any{"type": "transcript.text.delta", "delta": res.Text})
	out.event("", delta)
	done, _ := json.Marshal(map[string]any{"type": "transcript.text.done", "text": res.Text})
	c.writeFinalEvent(out, r, "", done, c.appendTranscriptionUsage)
	return nil
}

// transcriptionJSON is a neutral transcription in OpenAI's json, verbose_json or
// diarized_json shape (without usage: the gateway writes it with the cost).
func transcriptionJSON(res *providers.Transcription, t *transcriptionRequest) any {
	secs := func(d time.Duration) float64 { return math.Round(d.Seconds()*1000) / 1000 }
	switch t.format {
	case "verbose_json":
		task := "transcribe"
		if t.translate {
			task = "translate"
		}
		v := map[string]any{"task": task, "language": res.Language, "duration": secs(res.Duration), "text": res.Text}
		if len(t.timestamps) == 0 || slices.Contains(t.timestamps, "segment") {
			segs := make([]map[string]any, 0, len(res.Segments))
			for i, s := range res.Segments {
				segs = append(segs, map[string]any{"id": i, "seek": 0, "start": secs(s.Start), "end": secs(s.End), "text": s.Text,
					"tokens": []int{}, "temperature": 0, "avg_logprob": 0, "compression_ratio": 0, "no_speech_prob": 0})
			}
			v["segments"] = segs
		}
		if slices.Contains(t.timestamps, "word") {
			words := make([]map[string]any, 0, len(res.Words))
			for _, wd := range res.Words {
				words = append(words, map[string]any{"word": wd.Word, "start": secs(wd.Start), "end": secs(wd.End)})
			}
			v["words"] = words
		}
		return v
	case "diarized_json":
		segs := make([]map[string]any, 0, len(res.Segments))
		for i, s := range res.Segments {
			segs = append(segs, map[string]any{"type": "transcript.text.segment", "id": "seg_" + strconv.Itoa(i), "start": secs(s.Start), "end": secs(s.End),
				"speaker": s.Speaker, "text": s.Text})
		}
		return map[string]any{"task": "transcribe", "duration": secs(res.Duration), "text": res.Text, "segments": segs}
	}
	return map[string]any{"text": res.Text}
}

// renderTranscript writes a neutral transcription as text, SubRip or WebVTT; without
// segments the whole text is one cue over the audio's length.
func renderTranscript(res *providers.Transcription, format string) []byte {
	if format == "text" {
		return []byte(res.Text + "\n")
	}
	segs := res.Segments
	if len(segs) == 0 {
		segs = []providers.TranscriptionSegment{{Start: 0, End: res.Duration, Text: res.Text}}
	}
	var b strings.Builder
	if format == "vtt" {
		b.WriteString("WEBVTT\n\n")
	}
	for i, s := range segs {
		if format == "srt" {
			fmt.Fprintf(&b, "%d\n%s --> %s\n%s\n\n", i+1, cueTime(s.Start, ","), cueTime(s.End, ","), strings.TrimSpace(s.Text))
		} else {
			fmt.Fprintf(&b, "%s --> %s\n%s\n\n", cueTime(s.Start, "."), cueTime(s.End, "."), strings.TrimSpace(s.Text))
		}
	}
	return []byte(b.String())
}

// cueTime is hh:mm:ss,mmm (SubRip) or hh:mm:ss.mmm (WebVTT).
func cueTime(d time.Duration, sep string) string {
	ms := d.Milliseconds()
	return fmt.Sprintf("%02d:%02d:%02d%s%03d", ms/3_600_000, ms/60_000%60, ms/1000%60, sep, ms%1000)
}
