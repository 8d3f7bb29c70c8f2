package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelgateway/caddy-modelgateway/blobs"
	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/jobs"
	"github.com/modelgateway/caddy-modelgateway/jobs/music"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// The music family: POST /music/generate creates a job (jobs/music runs it), GET
// /music/generate/{id} polls it, GET /music/generate/{id}/content streams its audio from the
// blob store.

var musicCapability = capability{
	endpoint: "/music/generate",
	meters:   []string{pricing.DimOutputAudioSeconds, pricing.DimRequest},
	neutral:  func(p providers.Provider) bool { _, ok := p.(providers.MusicGenerator); return ok },
}

func init() { registerJobRenderer(store.JobMusic, (*Gateway).renderMusic) }

// Bounds of a music request.
const (
	// DefaultMusicMaxSeconds is what a request that names no duration is held for: the
	// longest song of ElevenLabs' music_v1 (5 minutes). It is charged what it made.
	DefaultMusicMaxSeconds = 300
	// maxMusicSeconds is the longest duration a request may ask (ElevenLabs' Music v2 makes
	// up to 10 minutes).
	maxMusicSeconds = 600
	maxMusicPrompt  = 10_000
	// musicDeadline is how long a music job may take to finish: past it the engine ends it
	// as expired and releases its hold.
	musicDeadline = time.Hour
	// musicPollAfter is the openai-poll-after-ms a live job is answered with.
	musicPollAfter = 2 * time.Second
)

// musicFields are the fields of POST /music/generate.
var musicFields = []string{"model", "prompt", "duration", "format", "instrumental", "webhook", "elevenlabs"}

// elevenLabsMusicFields are the fields of the elevenlabs block that the gateway passes on,
// as the top-level fields they mean; the others of ElevenLabs' API are refused.
var elevenLabsMusicFields = []string{"prompt", "music_length_ms", "force_instrumental"}

// musicRequest is a POST /music/generate body as the gateway reads it.
type musicRequest struct {
	model   string
	req     music.Request
	webhook json.RawMessage
}

// parseMusic reads a music request; the webhook endpoint it names is checked by the caller.
func parseMusic(f jsonFields) (*musicRequest, *APIError) {
	q := &musicRequest{req: music.Request{Format: "mp3"}}
	model, _, apiErr := f.str("model")
	if apiErr != nil {
		return nil, apiErr
	}
	if model == "" {
		return nil, badField(CodeModelRequired, "model", "model is required")
	}
	q.model = model
	prompt, _, apiErr := f.str("prompt")
	if apiErr != nil {
		return nil, apiErr
	}
	if raw, ok := f["duration"]; ok && !isJSONNull(raw) {
		n, ok := jsonInt(raw)
		if !ok || n < 1 || n > maxMusicSeconds {
			return nil, paramError("duration", fmt.Sprintf("duration must be a whole number of seconds from 1 to %d", maxMusicSeconds))
		}
		q.req.Duration = int(n)
	}
	if format, present, apiErr := f.str("format"); apiErr != nil {
		return nil, apiErr
	} else if present {
		if _, ok := music.Formats[format]; !ok {
			return nil, paramError("format", "format must be one of mp3, wav, ogg, aac")
		}
		q.req.Format = format
	}
	if raw, ok := f["instrumental"]; ok && !isJSONNull(raw) {
		if err := json.Unmarshal(raw, &q.req.Instrumental); err != nil {
			return nil, paramError("instrumental", "instrumental must be true or false")
		}
	}
	if raw, ok := f["elevenlabs"]; ok && !isJSONNull(raw) {
		if apiErr := q.readElevenLabs(raw, &prompt); apiErr != nil {
			return nil, apiErr
		}
	}
	if strings.TrimSpace(prompt) == "" {
		return nil, paramError("prompt", "prompt is required: a description of the music to make")
	}
	if utf8.RuneCountInString(prompt) > maxMusicPrompt {
		return nil, paramError("prompt", fmt.Sprintf("prompt is longer than %d characters", maxMusicPrompt))
	}
	q.req.Prompt = prompt
	if raw, ok := f["webhook"]; ok && !isJSONNull(raw) {
		q.webhook = raw
	}
	return q, nil
}

// readElevenLabs reads the vendor block elevenlabs{...}: its fields that mean a top-level
// one are taken as it (and must agree with it when both are given); the others of
// ElevenLabs' API have no meaning through this gateway and are refused by name.
func (q *musicRequest) readElevenLabs(raw json.RawMessage, prompt *string) *APIError {
	var block map[string]json.RawMessage
	if err := json.Unmarshal(raw, &block); err != nil || block == nil {
		return paramError("elevenlabs", "elevenlabs must be an object such as {\"music_length_ms\": 30000}")
	}
	for k := range block {
		if !slices.Contains(elevenLabsMusicFields, k) {
			return paramError("elevenlabs."+k, fmt.Sprintf(
				"elevenlabs.%s is not supported by this gateway (the elevenlabs block takes %s; model_id is the route's upstream model, chosen with model)",
				k, strings.Join(elevenLabsMusicFields, ", ")))
		}
	}
	if v, ok := block["prompt"]; ok {
		var s string
		if json.Unmarshal(v, &s) != nil {
			return paramError("elevenlabs.prompt", "elevenlabs.prompt must be a string")
		}
		if *prompt != "" && *prompt != s {
			return paramError("elevenlabs.prompt", "prompt and elevenlabs.prompt differ; give one")
		}
		*prompt = s
	}
	if v, ok := block["music_length_ms"]; ok {
		ms, ok := jsonInt(v)
		if !ok || ms <= 0 || ms%1000 != 0 || ms/1000 > maxMusicSeconds {
			return paramError("elevenlabs.music_length_ms", fmt.Sprintf("elevenlabs.music_length_ms must be whole seconds (a multiple of 1000) up to %d", maxMusicSeconds*1000))
		}
		if q.req.Duration != 0 && q.req.Duration != int(ms/1000) {
			return paramError("elevenlabs.music_length_ms", "duration and elevenlabs.music_length_ms differ; give one")
		}
		q.req.Duration = int(ms / 1000)
	}
	if v, ok := block["force_instrumental"]; ok {
		var b bool
		if json.Unmarshal(v, &b) != nil {
			return paramError("elevenlabs.force_instrumental", "elevenlabs.force_instrumental must be true or false")
		}
		q.req.Instrumental = q.req.Instrumental || b
	}
	return nil
}

// musicOff answers a music route while the gateway cannot run music jobs.
func (g *Gateway) musicOff() *APIError {
	switch {
	case g.Jobs == nil:
		return newError(http.StatusServiceUnavailable, CodeNotConfigured, "music generation is off: this gateway runs no jobs engine")
	case g.Blobs == nil:
		return newError(http.StatusServiceUnavailable, CodeNotConfigured, "music generation is off: the gateway has no blob store to keep the audio in (blob_store)")
	}
	return nil
}

// musicRoute is the route a music job is made on, with what it holds and how it starts.
type musicRoute struct {
	Route
	most  int64
	async bool
}

// pickMusicRoute picks the first route of the model that makes music, prices its seconds
// (on a paid model) and accepts the request (providers.MusicPlanner); a job stays on the
// route it was made on. Every route refused is noted for routing_diagnostics.
func (g *Gateway) pickMusicRoute(m *Model, routes []Route, dropped []droppedRoute, q *musicRequest) (musicRoute, *APIError) {
	var refused error
	seconds := q.req.MaxSeconds
	for _, rt := range routes {
		pick := musicRoute{Route: rt}
		if !m.Free() {
			if rt.Price.PerUnit(pricing.DimOutputAudioSeconds) == 0 {
				refused = newError(http.StatusBadRequest, CodeUnsupportedModel, fmt.Sprintf(
					"model %q has no price for output_audio_seconds on route %s: music is billed by the second of audio made, and the gateway never bills it $0", m.Name, rt.ProviderName))
				dropped = append(dropped, droppedRoute{stagePricing, rt.ProviderName, reasonMissingPricing})
				continue
			}
			_, most, err := rt.Price.Cost(pricing.Usage{OutputAudio: time.Duration(seconds) * time.Second})
			if err != nil {
				refused = err
				dropped = append(dropped, droppedRoute{stagePricing, rt.ProviderName, reasonUnbillable})
				continue
			}
			pick.most = most
		}
		if pl, ok := rt.Provider.(providers.MusicPlanner); ok {
			async, err := pl.PlanMusic(q.req.Neutral(rt.UpstreamModel))
			if err != nil {
				refused = err
				dropped = append(dropped, droppedRoute{stageRequestFit, rt.ProviderName, reasonUnsupportedRequest})
				continue
			}
			pick.async = async
		}
		return pick, nil
	}
	var apiErr *APIError
	if ue, ok := providers.AsUpstreamError(refused); ok {
		c := &call{g: g, model: m, skipped: dropped}
		return musicRoute{}, c.upstreamFailure(ue)
	}
	if !errors.As(refused, &apiErr) {
		apiErr = priceError(refused, "")
	}
	return musicRoute{}, withRouting(apiErr, m, dropped)
}

// reasonUnsupportedRequest notes a route whose adapter refused the request before any call.
const reasonUnsupportedRequest = "unsupported_request"

// createMusic serves POST /music/generate: the job is held for (its duration, or
// DefaultMusicMaxSeconds, at the route's price of a second of output audio), stored, and
// answered at once as queued; the jobs engine makes it (jobs/music).
func (g *Gateway) createMusic(w http.ResponseWriter, r *http.Request, caller *Caller) error {
	if apiErr := g.musicOff(); apiErr != nil {
		return apiErr
	}
	f, apiErr := g.readObject(w, r, musicFields...)
	if apiErr != nil {
		return apiErr
	}
	q, apiErr := parseMusic(f)
	if apiErr != nil {
		return apiErr
	}
	q.req.MaxSeconds = q.req.Duration
	if q.req.MaxSeconds == 0 {
		q.req.MaxSeconds = DefaultMusicMaxSeconds
	}
	retention := g.MusicRetention
	if retention <= 0 {
		retention = music.DefaultRetention
	}
	q.req.RetentionSeconds = int64((retention + time.Second - 1) / time.Second)
	m, routes, dropped, apiErr := g.Registry.candidates(q.model, &musicCapability)
	if apiErr != nil {
		return apiErr
	}
	if !g.isFor(m, &musicCapability) {
		return g.notServed(m, &musicCapability)
	}
	rt, apiErr := g.pickMusicRoute(m, routes, dropped, q)
	if apiErr != nil {
		return apiErr
	}
	var hook json.RawMessage
	if q.webhook != nil {
		var err error
		if hook, err = g.parseJobWebhook(r.Context(), caller, store.JobMusic, q.webhook); err != nil {
			return err
		}
	}
	request, err := json.Marshal(q.req)
	if err != nil {
		return err
	}
	now := g.Now()
	j := store.Job{
		ID: ids.New("music"), WorkspaceID: caller.Key.WorkspaceID, Kind: store.JobMusic, KeyID: caller.Key.ID,
		Model: m.Name, Provider: rt.ProviderName, UpstreamModel: rt.UpstreamModel,
		Request: request, Webhook: hook, CreatedAt: now, ExpiresAt: now.Add(musicDeadline),
	}
	// The removal of the audio is scheduled before the job exists, so that no job's audio
	// is left without one; an entry whose job never came removes nothing.
	if err := music.ScheduleExpiry(r.Context(), g.Store, j, retention, now); err != nil {
		return g.storeUnavailable("scheduling the music's expiry", err)
	}
	sub := jobs.Submission{Job: j, Most: rt.most, Endpoint: musicCapability.endpoint,
		// A synchronous upstream has nothing to start: the worker makes the song, as soon as
		// it can.
		Start: func(context.Context) (string, jobs.Report, error) {
			return "", jobs.Report{Status: jobs.StatusQueued, PollAfter: time.Nanosecond}, nil
		},
	}
	if rt.async {
		gen := rt.Provider.(providers.MusicGenerator) // the capability checked it
		sub.Start = func(ctx context.Context) (string, jobs.Report, error) {
			st, err := gen.GenerateMusic(ctx, q.req.Neutral(rt.UpstreamModel))
			if err != nil {
				return "", jobs.Report{}, err
			}
			if st.Audio != nil {
				// A task's audio is read when a poll finds it completed.
				_ = st.Audio.Close()
			}
			if st.NativeID == "" {
				return "", jobs.Report{}, &providers.UpstreamError{Provider: rt.ProviderName, Category: providers.CategoryServerError,
					Message: "the provider answered no task id for the music"}
			}
			return st.NativeID, jobs.Report{Status: jobs.StatusQueued, Progress: st.Progress, PollAfter: st.PollAfter}, nil
		}
	}
	created, err := g.Jobs.Submit(r.Context(), sub)
	if err != nil {
		g.noteKeyLimit(&caller.Key, err)
		return g.musicSubmitError(m, rt, dropped, err)
	}
	v, err := g.renderMusic(r, created)
	if err != nil {
		return err
	}
	w.Header().Set("openai-poll-after-ms", strconv.FormatInt(musicPollAfter.Milliseconds(), 10))
	return writeJSON(w, http.StatusOK, v)
}

// musicSubmitError answers a music job that could not be created: its hold refused (credit, a key's
// limit, the store), or its upstream's refusal to start it.
func (g *Gateway) musicSubmitError(m *Model, rt musicRoute, dropped []droppedRoute, err error) error {
	endpoint := musicCapability.endpoint
	if errors.Is(err, store.ErrInsufficientFunds) {
		required := max(rt.most, MinPreflightNanos)
		e := newError(http.StatusPaymentRequired, CodeInsufficientFunds, fmt.Sprintf(
			"insufficient credit: this job needs an available balance of at least %s USD (1.00 USD minimum, worst-case cost %s USD, held until it ends); add credits to the workspace",
			pricing.FormatUSD(required), pricing.FormatUSD(rt.most)))
		e.Extra = map[string]any{"required_nanos": required}
		return g.Metrics.refused(endpoint, m.Name, e)
	}
	if e := keyLimitError(err, g.Now()); e != nil {
		return g.Metrics.refused(endpoint, m.Name, e)
	}
	if ue, ok := providers.AsUpstreamError(err); ok {
		c := &call{g: g, model: m, skipped: dropped}
		c.addFailure(rt.Route, ue)
		return c.upstreamFailure(ue)
	}
	if errors.Is(err, store.ErrUnavailable) {
		return g.storeUnavailable("creating the music job", err)
	}
	return err
}

// musicNotFound answers a music id that is not one of the workspace's.
func musicNotFound() *APIError {
	e := newError(http.StatusNotFound, CodeNotFound, "music not found or not owned")
	e.Param = "music_id"
	e.Extra = map[string]any{"reason": "music_not_found_or_not_owned"}
	return e
}

// ownMusic returns the workspace's music job named by the path, or 404: another
// workspace's, another kind's and a missing one alike.
func (g *Gateway) ownMusic(r *http.Request, c *Caller) (store.Job, error) {
	j, err := g.Store.GetJob(r.Context(), c.Key.WorkspaceID, r.PathValue("music_id"))
	switch {
	case errors.Is(err, store.ErrNotFound), err == nil && j.Kind != store.JobMusic:
		return store.Job{}, musicNotFound()
	case err != nil:
		return store.Job{}, err
	}
	return j, nil
}

// getMusic serves GET /music/generate/{music_id}: the job as it stands. It needs no credit.
func (g *Gateway) getMusic(w http.ResponseWriter, r *http.Request, c *Caller) error {
	j, err := g.ownMusic(r, c)
	if err != nil {
		return err
	}
	v, err := g.renderMusic(r, j)
	if err != nil {
		return err
	}
	if !jobs.Terminal(j.Status) {
		w.Header().Set("openai-poll-after-ms", strconv.FormatInt(musicPollAfter.Milliseconds(), 10))
	}
	return writeJSON(w, http.StatusOK, v)
}

// musicLifecycle is a music job's lifecycle_status (jobs.LifecycleStatus), expired also for
// a completed job whose audio was removed.
func musicLifecycle(j store.Job, res music.Result, hasResult bool, now time.Time) string {
	if j.Status == jobs.StatusCompleted && hasResult && !now.Before(res.ExpiresAt) {
		return jobs.StatusExpired
	}
	return jobs.LifecycleStatus(j.Status)
}

// musicOutput is one audio of a music object.
type musicOutput struct {
	Index       int     `json:"index"`
	AudioURL    string  `json:"audio_url"`
	ContentType string  `json:"content_type"`
	Bytes       int64   `json:"bytes"`
	SHA256      string  `json:"sha256"`
	Duration    float64 `json:"duration"`
}

// musicObject is the public music object.
type musicObject struct {
	ID              string           `json:"id"`
	Object          string           `json:"object"`
	Status          string           `json:"status"`
	LifecycleStatus string           `json:"lifecycle_status"`
	Model           string           `json:"model"`
	Provider        string           `json:"provider"`
	CreatedAt       int64            `json:"created_at"`
	CompletedAt     *int64           `json:"completed_at"`
	ExpiresAt       *int64           `json:"expires_at"`
	Duration        *int             `json:"duration"`
	Format          string           `json:"format"`
	Progress        int              `json:"progress"`
	PollingURL      string           `json:"polling_url"`
	WebsocketURL    string           `json:"websocket_url"`
	Webhook         any              `json:"webhook"`
	Output          []musicOutput    `json:"output"`
	Usage           *musicUsage      `json:"usage"`
	Error           *jobs.EventError `json:"error"`
}

type musicUsage struct {
	OutputAudioSeconds int64 `json:"output_audio_seconds"`
}

// renderMusic is the public object of music job j.
func (g *Gateway) renderMusic(r *http.Request, j store.Job) (any, error) {
	req, _ := music.ReadRequest(j)
	res, hasResult := music.ReadResult(j)
	path := "/music/generate/" + j.ID
	o := musicObject{
		ID: j.ID, Object: "music", Status: jobs.PublicStatus(j.Kind, j.Status), LifecycleStatus: musicLifecycle(j, res, hasResult, g.Now()),
		Model: j.Model, Provider: j.Provider, CreatedAt: j.CreatedAt.Unix(), Format: req.Format, Progress: j.Progress,
		Output: []musicOutput{},
	}
	o.PollingURL, o.WebsocketURL = g.jobURLs(r, path, store.JobMusic, j.ID)
	if req.Duration > 0 {
		o.Duration = &req.Duration
	}
	if !j.CompletedAt.IsZero() {
		o.CompletedAt = musicPtr(j.CompletedAt.Unix())
	}
	switch {
	case hasResult:
		o.ExpiresAt = musicPtr(res.ExpiresAt.Unix())
	case !jobs.Terminal(j.Status) && !j.ExpiresAt.IsZero():
		o.ExpiresAt = musicPtr(j.ExpiresAt.Unix())
	}
	if hasResult && o.LifecycleStatus == jobs.StatusCompleted {
		audioURL, _ := g.jobURLs(r, path+"/content", store.JobMusic, j.ID)
		o.Output = append(o.Output, musicOutput{
			AudioURL: audioURL, ContentType: res.ContentType, Bytes: res.Bytes, SHA256: res.SHA256,
			Duration: float64(res.DurationMs) / 1000,
		})
	}
	if j.Status == jobs.StatusCompleted && len(j.Usage) > 0 {
		var u pricing.Usage
		if err := json.Unmarshal(j.Usage, &u); err == nil {
			o.Usage = &musicUsage{OutputAudioSeconds: int64((u.OutputAudio + time.Second - 1) / time.Second)}
		}
	}
	if j.ErrorCode != "" || j.ErrorMessage != "" {
		o.Error = &jobs.EventError{Code: j.ErrorCode, Message: j.ErrorMessage}
	}
	hook, err := g.jobWebhook(r.Context(), j)
	if err != nil {
		return nil, err
	}
	o.Webhook = hook
	return o, nil
}

func musicPtr(v int64) *int64 { return &v }

// musicContent serves GET /music/generate/{music_id}/content: the audio, streamed from the
// blob store, whole or by the client's Range (206 with Content-Range), with the blob's
// SHA-256 as its ETag.
func (g *Gateway) musicContent(w http.ResponseWriter, r *http.Request, c *Caller) error {
	if g.Blobs == nil {
		return g.musicOff()
	}
	// The job's lookup is bounded as a poll is; the audio's stream is not.
	ctx, cancel := g.storeContext(r.Context())
	j, err := g.ownMusic(r.WithContext(ctx), c)
	cancel()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return g.storeUnavailable("reading the music job", err)
		}
		return err
	}
	res, ok := music.ReadResult(j)
	switch {
	case j.Status != jobs.StatusCompleted:
		e := newError(http.StatusNotFound, CodeNotFound, fmt.Sprintf("music %s has no audio: it is %s", j.ID, jobs.PublicStatus(j.Kind, j.Status)))
		e.Param = "music_id"
		return e
	case !ok || !g.Now().Before(res.ExpiresAt):
		return musicExpired(j.ID)
	}
	info, err := g.Blobs.Stat(r.Context(), res.BlobKey)
	if errors.Is(err, blobs.ErrNotFound) {
		return musicExpired(j.ID)
	}
	if err != nil {
		return fmt.Errorf("reading the audio of %s: %w", j.ID, err)
	}
	h := w.Header()
	h.Set("Content-Type", info.ContentType)
	if info.SHA256 != "" {
		h.Set("ETag", `"`+info.SHA256+`"`)
	}
	// The key's last segment is the music id and its format's extension: safe characters.
	h.Set("Content-Disposition", `attachment; filename="`+path.Base(res.BlobKey)+`"`)
	body := &blobSeeker{ctx: r.Context(), store: g.Blobs, key: res.BlobKey, size: info.Size}
	defer body.Close()
	http.ServeContent(w, r, "", info.ModTime, body)
	return nil
}

func musicExpired(id string) *APIError {
	e := newError(http.StatusNotFound, CodeNotFound, fmt.Sprintf("the audio of music %s has expired and was removed", id))
	e.Param = "music_id"
	e.Extra = map[string]any{"reason": "music_audio_expired"}
	return e
}

// blobSeeker reads a blob as an io.ReadSeeker for http.ServeContent: a seek costs nothing,
// and the read after it opens the blob from there (one ranged read of the store for each
// range served), so that a range of a large blob is read, not the blob.
type blobSeeker struct {
	ctx   context.Context
	store blobs.Store
	key   string
	size  int64
	off   int64
	rc    io.ReadCloser
}

func (b *blobSeeker) Read(p []byte) (int, error) {
	if b.off >= b.size {
		return 0, io.EOF
	}
	if b.rc == nil {
		rc, _, err := b.store.Open(b.ctx, b.key, b.off, -1)
		if err != nil {
			return 0, err
		}
		b.rc = rc
	}
	n, err := b.rc.Read(p)
	b.off += int64(n)
	return n, err
}

func (b *blobSeeker) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekCurrent:
		offset += b.off
	case io.SeekEnd:
		offset += b.size
	}
	if offset < 0 {
		return 0, errors.New("seek before the start of the blob")
	}
	if offset != b.off {
		b.Close()
		b.off = offset
	}
	return offset, nil
}

func (b *blobSeeker) Close() {
	if b.rc != nil {
		_ = b.rc.Close()
		b.rc = nil
	}
}
