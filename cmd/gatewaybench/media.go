package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"image"
	"image/png"
	"io"
	"math"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The media tests measure the gateway's media endpoints against plain Caddy (and the fake
// itself) on the same fake upstream. Each has an arm of the gateway of its own and runs only
// when -tests names it (or "media"): they are not part of "all".
//
//	speech-ttfb         POST /v1/audio/speech at a fixed pace (open loop): time to the
//	                    first byte of audio, and to the last
//	transcription-heap  sequential 25 MiB WAV uploads to POST /v1/audio/transcriptions: the
//	                    growth of the proxy's Go heap over its idle heap, the bytes it
//	                    allocated per upload, its RSS growth, the seconds per upload
//	image-edit          POST /v1/images/edits with two 4 MB PNGs, closed loop: throughput,
//	                    CPU time and heap allocated per request

// mediaTests are the tests that "all" leaves out ("media" names them all).
var mediaTests = []string{"speech-ttfb", "transcription-heap", "image-edit"}

// The gateway's arm of each media test.
const (
	speechArm        = "gw-speech"
	transcriptionArm = "gw-transcription"
	imageEditArm     = "gw-image-edit"
)

// mediaDef is a media test's endpoint and the gateway's model for it (gatewayCaddyfile).
type mediaDef struct {
	test, arm, path, model string
}

var mediaDefs = []mediaDef{
	{"speech-ttfb", speechArm, "/v1/audio/speech", "bench-tts"},
	{"transcription-heap", transcriptionArm, "/v1/audio/transcriptions", "bench-whisper"},
	{"image-edit", imageEditArm, "/v1/images/edits", "bench-image"},
	// The jobs tests (jobs.go): video-content's arms get their content's URL once their
	// job has completed (prepareVideo).
	{"video-content", videoContentArm, "/v1/videos", videoModel},
	{"jobs-load", jobsChatArm, "/v1/chat/completions", "bench-oa"},
	{"batch-load", batchChatArm, "/v1/chat/completions", "bench-oa"},
}

// isMediaArm reports whether a is the gateway's arm of a media test.
func isMediaArm(a string) bool {
	for _, md := range mediaDefs {
		if md.arm == a {
			return true
		}
	}
	return false
}

// heapSampleEnv has the proxies sample their Go heap (module/runtimevars.go, in builds with
// the gatewaybench tag); it is set only for runs of the transcription-heap test.
const heapSampleEnv = "GATEWAYBENCH_HEAP_SAMPLE"

// mediaArms are the arms of each media test that runs: direct (unless -arms leaves it out),
// plain Caddy and the gateway, each to the test's endpoint.
func (b *bench) mediaArms(plainURL string, gw *gatewayProc, clientOf func(*arm) *http.Client) {
	b.media = map[string][]*arm{}
	for _, md := range mediaDefs {
		if !b.cfg.runs(md.test) {
			continue
		}
		var arms []*arm
		// The jobs-load and batch-load tests measure the gateway against itself; plain Caddy
		// is their control.
		if b.cfg.want["direct"] && md.test != "jobs-load" && md.test != "batch-load" {
			arms = append(arms, &arm{name: "direct", kind: kindDirect, url: b.upstreamURL + md.path, model: md.model, key: gw.key})
		}
		arms = append(arms,
			&arm{name: "caddy", kind: kindCaddy, url: plainURL + md.path, model: md.model, proc: b.plain, key: gw.key},
			&arm{name: md.arm, kind: kindGateway, url: gw.url + md.path, model: md.model, proc: gw.proc, key: gw.key})
		for _, a := range arms {
			a.client = clientOf(a)
			if md.test == "image-edit" {
				a.contentType = b.imageType
			}
		}
		b.media[md.test] = arms
	}
}

// mediaSanity sends one request on every arm of each media test, as sanity does for the
// others.
func (b *bench) mediaSanity(ctx context.Context) error {
	for _, md := range mediaDefs {
		for _, a := range b.media[md.test] {
			rctx, cancel := context.WithTimeout(ctx, time.Minute)
			var err error
			switch md.test {
			case "speech-ttfb":
				_, _, err = a.speak(rctx, speechBody(a, b.cfg.speechDirective()), b.cfg.speechBytes())
			case "transcription-heap":
				var u *wavUpload
				if u, err = newWAVUpload(a.model, 64<<10); err == nil {
					err = a.upload(rctx, u)
				}
			case "image-edit":
				err = a.do(rctx, b.imageBody)
			case "video-content":
				err = b.prepareVideo(rctx, a)
			case "jobs-load":
				err = a.do(rctx, a.body(false, directive{n: b.cfg.AnswerPieces, latency: b.cfg.Latency}))
			case "batch-load":
				err = a.do(rctx, a.body(false, directive{n: b.cfg.AnswerPieces, latency: b.cfg.Latency}))
				if err == nil && a.kind == kindGateway {
					err = b.batchSanity(rctx, a)
				}
			}
			cancel()
			if err != nil {
				return fmt.Errorf("arm %s of the %s test does not work: %w (logs in %s; run with -keep to keep them)", a.name, md.test, err, b.dir)
			}
		}
	}
	return nil
}

// mediaRound runs the media tests of one round, each arm in its turn, starting with a
// different arm each round.
func (b *bench) mediaRound(ctx context.Context, round int, update func(*arm, func(*roundResult))) {
	cfg := b.cfg
	rotate := func(arms []*arm) []*arm {
		out := make([]*arm, len(arms))
		for i := range out {
			out[i] = arms[(i+round)%len(arms)]
		}
		return out
	}
	if arms := b.media["speech-ttfb"]; len(arms) > 0 && ctx.Err() == nil {
		b.quiesce(ctx)
		d := cfg.speechDirective()
		res := interleavedSpeech(ctx, rotate(arms), cfg.SpeechRate, cfg.Warmup, cfg.SpeechSlot, cfg.SpeechDuration, d, cfg.speechBytes())
		for _, a := range arms {
			r := res[a.name]
			logf("  speech     %-23s ttfb p50 %6.0f p99 %6.0f µs  last byte p50 %6.0f µs  (%d requests, errors %d %s)",
				a.name, r.TTFBP50Us, r.TTFBP99Us, r.LastByteP50Us, r.Requests, r.Errors, r.FirstError)
			update(a, func(rr *roundResult) { rr.Speech = &r })
		}
	}
	if arms := b.media["transcription-heap"]; len(arms) > 0 {
		u, err := newWAVUpload(mediaDefs[1].model, cfg.UploadBytes)
		for _, a := range rotate(arms) {
			if ctx.Err() != nil || err != nil {
				break
			}
			b.quiesce(ctx)
			r := uploads(ctx, a, cfg.Uploads, u)
			logf("  upload     %-23s heap %6.2f → %6.2f MB (+%.2f)  alloc %6.2f MB/upload  rss +%.1f MB  %.2f s/upload  (errors %d %s%s)",
				a.name, r.HeapIdleMB, r.HeapPeakMB, r.HeapGrowthMB, r.AllocPerUploadMB, r.RSSGrowthMB, r.SecondsPerUpload, r.Errors, r.FirstError, r.Note)
			update(a, func(rr *roundResult) { rr.Transcription = &r })
		}
		if err != nil {
			logf("  upload     %v", err)
		}
	}
	if arms := b.media["image-edit"]; len(arms) > 0 {
		for _, a := range rotate(arms) {
			if ctx.Err() != nil {
				break
			}
			b.quiesce(ctx)
			r := saturate(ctx, a, b.upstream, cfg.ImageConc, cfg.Warmup, cfg.ImageDuration, b.imageBody)
			logf("  image edit %-23s %8.1f rps  cpu %8.0f µs/req  alloc %8.0f KiB/req  errors %d %s", a.name, r.RPS, r.CPUPerReqUs, r.AllocPerReqKiB, r.Errors, r.FirstError)
			update(a, func(rr *roundResult) { rr.ImageEdit = &r })
		}
	}
	if arms := b.media["video-content"]; len(arms) > 0 && ctx.Err() == nil {
		b.quiesce(ctx)
		res := b.videoRound(ctx, rotate(arms))
		for _, a := range arms {
			r := res[a.name]
			logf("  video      %-23s whole %7.0f MB/s  range %7.0f MB/s  cpu %5.2f s/GB  heap %6.2f → %6.2f MB (+%.2f)  alloc %6.2f MB/GB  (errors %d %s%s)",
				a.name, r.MBps, r.RangeMBps, r.CPUPerGBs, r.HeapIdleMB, r.HeapPeakMB, r.HeapGrowthMB, r.AllocPerGBMB, r.Errors, r.FirstError, r.Note)
			update(a, func(rr *roundResult) { rr.Video = &r })
		}
	}
	if arms := b.media["jobs-load"]; len(arms) > 0 && ctx.Err() == nil {
		res := b.jobsRound(ctx, rotate(arms))
		for _, a := range arms {
			r := res[a.name]
			logf("  jobs load  %-23s p99 idle %6.0f µs (before %6.0f, after %6.0f)  live %6.0f µs (%.2fx)  p50 live %6.0f µs  jobs %d  polls %.0f/s of %.0f/s  created in %.1f s, ended in %.1f s  (errors %d %s%s)",
				a.name, r.IdleP99Us, r.IdleBefore.P99Us, r.IdleAfter.P99Us, r.Live.P99Us, r.LiveOverIdleP99, r.Live.P50Us, r.Jobs, r.PollsPerSecond, r.WantPollsPerS, r.CreateSeconds, r.EndSeconds,
				r.Errors+r.IdleBefore.Errors+r.Live.Errors+r.IdleAfter.Errors, r.FirstError+r.IdleBefore.FirstError+r.Live.FirstError+r.IdleAfter.FirstError, r.Note)
			update(a, func(rr *roundResult) { rr.Jobs = &r })
		}
	}
	if arms := b.media["batch-load"]; len(arms) > 0 && ctx.Err() == nil {
		res := b.batchRound(ctx, rotate(arms))
		for _, a := range arms {
			r := res[a.name]
			logf("%s", batchLog(a.name, r))
			update(a, func(rr *roundResult) { rr.Batch = &r })
		}
	}
}

// --- speech-ttfb ---

// speechDirective is what a speech request asks of the fake: -speech-pieces pieces of audio,
// -speech-gap apart, the first after -latency.
func (c *config) speechDirective() directive {
	return directive{n: c.SpeechPieces, interval: c.SpeechGap, latency: c.Latency}
}

// speechBytes is the length of the fake's audio.
func (c *config) speechBytes() int64 { return int64(c.SpeechPieces) * speechPiece }

// speechBody is a speech request with the directive in the text to speak.
func speechBody(a *arm, d directive) []byte {
	input := strconv.Quote("Read this sentence aloud for a benchmark. " + d.String())
	return fmt.Appendf(nil, `{"model":%q,"input":%s,"voice":"alloy","response_format":"mp3"}`, a.model, input)
}

// readBufs hold what the load generator reads answers into.
var readBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// speak sends a speech request and reads its audio, want bytes of audio/mpeg; it returns the
// time from the send to the first byte of audio and to the last.
func (a *arm) speak(ctx context.Context, body []byte, want int64) (ttfb, last time.Duration, err error) {
	t0 := time.Now()
	resp, err := a.client.Do(a.newRequest(ctx, body))
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return 0, 0, fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	a.ok200.Add(1)
	if ct := resp.Header.Get("Content-Type"); ct != "audio/mpeg" {
		return 0, 0, fmt.Errorf("content type %q, want audio/mpeg", ct)
	}
	p := readBufs.Get().(*[]byte)
	defer readBufs.Put(p)
	var n int64
	for n == 0 {
		k, err := resp.Body.Read(*p)
		if k > 0 {
			ttfb = time.Since(t0)
			n += int64(k)
		}
		if err == io.EOF && n > 0 {
			break
		}
		if err != nil {
			return 0, 0, fmt.Errorf("no audio: %w", err)
		}
	}
	rest, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{resp.Body}, *p)
	last = time.Since(t0)
	switch n += rest; {
	case err != nil:
		return 0, 0, fmt.Errorf("audio broke off after %d bytes: %w", n, err)
	case n != want:
		return 0, 0, fmt.Errorf("%d bytes of audio, want %d", n, want)
	}
	return ttfb, last, nil
}

// speechResult is the speech test of one arm in one round.
type speechResult struct {
	Requests      int64  `json:"requests"`
	TTFBP50Us     num    `json:"ttfb_p50_us"`
	TTFBP99Us     num    `json:"ttfb_p99_us"`
	LastByteP50Us num    `json:"last_byte_p50_us"`
	LastByteP99Us num    `json:"last_byte_p99_us"`
	Errors        int64  `json:"errors"`
	FirstError    string `json:"first_error,omitempty"`
	// The samples slot by slot, for the pooled comparison (not in the JSON).
	ttfbSlots, lastSlots [][]float64
}

// speechSamples gathers an arm's speech requests over its slots.
type speechSamples struct {
	mu         sync.Mutex
	ttfb, last series
	count      atomic.Int64
	errs       errorLog
}

func (s *speechSamples) result() speechResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	return speechResult{
		Requests: s.count.Load(), TTFBP50Us: s.ttfb.pct(50), TTFBP99Us: s.ttfb.pct(99),
		LastByteP50Us: s.last.pct(50), LastByteP99Us: s.last.pct(99),
		Errors: s.errs.n.Load(), FirstError: s.errs.first, ttfbSlots: s.ttfb.slots, lastSlots: s.last.slots,
	}
}

// sample sends rate speech requests a second for dur on a fixed schedule (open loop) and,
// with record, adds them to s as one slot; it returns once every one has ended.
func (s *speechSamples) sample(ctx context.Context, a *arm, rate int, dur time.Duration, body []byte, want int64, record bool) {
	start := time.Now()
	var wg sync.WaitGroup
	for range schedule(ctx, start, start.Add(dur), time.Second/time.Duration(rate)) {
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			ttfb, last, err := a.speak(rctx, body, want)
			cancel()
			if !record {
				return
			}
			if err != nil {
				s.errs.add(err)
				return
			}
			s.count.Add(1)
			s.mu.Lock()
			s.ttfb.add(micros(ttfb))
			s.last.add(micros(last))
			s.mu.Unlock()
		})
	}
	wg.Wait()
	if record {
		s.ttfb.endSlot()
		s.last.endSlot()
	}
}

// interleavedSpeech runs the speech test on every arm in turn, slot by slot, until each has
// had dur, as interleaved does for the latency test; each arm is warmed first.
func interleavedSpeech(ctx context.Context, arms []*arm, rate int, warmup, slot, dur time.Duration, d directive, want int64) map[string]speechResult {
	samples := make([]speechSamples, len(arms))
	for i, a := range arms {
		samples[i].sample(ctx, a, rate, warmup, speechBody(a, d), want, false)
	}
	if slot <= 0 {
		slot = dur
	}
	for done := time.Duration(0); done < dur && ctx.Err() == nil; done += slot {
		for _, i := range cycleOrder(arms) {
			samples[i].sample(ctx, arms[i], rate, min(slot, dur-done), speechBody(arms[i], d), want, true)
		}
	}
	out := make(map[string]speechResult, len(arms))
	for i, a := range arms {
		out[a.name] = samples[i].result()
	}
	return out
}

// --- transcription-heap ---

// wavHeaderLen is the length of a canonical WAV header (RIFF, fmt and data chunk headers).
const wavHeaderLen = 44

// The upload's audio: 16-bit mono PCM at 16 kHz, a 400 Hz tone (40 samples a period).
const (
	wavRate     = 16000
	wavPeriod   = 40
	wavByteRate = wavRate * 2
)

// wavTone is one period of the tone, as little-endian samples.
var wavTone = func() []byte {
	b := make([]byte, 2*wavPeriod)
	for i := 0; i < wavPeriod; i++ {
		v := int16(8000 * math.Sin(2*math.Pi*float64(i)/wavPeriod))
		binary.LittleEndian.PutUint16(b[2*i:], uint16(v))
	}
	return b
}()

// wavUpload is a transcription request's multipart body: the model, response_format json and
// a WAV file, all of total bytes (framing included, one less if the samples would end on an
// odd byte). Its samples are made as the body is read, never held whole.
type wavUpload struct {
	head, tail  []byte // the fields, the file part's header and the WAV header; the closing boundary
	pcm         int64  // bytes of samples
	contentType string
}

func newWAVUpload(model string, total int64) (*wavUpload, error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("model", model)
	_ = mw.WriteField("response_format", "json")
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="file"; filename="bench.wav"`)
	h.Set("Content-Type", "audio/wav")
	if _, err := mw.CreatePart(h); err != nil {
		return nil, err
	}
	mark := buf.Len()
	_ = mw.Close()
	u := &wavUpload{tail: bytes.Clone(buf.Bytes()[mark:]), contentType: mw.FormDataContentType()}
	u.pcm = (total - int64(mark) - wavHeaderLen - int64(len(u.tail))) &^ 1
	if u.pcm <= 0 {
		return nil, fmt.Errorf("an upload of %d bytes has no room for audio", total)
	}
	u.head = append(bytes.Clone(buf.Bytes()[:mark]), wavHeader(u.pcm)...)
	return u, nil
}

// wavHeader is the header of pcm bytes of the tone's format.
func wavHeader(pcm int64) []byte {
	h := make([]byte, 0, wavHeaderLen)
	le := binary.LittleEndian
	h = append(h, "RIFF"...)
	h = le.AppendUint32(h, uint32(36+pcm))
	h = append(h, "WAVEfmt "...)
	h = le.AppendUint32(h, 16)
	h = le.AppendUint16(h, 1) // PCM
	h = le.AppendUint16(h, 1) // mono
	h = le.AppendUint32(h, wavRate)
	h = le.AppendUint32(h, wavByteRate)
	h = le.AppendUint16(h, 2)  // block align
	h = le.AppendUint16(h, 16) // bits per sample
	h = append(h, "data"...)
	return le.AppendUint32(h, uint32(pcm))
}

// Len is the length of the body.
func (u *wavUpload) Len() int64 { return int64(len(u.head)) + u.pcm + int64(len(u.tail)) }

// Seconds is the length of the audio.
func (u *wavUpload) Seconds() float64 { return float64(u.pcm) / wavByteRate }

// open returns a reader of the body.
func (u *wavUpload) open() io.Reader {
	return io.MultiReader(bytes.NewReader(u.head), &toneReader{n: u.pcm}, bytes.NewReader(u.tail))
}

// toneReader reads n bytes of the tone.
type toneReader struct{ off, n int64 }

func (t *toneReader) Read(p []byte) (int, error) {
	if t.off >= t.n {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), t.n-t.off)]
	for i := 0; i < len(p); {
		i += copy(p[i:], wavTone[(t.off+int64(i))%int64(len(wavTone)):])
	}
	t.off += int64(len(p))
	return len(p), nil
}

// upload sends the body as a transcription request and checks the answer.
func (a *arm) upload(ctx context.Context, u *wavUpload) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.url, u.open())
	if err != nil {
		return err
	}
	req.ContentLength = u.Len()
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(u.open()), nil }
	req.Header.Set("Content-Type", u.contentType)
	req.Header.Set("Authorization", "Bearer "+a.key)
	resp, err := a.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %.300s", resp.StatusCode, bytes.TrimSpace(body))
	}
	a.ok200.Add(1)
	switch {
	case err != nil:
		return err
	case !bytes.Contains(body, []byte(`"~transcribed `)):
		return fmt.Errorf("not the fake's transcription: %.300s", body)
	}
	return nil
}

// uploadResult is the transcription-heap test of one arm in one round.
type uploadResult struct {
	Uploads int   `json:"uploads"`
	Bytes   int64 `json:"bytes_per_upload"`
	// SecondsPerUpload is the time from the first upload's send to the last one's answer,
	// divided by the uploads.
	SecondsPerUpload num `json:"seconds_per_upload"`
	heapFigures
	// AllocPerUploadMB is what the proxy's heap allocated per upload (memstats' TotalAlloc).
	AllocPerUploadMB num    `json:"alloc_per_upload_mb"`
	Errors           int64  `json:"errors"`
	FirstError       string `json:"first_error,omitempty"`
	Note             string `json:"note,omitempty"`
}

const mib = 1 << 20

// uploads sends n uploads one after another and measures the proxy's heap and resident set
// around them: after a forced collection (idle), and at their peak.
func uploads(ctx context.Context, a *arm, n int, u *wavUpload) uploadResult {
	r := uploadResult{Uploads: n, Bytes: u.Len(), SecondsPerUpload: nan, AllocPerUploadMB: nan}
	var errs errorLog
	hw := watchHeap(ctx, a.proc)
	start := time.Now()
	for i := 0; i < n && ctx.Err() == nil; i++ {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		if err := a.upload(rctx, u); err != nil {
			errs.add(err)
		}
		cancel()
	}
	r.SecondsPerUpload = num(time.Since(start).Seconds() / float64(n))
	r.Errors, r.FirstError = errs.n.Load(), errs.first
	if r.Errors > 0 && a.proc != nil {
		r.heapFigures = noHeapFigures()
		r.Note = hw.note + "; uploads failed: no memory figures (a refused upload holds nothing)"
		return r
	}
	r.heapFigures, r.Note = hw.finish(ctx)
	if !math.IsNaN(float64(r.AllocMB)) {
		r.AllocPerUploadMB = num(float64(r.AllocMB) / float64(n))
	}
	return r
}

// heapFigures are a proxy's heap and resident set around a test (heapWatch).
type heapFigures struct {
	// HeapIdleMB is the bytes of the proxy's Go heap objects after a collection, before the
	// test; HeapPeakMB the most its sampler saw during it; HeapGrowthMB the difference.
	HeapIdleMB   num `json:"heap_idle_mb"`
	HeapPeakMB   num `json:"heap_peak_mb"`
	HeapGrowthMB num `json:"heap_growth_mb"`
	// HeapSamples is how many times the proxy sampled its heap meanwhile.
	HeapSamples uint64 `json:"heap_samples"`
	// AllocMB is what the proxy's heap allocated during the test (memstats' TotalAlloc),
	// GCs the collections it ran.
	AllocMB num    `json:"-"`
	GCs     uint32 `json:"gcs"`
	// RSSGrowthMB is the proxy's peak resident set during the test (VmHWM, reset before
	// it) less its resident set before it.
	RSSBaseMB   num `json:"rss_base_mb"`
	RSSGrowthMB num `json:"rss_growth_mb"`
}

func noHeapFigures() heapFigures {
	return heapFigures{HeapIdleMB: nan, HeapPeakMB: nan, HeapGrowthMB: nan, AllocMB: nan, RSSBaseMB: nan, RSSGrowthMB: nan}
}

// heapWatch measures a proxy's heap and resident set around a test: after a forced
// collection (idle), and at their peak during the test.
type heapWatch struct {
	proc       *child
	m0         goMem
	ok0, rssOK bool
	rss0       int64
	note       string
}

// watchHeap collects the proxy's garbage and reads its idle heap (which starts its heap
// peak again from here) and its resident set; nil proc (direct) measures nothing.
func watchHeap(ctx context.Context, proc *child) *heapWatch {
	hw := &heapWatch{proc: proc}
	if proc == nil {
		return hw
	}
	if err := collect(ctx, proc); err != nil {
		hw.note = "; " + err.Error()
	}
	sleepCtx(ctx, 100*time.Millisecond)
	hw.m0, hw.ok0 = memOf(ctx, proc)
	pid := proc.pid()
	if resetPeakRSS(pid) == nil {
		hw.rss0, hw.rssOK = mustRSS(pid)
	}
	return hw
}

// finish reads the proxy's heap peak and resident set peak since watchHeap; the note says
// what could not be read.
func (hw *heapWatch) finish(ctx context.Context) (heapFigures, string) {
	f, note := noHeapFigures(), hw.note
	if hw.proc == nil {
		return f, note
	}
	m1, ok1 := memOf(ctx, hw.proc)
	if hw.rssOK {
		if hwm, err := procPeakRSS(hw.proc.pid()); err == nil {
			f.RSSBaseMB, f.RSSGrowthMB = num(float64(hw.rss0)/mib), num(float64(hwm-hw.rss0)/mib)
		}
	}
	if !hw.ok0 || !ok1 {
		return f, note + "; the proxy's /debug/vars could not be read"
	}
	f.AllocMB = num(float64(m1.TotalAlloc-hw.m0.TotalAlloc) / mib)
	f.GCs = m1.NumGC - hw.m0.NumGC
	if hw.m0.HeapPeak == nil || m1.HeapPeak == nil {
		return f, note + "; no heap_peak on /debug/vars (a Caddy built without the gatewaybench tag, or " + heapSampleEnv + " unset)"
	}
	idle, peak := hw.m0.HeapPeak.ObjectsBytes, m1.HeapPeak.PeakObjectsBytes
	f.HeapIdleMB, f.HeapPeakMB = num(float64(idle)/mib), num(float64(peak)/mib)
	f.HeapGrowthMB = num((float64(peak) - float64(idle)) / mib)
	f.HeapSamples = m1.HeapPeak.Samples
	return f, note
}

func mustRSS(pid int) (int64, bool) {
	v, err := procRSS(pid)
	return v, err == nil
}

// collect has the proxy run a garbage collection (its heap profile, asked with gc=1, runs
// one first and returns once it is done).
func collect(ctx context.Context, c *child) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	url := fmt.Sprintf("http://localhost:%d/debug/pprof/heap?gc=1", c.admin)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("collecting the proxy's garbage: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("collecting the proxy's garbage: status %d", resp.StatusCode)
	}
	return nil
}

// resetPeakRSS resets the process's peak resident set (VmHWM) to its resident set now.
func resetPeakRSS(pid int) error {
	return os.WriteFile("/proc/"+strconv.Itoa(pid)+"/clear_refs", []byte("5"), 0)
}

// procPeakRSS is the process's peak resident set size (VmHWM) in bytes.
func procPeakRSS(pid int) (int64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("malformed VmHWM %q", line)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// --- image-edit ---

// imageEditBody is an image edit's multipart body, made once and sent by every request:
// the model, a prompt and two PNG images of about size bytes each (uncompressed noise).
func imageEditBody(model string, size int) (body []byte, contentType string, err error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("model", model)
	_ = mw.WriteField("prompt", "Put the two pictures side by side for a benchmark.")
	side := max(int(math.Sqrt(float64(size)/4)), 1)
	for i := 0; i < 2; i++ {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="image[]"; filename="bench-%d.png"`, i))
		h.Set("Content-Type", "image/png")
		w, err := mw.CreatePart(h)
		if err != nil {
			return nil, "", err
		}
		img := image.NewNRGBA(image.Rect(0, 0, side, side))
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		for j := 0; j+8 <= len(img.Pix); j += 8 {
			binary.LittleEndian.PutUint64(img.Pix[j:], rng.Uint64())
		}
		if err := (&png.Encoder{CompressionLevel: png.NoCompression}).Encode(w, img); err != nil {
			return nil, "", err
		}
	}
	if err := mw.Close(); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), mw.FormDataContentType(), nil
}
