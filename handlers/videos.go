package handlers

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/internal/upload"
	"github.com/modelgateway/caddy-modelgateway/jobs"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Video generation jobs, in OpenAI's Videos API with Veo's parameters beside:
//
//	POST   /videos                          create (JSON or multipart); the job object
//	GET    /videos                          the workspace's jobs, newest first (after, limit, order, status)
//	GET    /videos/models                   the models that make videos, with their prices
//	GET    /videos/{id}                     the job object; openai-poll-after-ms while it runs
//	GET    /videos/{id}/content             the bytes of a completed job, streamed (Range passed on);
//	                                        with a key, or a signed link instead of one
//	POST   /videos/{id}/download_url        a signed link to the content, valid ttl_seconds
//	DELETE /videos/{id}                     a terminal job, upstream and here
//	POST   /videos/{id}/cancel              501 not_implemented_yet
//
// A job is created under a durable hold of its worst case (its seconds at the dearest price
// per second of the resolution asked, on the dearest route that may make it), started on
// the first route whose upstream takes it, and polled by the jobs engine (the video Kind
// below), which settles it at what was made or releases the hold. Its public status stays
// within queued, in_progress, completed and failed, which openai-go's poll helper knows;
// lifecycle_status tells the finer states (a cancelled or expired job shows failed, with its
// error's code). Another workspace's job is 404, exactly like a missing one.

// Error codes of the video routes.
const (
	// CodeVideoNotTerminal (409) refuses deleting a job that has not ended.
	CodeVideoNotTerminal = "video_not_terminal"
	// CodeVideoNotReady (409) refuses the content of a job that has not completed.
	CodeVideoNotReady = "video_not_ready"
	// CodeLinkExpired and CodeLinkInvalid (403) refuse a download link past its expiry, or
	// one whose signature does not match (altered, or signed by another key).
	CodeLinkExpired = "link_expired"
	CodeLinkInvalid = "invalid_link_signature"
	// CodeRangeNotSatisfiable (416) refuses a Range past the content's end.
	CodeRangeNotSatisfiable = "range_not_satisfiable"
)

// Bounds and defaults of a video request.
const (
	// DefaultVideoUpload bounds a create's body (its input_reference image) unless a
	// route sets max_upload.
	DefaultVideoUpload int64 = 50 << 20
	// defaultVideoSeconds is OpenAI's default clip length.
	defaultVideoSeconds = 4
	maxVideoSeconds     = 120
	// defaultVideoModel is OpenAI's default model, which a create that names none asks.
	defaultVideoModel = "sora-2"
	// videoJobTTL is how long a job may run before the engine ends it as expired; its
	// expires_at.
	videoJobTTL = 24 * time.Hour
	// Download links live from a minute to an hour, a quarter of an hour by default.
	minLinkTTL, maxLinkTTL, defaultLinkTTL = 60, 3600, 900
	maxVideoMetadata                       = 16
)

// videoVariants are the content variants OpenAI names.
var videoVariants = []string{"video", "thumbnail", "spritesheet"}

func isVideoGenerator(p providers.Provider) bool {
	_, ok := p.(providers.VideoGenerator)
	return ok
}

// videoCapability is what the video routes ask of a model's routes: an adapter that makes
// videos, priced per second of video (or per request).
var videoCapability = capability{endpoint: "/videos", neutral: isVideoGenerator, meters: []string{pricing.DimOutputVideoSeconds, pricing.DimRequest}}

func init() {
	jobs.Register(store.JobVideo, videoKind{})
	registerJobRenderer(store.JobVideo, func(g *Gateway, r *http.Request, j store.Job) (any, error) {
		return g.videoObject(r, j)
	})
}

// videoJobRequest is what a video job keeps of its request (store.Job.Request): what its
// object shows, and what its usage is when the upstream does not say.
type videoJobRequest struct {
	Prompt         string            `json:"prompt"`
	Seconds        int               `json:"seconds"`
	Size           string            `json:"size,omitempty"`
	Resolution     string            `json:"resolution,omitempty"`
	AspectRatio    string            `json:"aspect_ratio,omitempty"`
	NegativePrompt string            `json:"negative_prompt,omitempty"`
	Seed           *int64            `json:"seed,omitempty"`
	InputReference bool              `json:"input_reference,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
}

// videoJobResult is what a video job keeps of its upstream's reports (store.Job.Result):
// what the upstream said at the start (the pace it asks, the seconds, size and resolution
// it makes), then, once it ended, what it says it made and the adapter's state for
// reading it.
type videoJobResult struct {
	Seconds    float64  `json:"seconds,omitempty"`
	Size       string   `json:"size,omitempty"`
	Resolution string   `json:"resolution,omitempty"`
	Variants   []string `json:"variants,omitempty"`
	Samples    int      `json:"samples,omitempty"`
	State      []byte   `json:"state,omitempty"`
	// PollAfterMs is, while the job runs, the pace its upstream asked for when it started:
	// the openai-poll-after-ms its object is sent with.
	PollAfterMs int64 `json:"poll_after_ms,omitempty"`
}

// videoKind polls video jobs: the jobs engine's Kind of store.JobVideo.
type videoKind struct{}

// Poll asks the job's route, as the newest configuration has it, where the job stands. A
// job its upstream no longer knows ends failed; any other failure is retried.
func (videoKind) Poll(ctx context.Context, env jobs.Env, j store.Job) (jobs.Report, error) {
	rt, ok := env.Route(j)
	if !ok {
		return jobs.Report{}, fmt.Errorf("route %s/%s of video %s is not configured", j.Provider, j.UpstreamModel, j.ID)
	}
	vg, ok := rt.Upstream.(providers.VideoGenerator)
	if !ok {
		return jobs.Report{}, &jobs.Failure{Code: "route_not_video", Message: fmt.Sprintf("provider %s no longer makes videos", j.Provider)}
	}
	st, err := vg.PollVideo(ctx, j.UpstreamModel, j.NativeID)
	if err != nil {
		if ue, ok := upstreamNotFound(err); ok {
			return jobs.Report{}, &jobs.Failure{Code: "upstream_job_not_found", Message: "the provider no longer knows the job: " + ue.Message}
		}
		return jobs.Report{}, err
	}
	return videoReport(st, askedOf(j)), nil
}

// askedOf is what job j asked for, as its upstream took it when it started (the pace
// it asked, and the seconds, size and resolution it said it makes: an upstream such as Veo
// says them only then), else as the request said it.
func askedOf(j store.Job) videoJobResult {
	var req videoJobRequest
	var started videoJobResult
	_ = json.Unmarshal(j.Request, &req) // the job's own; a zero one leaves it to the upstream's word
	_ = json.Unmarshal(j.Result, &started)
	if started.Seconds <= 0 {
		started.Seconds = float64(req.Seconds)
	}
	started.Size = firstNonEmpty(started.Size, req.Size)
	started.Resolution = firstNonEmpty(started.Resolution, req.Resolution)
	return started
}

// upstreamNotFound tells an upstream's answer that it has no such job or content: its 404,
// or an adapter's refusal of a variant or sample it does not make.
func upstreamNotFound(err error) (*providers.UpstreamError, bool) {
	ue, ok := providers.AsUpstreamError(err)
	return ue, ok && (ue.Category == providers.CategoryNotFound || ue.Status == http.StatusNotFound)
}

// videoReport is where an upstream's status leaves a job asked for asked: while it runs,
// the pace asked and what it is said to make (kept from the start: askedOf); on
// completion, the usage it is charged (the seconds and resolution the upstream says it
// made, else those asked) and its result.
func videoReport(st *providers.VideoStatus, asked videoJobResult) jobs.Report {
	rep := jobs.Report{Status: st.Status, Progress: min(max(st.Progress, 0), 100), PollAfter: st.PollAfter, ErrorCode: st.ErrorCode, ErrorMessage: st.ErrorMessage}
	if st.Status == providers.JobFailed && rep.ErrorCode == "" {
		rep.ErrorCode = "video_generation_failed"
	}
	res := videoJobResult{
		Seconds: st.Seconds.Seconds(), Size: firstNonEmpty(st.Size, asked.Size), Resolution: firstNonEmpty(st.Resolution, asked.Resolution),
	}
	if res.Seconds <= 0 {
		res.Seconds = asked.Seconds
	}
	if res.Resolution == "" {
		res.Resolution = resolutionOf(res.Size)
	}
	switch st.Status {
	case providers.JobCompleted:
		res.Variants, res.Samples, res.State = st.Variants, max(st.Samples, 1), st.State
		rep.Usage = pricing.Usage{OutputVideo: time.Duration(res.Seconds * float64(time.Second)), VideoResolution: res.Resolution}
	case providers.JobFailed:
		return rep
	default:
		res.PollAfterMs = st.PollAfter.Milliseconds()
	}
	rep.Result, _ = json.Marshal(res) // strings and numbers
	return rep
}

// videoCreate is a create request as read.
type videoCreate struct {
	model, prompt                         string
	seconds                               int
	size, resolution, aspectRatio, negPro string
	seed                                  *int64
	reference                             *providers.ImageInput
	// webhook is the job's webhook as sent, JSON; parseJobWebhook reads it.
	webhook  json.RawMessage
	metadata map[string]string
}

// videoInput holds a create's fields as sent, before they are checked: JSON and multipart
// alike, numbers as their text.
type videoInput struct {
	fields   map[string]string
	refURL   string
	refFile  *upload.Part
	webhook  json.RawMessage
	metadata map[string]string
}

// The fields of a create, beside input_reference, webhook and metadata.
var videoTextFields = []string{"model", "prompt", "seconds", "size", "resolution", "aspect_ratio", "negative_prompt", "seed"}

func videoFieldsList() string {
	return strings.Join(append(slices.Clone(videoTextFields), "input_reference", "webhook", "metadata"), ", ")
}

func unknownVideoField(name string) *APIError {
	return paramError(name, fmt.Sprintf("unknown field %q; POST /videos takes %s", name, videoFieldsList()))
}

// readVideoJSON reads a JSON create.
func readVideoJSON(body []byte) (*videoInput, *APIError) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil || obj == nil {
		return nil, newError(http.StatusBadRequest, CodeInvalidJSON, "the request body must be a JSON object")
	}
	in := &videoInput{fields: map[string]string{}}
	for k, raw := range obj {
		if isJSONNull(raw) {
			continue
		}
		switch {
		case slices.Contains(videoTextFields, k):
			var s string
			if json.Unmarshal(raw, &s) != nil {
				if (k != "seconds" && k != "seed") || !isJSONNumber(raw) {
					return nil, paramError(k, k+" must be a string")
				}
				s = string(raw)
			}
			in.fields[k] = s
		case k == "input_reference":
			var ref struct {
				ImageURL string `json:"image_url"`
				FileID   string `json:"file_id"`
			}
			if json.Unmarshal(raw, &in.refURL) != nil {
				if err := json.Unmarshal(raw, &ref); err != nil {
					return nil, paramError(k, `input_reference must be {"image_url": "data:image/...;base64,..."} or a multipart file`)
				}
				if ref.FileID != "" {
					return nil, paramError(k, "input_reference.file_id is not supported by this gateway; send the image as a data URL or a multipart file")
				}
				in.refURL = ref.ImageURL
			}
		case k == "webhook":
			in.webhook = raw
		case k == "metadata":
			if err := json.Unmarshal(raw, &in.metadata); err != nil {
				return nil, paramError(k, "metadata must be an object of strings")
			}
		default:
			return nil, unknownVideoField(k)
		}
	}
	return in, nil
}

// readVideoForm reads a multipart create, read whole: webhook[endpoint_id],
// webhook[events][], metadata[key] and input_reference[image_url] are its nested fields.
func readVideoForm(form *upload.Form) (*videoInput, *APIError) {
	in := &videoInput{fields: map[string]string{}}
	hook, events := map[string]any{}, []string(nil)
	for _, p := range form.Parts() {
		switch {
		case p.Name == "input_reference" && p.File:
			if in.refFile != nil {
				return nil, paramError("input_reference", "input_reference is one image")
			}
			in.refFile = &p
		case p.File:
			return nil, paramError(p.Name, fmt.Sprintf("%s must be a text field, not a file; only input_reference is a file", p.Name))
		case slices.Contains(videoTextFields, p.Name):
			in.fields[p.Name] = p.Value
		case p.Name == "input_reference[image_url]":
			in.refURL = p.Value
		case p.Name == "input_reference[file_id]":
			return nil, paramError("input_reference", "input_reference[file_id] is not supported by this gateway; send the image as a file or a data URL")
		case slices.Contains(webhookFormFields, p.Name):
			hook[p.Name[len("webhook["):len(p.Name)-1]] = p.Value
		case listField(p.Name, "webhook[events]"):
			events = append(events, p.Value)
		case strings.HasPrefix(p.Name, "metadata[") && strings.HasSuffix(p.Name, "]"):
			if in.metadata == nil {
				in.metadata = map[string]string{}
			}
			in.metadata[p.Name[len("metadata["):len(p.Name)-1]] = p.Value
		default:
			return nil, unknownVideoField(p.Sent)
		}
	}
	if events != nil {
		hook["events"] = events
	}
	if len(hook) > 0 {
		in.webhook, _ = json.Marshal(hook) // strings
	}
	return in, nil
}

// webhookFormFields are the multipart names of a job's webhook fields (its events are
// webhook[events][]).
var webhookFormFields = []string{"webhook[endpoint_id]", "webhook[url]", "webhook[secret]"}

// listField tells a multipart field name that is an element of the nested list base:
// base itself, base[] or base[N] (the upload form keeps nested names whole).
func listField(name, base string) bool {
	rest, ok := strings.CutPrefix(name, base)
	if !ok {
		return false
	}
	if rest == "" || rest == "[]" {
		return true
	}
	n, ok := strings.CutPrefix(rest, "[")
	n, ok2 := strings.CutSuffix(n, "]")
	_, err := strconv.ParseUint(n, 10, 16)
	return ok && ok2 && err == nil
}

// check validates a create's fields; the input reference's bytes are read by the caller.
func (in *videoInput) check() (*videoCreate, *APIError) {
	f := in.fields
	q := &videoCreate{model: f["model"], prompt: f["prompt"], seconds: defaultVideoSeconds, size: strings.ToLower(f["size"]),
		resolution: strings.ToLower(f["resolution"]), aspectRatio: f["aspect_ratio"], negPro: f["negative_prompt"], metadata: in.metadata}
	if q.model == "" {
		q.model = defaultVideoModel
	}
	if strings.TrimSpace(q.prompt) == "" && in.refFile == nil && in.refURL == "" {
		return nil, badField(CodeValidation, "prompt", "prompt is required (it may be empty only with an input_reference)")
	}
	if s, ok := f["seconds"]; ok {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > maxVideoSeconds {
			return nil, paramError("seconds", fmt.Sprintf(`seconds must be a whole number of seconds from 1 to %d, such as "4", "8" or "12"`, maxVideoSeconds))
		}
		q.seconds = n
	}
	if s, ok := f["seed"]; ok {
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return nil, paramError("seed", "seed must be an integer")
		}
		q.seed = &n
	}
	switch {
	case q.size != "" && (q.resolution != "" || q.aspectRatio != ""):
		return nil, paramError("size", "give size (WIDTHxHEIGHT), or resolution and aspect_ratio, not both")
	case q.size != "":
		w, h, ok := parseImageSize(q.size)
		if !ok {
			return nil, paramError("size", `size must be WIDTHxHEIGHT, such as "1280x720"`)
		}
		q.resolution, q.aspectRatio = resolutionOf(q.size), aspectOf(w, h)
	default:
		if q.resolution != "" && videoHeight(q.resolution) == 0 {
			return nil, paramError("resolution", `resolution must be such as "720p", "1080p" or "4k"`)
		}
		if q.aspectRatio != "" {
			w, h, ok := parseAspect(q.aspectRatio)
			if !ok {
				return nil, paramError("aspect_ratio", `aspect_ratio must be WIDTH:HEIGHT, such as "16:9"`)
			}
			if q.resolution != "" {
				q.size = sizeOf(videoHeight(q.resolution), w, h)
			}
		}
	}
	if len(q.metadata) > maxVideoMetadata {
		return nil, paramError("metadata", fmt.Sprintf("metadata has %d keys, at most %d", len(q.metadata), maxVideoMetadata))
	}
	q.webhook = in.webhook
	return q, nil
}

// resolutionOf is the resolution of a WIDTHxHEIGHT size as prices name it, its short
// side: "720p" for 1280x720; "" for no size.
func resolutionOf(size string) string {
	w, h, ok := parseImageSize(size)
	if !ok {
		return ""
	}
	return strconv.FormatInt(min(w, h), 10) + "p"
}

// videoHeight is the short side of a resolution ("720p", "4k"), 0 when it is none.
func videoHeight(resolution string) int64 {
	if strings.EqualFold(resolution, "4k") {
		return 2160
	}
	n, err := strconv.ParseInt(strings.TrimSuffix(strings.ToLower(resolution), "p"), 10, 64)
	if err != nil || !strings.HasSuffix(strings.ToLower(resolution), "p") || n <= 0 || n > maxImageSide {
		return 0
	}
	return n
}

func parseAspect(s string) (w, h int64, ok bool) {
	a, b, found := strings.Cut(s, ":")
	w, err1 := strconv.ParseInt(a, 10, 64)
	h, err2 := strconv.ParseInt(b, 10, 64)
	return w, h, found && err1 == nil && err2 == nil && w > 0 && h > 0 && w <= 100 && h <= 100
}

func aspectOf(w, h int64) string {
	a, b := w, h
	for b != 0 {
		a, b = b, a%b
	}
	return fmt.Sprintf("%d:%d", w/a, h/a)
}

// sizeOf is the size of a video whose short side is short, at aspect w:h.
func sizeOf(short, w, h int64) string {
	if w >= h {
		return fmt.Sprintf("%dx%d", short*w/h, short)
	}
	return fmt.Sprintf("%dx%d", short, short*h/w)
}

// videoWorst is the most a video of seconds at resolution may cost at p: its seconds at
// the price of that resolution, or of the dearest resolution p prices when the upstream
// chooses (resolution ""). A resolution p has no price for fails with an
// *pricing.UnpricedError.
func videoWorst(p pricing.Price, seconds int, resolution string) (int64, error) {
	u := pricing.Usage{OutputVideo: time.Duration(seconds) * time.Second, VideoResolution: resolution}
	if resolution == "" {
		var dearest int64 = -1
		for _, vp := range p.VideoSeconds() {
			if vp.Nanos > dearest {
				dearest, u.VideoResolution = vp.Nanos, vp.Resolution
			}
		}
	}
	_, total, err := p.Cost(u)
	return total, err
}

// readVideoReference reads the input reference whole: an adapter sends it inline. It is
// bounded by the upload limit (a file) or the body's (a data URL).
func readVideoReference(form *upload.Form, in *videoInput) (*providers.ImageInput, *APIError) {
	if in.refFile != nil {
		img, err := readPicture(form, *in.refFile)
		if err != nil {
			return nil, badField(CodeValidation, "input_reference", "input_reference could not be read: "+err.Error())
		}
		return &img, nil
	}
	if in.refURL == "" {
		return nil, nil
	}
	rest, ok := strings.CutPrefix(in.refURL, "data:")
	meta, payload, found := strings.Cut(rest, ",")
	mt, isBase64 := strings.CutSuffix(meta, ";base64")
	if !ok || !found || !isBase64 || !strings.HasPrefix(mt, "image/") {
		return nil, paramError("input_reference", "input_reference.image_url must be a data URL of an image (data:image/png;base64,...); this gateway fetches no URL on a caller's behalf")
	}
	data, err := base64.StdEncoding.DecodeString(payload)
	if err != nil {
		return nil, paramError("input_reference", "input_reference.image_url is not valid base64")
	}
	return &providers.ImageInput{Data: data, MIMEType: mt}, nil
}

// videosOn answers 503 not_configured in place of serve while the gateway has no jobs
// engine to create or poll jobs with.
func videosOn(serve handler) handler {
	return func(g *Gateway, w http.ResponseWriter, r *http.Request, c *Caller) error {
		if g.Jobs == nil {
			return newError(http.StatusServiceUnavailable, CodeNotConfigured, "video jobs are off: this gateway has no store to keep jobs in")
		}
		return serve(g, w, r, c)
	}
}

// readVideoCreate reads a create's body: multipart (as the OpenAI SDKs always send it),
// read whole into the form returned, which the caller closes; or JSON.
func (g *Gateway) readVideoCreate(w http.ResponseWriter, r *http.Request) (*videoInput, *upload.Form, *APIError) {
	if !strings.HasPrefix(strings.ToLower(r.Header.Get("Content-Type")), "multipart/") {
		body, apiErr := g.readBodyUpTo(w, r, g.uploadCeiling(&videoCapability, DefaultVideoUpload))
		if apiErr != nil {
			return nil, nil, apiErr
		}
		in, apiErr := readVideoJSON(body)
		return in, nil, apiErr
	}
	form, apiErr := g.readForm(r, &videoCapability, DefaultVideoUpload)
	if apiErr != nil {
		return nil, nil, apiErr
	}
	if apiErr := g.spoolForm(form, &videoCapability, DefaultVideoUpload); apiErr != nil {
		_ = form.Close()
		return nil, nil, apiErr
	}
	in, apiErr := readVideoForm(form)
	if apiErr != nil {
		_ = form.Close()
		return nil, nil, apiErr
	}
	return in, form, nil
}

// createVideo serves POST /videos.
func (g *Gateway) createVideo(w http.ResponseWriter, r *http.Request, c *Caller) error {
	in, form, apiErr := g.readVideoCreate(w, r)
	if apiErr != nil {
		return apiErr
	}
	if form != nil {
		defer func() { _ = form.Close() }()
	}
	q, apiErr := in.check()
	if apiErr != nil {
		return apiErr
	}
	if q.reference, apiErr = readVideoReference(form, in); apiErr != nil {
		return apiErr
	}
	webhook, err := g.parseJobWebhook(r.Context(), c, store.JobVideo, q.webhook)
	if err != nil {
		return err
	}
	m, routes, dropped, apiErr := g.Registry.candidates(q.model, &videoCapability)
	if apiErr != nil {
		return apiErr
	}
	if !g.isFor(m, &videoCapability) {
		return g.notServed(m, &videoCapability)
	}
	if form != nil {
		fit := g.uploadFit(form.Size(), DefaultVideoUpload)
		candidates := routes
		if routes, dropped = dropRoutes(routes, dropped, stageRequestFit, fit.why); len(routes) == 0 {
			return withRouting(fit.refuse(candidates), m, dropped)
		}
	}
	var most int64
	if !m.Free() {
		var unpriced error
		routes, dropped = dropRoutes(routes, dropped, stagePricing, func(rt Route) string {
			if dim := unmetered(rt.Price, videoCapability.meters); dim != "" {
				unpriced = badField(CodeUnsupportedModel, "model", fmt.Sprintf("model %q does not make videos: route %s bills it by %s, which /videos does not measure", m.Name, rt.ProviderName, dim))
				return reasonMissingPricing
			}
			n, err := videoWorst(rt.Price, q.seconds, q.resolution)
			if err != nil {
				unpriced = err
				return reasonMissingPricing
			}
			most = max(most, n)
			return ""
		})
		if len(routes) == 0 {
			return withRouting(priceError(unpriced, ""), m, dropped)
		}
	}
	return g.startVideo(w, r, c, m, routes, dropped, most, q, webhook)
}

// startVideo submits the job on the first route whose upstream starts it: a route that
// fails in a way another may not (an unreachable or overloaded upstream), or whose adapter
// refuses before any call what its upstream cannot take (Unsupported: a negative prompt
// for OpenAI's /videos), is passed for the next, each attempt under a hold of its own,
// released when it fails.
func (g *Gateway) startVideo(w http.ResponseWriter, r *http.Request, c *Caller, m *Model, routes []Route, dropped []droppedRoute, most int64, q *videoCreate, webhook json.RawMessage) error {
	request, _ := json.Marshal(videoJobRequest{
		Prompt: q.prompt, Seconds: q.seconds, Size: q.size, Resolution: q.resolution, AspectRatio: q.aspectRatio,
		NegativePrompt: q.negPro, Seed: q.seed, InputReference: q.reference != nil, Metadata: q.metadata,
	}) // strings and numbers
	var last *providers.UpstreamError
	for _, rt := range routes {
		now := g.Now()
		if !rt.breaker.allow(now, rt.Policy) {
			dropped = append(dropped, droppedRoute{stageAvailability, rt.ProviderName, reasonCircuitOpen})
			continue
		}
		vg := rt.Provider.(providers.VideoGenerator) // the capability's
		vreq := &providers.VideoRequest{
			Model: rt.UpstreamModel, Prompt: q.prompt, Seconds: q.seconds, Size: q.size, Resolution: q.resolution,
			AspectRatio: q.aspectRatio, NegativePrompt: q.negPro, Seed: q.seed, InputReference: q.reference,
		}
		j, err := g.Jobs.Submit(r.Context(), jobs.Submission{
			Job: store.Job{
				ID: ids.New("video"), WorkspaceID: c.Key.WorkspaceID, Kind: store.JobVideo, KeyID: c.Key.ID, Model: m.Name,
				Provider: rt.ProviderName, UpstreamModel: rt.UpstreamModel, Request: request, Webhook: webhook,
				CreatedAt: now, ExpiresAt: now.Add(videoJobTTL),
			},
			Most: most, Endpoint: videoCapability.endpoint,
			Start: func(ctx context.Context) (string, jobs.Report, error) {
				st, err := vg.StartVideo(ctx, vreq)
				if err != nil {
					return "", jobs.Report{}, err
				}
				if st.NativeID == "" {
					return "", jobs.Report{}, &providers.UpstreamError{Provider: rt.ProviderName, Status: http.StatusBadGateway,
						Message: "the provider started no job (it answered no id)", Category: providers.CategoryServerError, Retryable: true}
				}
				rep := videoReport(st, videoJobResult{Seconds: float64(q.seconds), Size: q.size, Resolution: q.resolution})
				if jobs.Terminal(rep.Status) {
					// A job is settled or released by its polls alone: one that ended as it
					// started is polled at once, and ends there.
					rep = jobs.Report{Status: jobs.StatusInProgress, Progress: rep.Progress, PollAfter: time.Millisecond, Result: rep.Result}
				}
				return st.NativeID, rep, nil
			},
		})
		if err == nil {
			rt.breaker.record(g.Now(), rt.Policy, true)
			return g.answerVideo(w, r, j, http.StatusOK)
		}
		ue, ok := providers.AsUpstreamError(err)
		if !ok {
			rt.breaker.release()
			if r.Context().Err() != nil {
				return err // the client left; its job was not made
			}
			// The hold refused, or the store could not take it or the job.
			g.noteKeyLimit(&c.Key, err)
			return g.admissionRefused(err, most, videoCapability.endpoint, m.Name)
		}
		rt.breaker.fail(g.Now(), rt.Policy, ue)
		if !ue.Fallbackable() && !ue.Unsupported {
			return upstreamAPIError(ue)
		}
		g.Logger.Debug("a video route failed to start the job; trying the next", zap.String("provider", rt.ProviderName), zapErr(ue))
		last = ue
	}
	if last == nil {
		e := newError(http.StatusServiceUnavailable, CodeUpstream, fmt.Sprintf("every route of model %q is unavailable right now (circuit open after repeated failures); retry shortly", m.Name))
		e.Origin, e.Type = "gateway", "system"
		return withRouting(e, m, dropped)
	}
	e := upstreamAPIError(last)
	e.Message = fmt.Sprintf("no route of model %q could start the video; the last said: %s", m.Name, e.Message)
	return withRouting(e, m, dropped)
}

// videoObject is a job's public object: OpenAI's video object (what openai-go decodes) and
// the gateway's fields beside it.
type videoObject struct {
	ID                 string      `json:"id"`
	Object             string      `json:"object"`
	Model              string      `json:"model"`
	Status             string      `json:"status"`
	Progress           int         `json:"progress"`
	CreatedAt          int64       `json:"created_at"`
	CompletedAt        *int64      `json:"completed_at"`
	ExpiresAt          *int64      `json:"expires_at"`
	Prompt             string      `json:"prompt"`
	Size               any         `json:"size"`
	Seconds            string      `json:"seconds"`
	Error              *videoError `json:"error"`
	RemixedFromVideoID *string     `json:"remixed_from_video_id"`

	LifecycleStatus string            `json:"lifecycle_status"`
	Resolution      any               `json:"resolution"`
	PollingURL      string            `json:"polling_url"`
	WebsocketURL    string            `json:"websocket_url"`
	Webhook         any               `json:"webhook,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	Usage           *videoUsage       `json:"usage,omitempty"`
	Billing         videoBilling      `json:"billing"`
}

type videoError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// videoUsage is what a completed job made, as it is charged.
type videoUsage struct {
	Seconds    float64 `json:"seconds"`
	Resolution any     `json:"resolution"`
}

// videoBilling is the job's money: what its hold holds while it runs, then what it was
// charged (status settled) or that nothing was (released).
type videoBilling struct {
	Status    string     `json:"status"`
	HeldNanos int64      `json:"held_nanos"`
	CostNanos *int64     `json:"cost_nanos,omitempty"`
	Cost      costNumber `json:"cost_usd"`
}

func unixOrNil(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	u := t.Unix()
	return &u
}

// videoObject renders job j. A settled job's cost is read from its generation record.
func (g *Gateway) videoObject(r *http.Request, j store.Job) (*videoObject, error) {
	var req videoJobRequest
	var res videoJobResult
	_ = json.Unmarshal(j.Request, &req) // the job's own; a zero one renders what it can
	_ = json.Unmarshal(j.Result, &res)
	v := &videoObject{
		ID: j.ID, Object: "video", Model: j.Model, Status: jobs.PublicStatus(j.Kind, j.Status), Progress: j.Progress,
		CreatedAt: j.CreatedAt.Unix(), CompletedAt: unixOrNil(j.CompletedAt), ExpiresAt: unixOrNil(j.ExpiresAt),
		Prompt: req.Prompt, Size: orNull(firstNonEmpty(res.Size, req.Size)), Seconds: strconv.Itoa(req.Seconds),
		LifecycleStatus: jobs.LifecycleStatus(j.Status), Resolution: orNull(firstNonEmpty(res.Resolution, req.Resolution)),
		Metadata: req.Metadata, Billing: videoBilling{Status: "held", HeldNanos: j.HeldNanos},
	}
	if v.LifecycleStatus == "" {
		v.LifecycleStatus = j.Status
	}
	if res.Seconds > 0 {
		v.Seconds = strconv.FormatFloat(res.Seconds, 'f', -1, 64)
	}
	if v.Status == jobs.StatusFailed {
		v.Error = &videoError{Code: firstNonEmpty(j.ErrorCode, j.Status), Message: firstNonEmpty(j.ErrorMessage, "the video job "+j.Status)}
	}
	v.PollingURL, v.WebsocketURL = g.jobURLs(r, "/videos/"+j.ID, store.JobVideo, j.ID)
	wh, err := g.jobWebhook(r.Context(), j)
	if err != nil {
		return nil, err
	}
	if wh != nil {
		v.Webhook = wh
	}
	if len(j.Usage) > 0 {
		var u pricing.Usage
		if json.Unmarshal(j.Usage, &u) == nil {
			v.Usage = &videoUsage{Seconds: u.OutputVideo.Seconds(), Resolution: orNull(u.VideoResolution)}
		}
	}
	switch j.Lifecycle {
	case jobs.LifecycleReleased:
		v.Billing.Status = "released"
		v.Billing.CostNanos = new(int64)
	case jobs.LifecycleSettled:
		v.Billing.Status = "settled"
		gen, err := g.Store.GetGeneration(r.Context(), j.WorkspaceID, jobs.GenerationID(j.ID))
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		if err == nil {
			v.Billing.CostNanos, v.Billing.Cost = &gen.CostNanos, costNumber(gen.CostNanos)
		}
	}
	return v, nil
}

// answerVideo answers with job j's object, and while it runs the pace to poll it at.
func (g *Gateway) answerVideo(w http.ResponseWriter, r *http.Request, j store.Job, status int) error {
	v, err := g.videoObject(r, j)
	if err != nil {
		return err
	}
	if !jobs.Terminal(j.Status) {
		w.Header().Set("openai-poll-after-ms", strconv.FormatInt(g.videoPollAfter(j).Milliseconds(), 10))
	}
	return writeJSON(w, status, v)
}

// videoPollAfter is when a client should poll job j again: the pace its upstream asked
// for, else the engine's, never quicker than the engine polls.
func (g *Gateway) videoPollAfter(j store.Job) time.Duration {
	var res videoJobResult
	_ = json.Unmarshal(j.Result, &res)
	pace, least := jobs.DefaultPace, jobs.DefaultMinPoll
	if g.Jobs != nil {
		pace, least = cmpOr(g.Jobs.Pace, pace), cmpOr(g.Jobs.MinPoll, least)
	}
	if res.PollAfterMs > 0 {
		pace = time.Duration(res.PollAfterMs) * time.Millisecond
	}
	return max(pace, least)
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// ownVideo returns the workspace's video job named by the path, or 404.
func (g *Gateway) ownVideo(ctx context.Context, workspaceID, id string) (store.Job, error) {
	j, err := g.Store.GetJob(ctx, workspaceID, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && j.Kind != store.JobVideo {
		e := newError(http.StatusNotFound, CodeNotFound, fmt.Sprintf("video %q not found, or not owned by this workspace", id))
		e.Param = "video_id"
		return store.Job{}, e
	}
	return j, err
}

// getVideo serves GET /videos/{video_id}; it never needs credit.
func (g *Gateway) getVideo(w http.ResponseWriter, r *http.Request, c *Caller) error {
	j, err := g.ownVideo(r.Context(), c.Key.WorkspaceID, r.PathValue("video_id"))
	if err != nil {
		return err
	}
	return g.answerVideo(w, r, j, http.StatusOK)
}

// videoStatusFilter are the stored statuses of each status a list may be filtered by: a
// public one (failed taking the cancelled and expired jobs it shows), a lifecycle_status,
// or the aliases peers use.
var videoStatusFilter = map[string][]string{
	jobs.StatusQueued: {jobs.StatusQueued}, "pending": {jobs.StatusQueued},
	jobs.StatusInProgress: {jobs.StatusInProgress}, "running": {jobs.StatusInProgress}, "processing": {jobs.StatusInProgress},
	jobs.StatusCompleted: {jobs.StatusCompleted}, jobs.StatusFailed: {jobs.StatusFailed, jobs.StatusCancelled, jobs.StatusExpired},
	jobs.StatusCancelled: {jobs.StatusCancelled}, "canceled": {jobs.StatusCancelled}, jobs.StatusExpired: {jobs.StatusExpired},
}

// listVideos serves GET /videos: the workspace's video jobs, newest first unless
// order=asc, a page at a time (after, limit), of the statuses asked (status=a,b or
// repeated).
func (g *Gateway) listVideos(w http.ResponseWriter, r *http.Request, c *Caller) error {
	q := r.URL.Query()
	p, apiErr := parsePage(q)
	if apiErr != nil {
		return apiErr
	}
	query := store.JobQuery{WorkspaceID: c.Key.WorkspaceID, Kind: store.JobVideo, Order: store.NewestFirst, Page: p.store()}
	if vs, ok := q["order"]; ok {
		switch o := first(vs); o {
		case store.NewestFirst, store.OldestFirst:
			query.Order = o
		default:
			return paramError("order", "order must be asc or desc")
		}
	}
	for _, v := range q["status"] {
		for _, s := range strings.Split(v, ",") {
			statuses, ok := videoStatusFilter[strings.TrimSpace(s)]
			if !ok {
				return paramError("status", fmt.Sprintf("status %q is not one of queued, in_progress, completed, failed, cancelled, expired (or pending, running)", s))
			}
			for _, st := range statuses {
				if !slices.Contains(query.Statuses, st) {
					query.Statuses = append(query.Statuses, st)
				}
			}
		}
	}
	items, err := g.Store.ListJobs(r.Context(), query)
	env, err := storePage(items, err, func(j store.Job) string { return j.ID }, p)
	if err != nil {
		return err
	}
	page := env["data"].([]store.Job)
	views := make([]*videoObject, 0, len(page))
	for _, j := range page {
		v, err := g.videoObject(r, j)
		if err != nil {
			return err
		}
		views = append(views, v)
	}
	env["data"] = views
	return writeJSON(w, http.StatusOK, env)
}

// contentQuery reads the variant and index of a content request or link.
func contentQuery(variant, index string) (string, int, *APIError) {
	if variant == "" {
		variant = "video"
	}
	if !slices.Contains(videoVariants, variant) {
		return "", 0, paramError("variant", "variant must be one of "+strings.Join(videoVariants, ", "))
	}
	n := 0
	if index != "" {
		var err error
		if n, err = strconv.Atoi(index); err != nil || n < 0 || n > 99 {
			return "", 0, paramError("index", "index must be an integer from 0 to 99")
		}
	}
	return variant, n, nil
}

// linkSignature is the signature of a download link: HMAC-SHA256 under the gateway's link
// key of the workspace, video, variant, index and expiry, base64url.
func (g *Gateway) linkSignature(workspaceID, videoID, variant string, index int, expires int64) string {
	m := hmac.New(sha256.New, g.LinkKey)
	fmt.Fprintf(m, "%s|%s|%s|%d|%d", workspaceID, videoID, variant, index, expires)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// linksOff is why no download link is made or honoured without a link key.
var linksOff = newError(http.StatusServiceUnavailable, CodeNotConfigured,
	"signed download links are off: the operator has not set secret_key, from which their signing key is derived; set secret_key in the model_gateway global block (32 random bytes in base64, made with: openssl rand -base64 32)")

// linkWorkspace verifies the signed link of a content request made without a key, and
// returns the workspace it was issued to. A link altered in any part, signed by another
// key, or past its expiry is 403.
func (g *Gateway) linkWorkspace(r *http.Request, videoID, variant string, index int) (string, *APIError) {
	if g.LinkKey == nil {
		return "", linksOff
	}
	q := r.URL.Query()
	ws, sig := q.Get("ws"), q.Get("sig")
	expires, err := strconv.ParseInt(q.Get("expires"), 10, 64)
	want := g.linkSignature(ws, videoID, variant, index, expires)
	if err != nil || ws == "" || !hmac.Equal([]byte(sig), []byte(want)) {
		return "", newError(http.StatusForbidden, CodeLinkInvalid, "the download link's signature does not match: the link was altered, or made by another gateway key; ask POST /videos/{video_id}/download_url for a new one")
	}
	if g.Now().Unix() >= expires {
		return "", newError(http.StatusForbidden, CodeLinkExpired, fmt.Sprintf("the download link expired at %s; ask POST /videos/{video_id}/download_url for a new one", rfc3339(time.Unix(expires, 0))))
	}
	return ws, nil
}

// videoRoute is the route, in this configuration, that job j was made on, with its video
// adapter.
func (g *Gateway) videoRoute(j store.Job) (Route, providers.VideoGenerator, *APIError) {
	for _, m := range g.Registry.Models() {
		for _, rt := range m.Routes {
			if rt.ProviderName == j.Provider && rt.UpstreamModel == j.UpstreamModel {
				if vg, ok := rt.Provider.(providers.VideoGenerator); ok {
					return rt, vg, nil
				}
			}
		}
	}
	e := newError(http.StatusServiceUnavailable, CodeNotConfigured, fmt.Sprintf("the route that made video %s (provider %s, model %s) is no longer configured, so its content cannot be read", j.ID, j.Provider, j.UpstreamModel))
	e.Origin, e.Type = "gateway", "system"
	return Route{}, nil, e
}

// videoContent serves GET /videos/{video_id}/content?variant=&index=: the bytes of a
// completed job, streamed from its upstream as they come, the client's Range passed on.
// Called with a key, or with a signed link (download_url) instead (c is nil then).
func (g *Gateway) videoContent(w http.ResponseWriter, r *http.Request, c *Caller) error {
	id := r.PathValue("video_id")
	q := r.URL.Query()
	variant, index, apiErr := contentQuery(q.Get("variant"), q.Get("index"))
	if apiErr != nil {
		return apiErr
	}
	var ws string
	if c != nil {
		ws = c.Key.WorkspaceID
	} else if ws, apiErr = g.linkWorkspace(r, id, variant, index); apiErr != nil {
		return apiErr
	}
	ctx, cancel := g.storeContext(r.Context())
	j, err := g.ownVideo(ctx, ws, id)
	cancel()
	if err != nil {
		return err
	}
	if j.Status != jobs.StatusCompleted {
		return newError(http.StatusConflict, CodeVideoNotReady, fmt.Sprintf("video %s is %s: its content is there once it is completed", id, jobs.PublicStatus(j.Kind, j.Status)))
	}
	_, vg, apiErr := g.videoRoute(j)
	if apiErr != nil {
		return apiErr
	}
	var res videoJobResult
	_ = json.Unmarshal(j.Result, &res)
	vc, err := vg.VideoContent(r.Context(), &providers.VideoContentRequest{
		Model: j.UpstreamModel, NativeID: j.NativeID, State: res.State, Variant: variant, Index: index, RangeHeader: r.Header.Get("Range"),
	})
	if err != nil {
		ue, ok := providers.AsUpstreamError(err)
		_, notFound := upstreamNotFound(err)
		switch {
		case !ok:
			return err
		case notFound:
			e := newError(http.StatusNotFound, CodeNotFound, fmt.Sprintf("video %s has no %s (index %d) at its provider: %s", id, variant, index, ue.Message))
			e.Param = "variant"
			if index > 0 {
				e.Param = "index"
			}
			return e
		case ue.Status == http.StatusRequestedRangeNotSatisfiable:
			return newError(http.StatusRequestedRangeNotSatisfiable, CodeRangeNotSatisfiable, "the Range asked is past the content's end: "+ue.Message)
		}
		return upstreamAPIError(ue)
	}
	defer func() { _ = vc.Body.Close() }()
	h := w.Header()
	h.Set("Content-Type", firstNonEmpty(vc.ContentType, "application/octet-stream"))
	if vc.Length >= 0 {
		h.Set("Content-Length", strconv.FormatInt(vc.Length, 10))
	}
	if vc.ContentRange != "" {
		h.Set("Content-Range", vc.ContentRange)
	}
	h.Set("Accept-Ranges", "bytes")
	h.Set("Cache-Control", "private, no-store")
	status := vc.Status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return nil
	}
	p := mediaBufs.Get()
	defer mediaBufs.Put(p, *p)
	if _, err := io.CopyBuffer(writerOnly{w}, vc.Body, (*p)[:cap(*p)]); err != nil && r.Context().Err() == nil {
		// The upstream broke off: the response is cut, so that the client sees an
		// incomplete body rather than a short one that looks whole.
		g.Logger.Warn("a video's content broke off", zap.String("video_id", id), zapErr(err))
		panic(http.ErrAbortHandler)
	}
	return nil
}

// writerOnly hides a ResponseWriter's ReadFrom, so that a copy goes through the buffer it
// is given.
type writerOnly struct{ io.Writer }

// videoDownloadURL serves POST /videos/{video_id}/download_url
// {"ttl_seconds": 900, "variant": "video", "index": 0}: a link to the content that needs
// no key, signed for this workspace, video, variant and index until its expiry.
func (g *Gateway) videoDownloadURL(w http.ResponseWriter, r *http.Request, c *Caller) error {
	if g.LinkKey == nil {
		return linksOff
	}
	f, apiErr := g.readObject(w, r, "ttl_seconds", "variant", "index")
	if apiErr != nil {
		return apiErr
	}
	ttl := int64(defaultLinkTTL)
	if raw, ok := f["ttl_seconds"]; ok && !isJSONNull(raw) {
		n, ok := jsonInt(raw)
		if !ok || n < minLinkTTL || n > maxLinkTTL {
			return paramError("ttl_seconds", fmt.Sprintf("ttl_seconds must be an integer from %d to %d", minLinkTTL, maxLinkTTL))
		}
		ttl = n
	}
	variant, _, apiErr := f.str("variant")
	if apiErr != nil {
		return apiErr
	}
	index := ""
	if raw, ok := f["index"]; ok && !isJSONNull(raw) {
		n, ok := jsonInt(raw)
		if !ok {
			return paramError("index", "index must be an integer from 0 to 99")
		}
		index = strconv.FormatInt(n, 10)
	}
	variant, n, apiErr := contentQuery(variant, index)
	if apiErr != nil {
		return apiErr
	}
	id := r.PathValue("video_id")
	j, err := g.ownVideo(r.Context(), c.Key.WorkspaceID, id)
	if err != nil {
		return err
	}
	if j.Status != jobs.StatusCompleted {
		return newError(http.StatusConflict, CodeVideoNotReady, fmt.Sprintf("video %s is %s: a link to its content is made once it is completed", id, jobs.PublicStatus(j.Kind, j.Status)))
	}
	expires := g.Now().Unix() + ttl
	link, _ := g.jobURLs(r, "/videos/"+id+"/content", store.JobVideo, id)
	v := url.Values{}
	v.Set("variant", variant)
	v.Set("index", strconv.Itoa(n))
	v.Set("ws", c.Key.WorkspaceID)
	v.Set("expires", strconv.FormatInt(expires, 10))
	v.Set("sig", g.linkSignature(c.Key.WorkspaceID, id, variant, n, expires))
	return writeJSON(w, http.StatusOK, map[string]any{"object": "video.download_url", "url": link + "?" + v.Encode(), "expires_at": expires})
}

// deleteVideo serves DELETE /videos/{video_id}: a job that has ended (and whose hold is
// settled or released) is deleted at its upstream, when the adapter can, then here.
func (g *Gateway) deleteVideo(w http.ResponseWriter, r *http.Request, c *Caller) error {
	id := r.PathValue("video_id")
	j, err := g.ownVideo(r.Context(), c.Key.WorkspaceID, id)
	if err != nil {
		return err
	}
	if !jobs.Terminal(j.Status) || (j.Lifecycle != jobs.LifecycleSettled && j.Lifecycle != jobs.LifecycleReleased) {
		return newError(http.StatusConflict, CodeVideoNotTerminal, fmt.Sprintf("video %s is %s: only a video that has ended (completed or failed) can be deleted", id, jobs.LifecycleStatus(j.Status)))
	}
	if j.NativeID != "" {
		if _, vg, apiErr := g.videoRoute(j); apiErr == nil {
			if vd, ok := vg.(providers.VideoDeleter); ok {
				err := vd.DeleteVideo(r.Context(), j.UpstreamModel, j.NativeID)
				if _, gone := upstreamNotFound(err); gone {
					err = nil
				}
				if err != nil {
					if ue, ok := providers.AsUpstreamError(err); ok {
						e := upstreamAPIError(ue)
						e.Message = "the video could not be deleted at its provider, and is kept here; retry: " + e.Message
						return e
					}
					return err
				}
			}
		}
	}
	if err := g.Store.DeleteJob(r.Context(), c.Key.WorkspaceID, id); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "video.deleted", "deleted": true})
}

// cancelVideo serves POST /videos/{video_id}/cancel, which the specification reserves:
// 501 for the caller's own video, 404 for any other.
func (g *Gateway) cancelVideo(w http.ResponseWriter, r *http.Request, c *Caller) error {
	if _, err := g.ownVideo(r.Context(), c.Key.WorkspaceID, r.PathValue("video_id")); err != nil {
		return err
	}
	return newError(http.StatusNotImplemented, CodeNotImplemented, "POST /videos/{video_id}/cancel is not implemented yet by this gateway: a video runs to its end, and a failed one is not charged")
}

// videoModels serves GET /videos/models: the models that make videos, each with the
// providers of its routes that do and their prices per second by resolution.
func (g *Gateway) videoModels(w http.ResponseWriter, r *http.Request, _ *Caller) error {
	cat := g.catalog()
	data := []map[string]any{}
	for _, m := range g.Registry.Models() {
		if !g.isFor(m, &videoCapability) {
			continue
		}
		var provs []string
		var prices []map[string]any
		resolutions := []string{}
		available := false
		for _, rt := range m.Routes {
			if !m.routeServes(rt, &videoCapability) {
				continue
			}
			provs = append(provs, rt.ProviderName)
			available = available || rt.credentialPresent()
			for _, vp := range rt.Price.VideoSeconds() {
				prices = append(prices, map[string]any{"provider": rt.ProviderName, "resolution": orNull(vp.Resolution), "price": costNumber(vp.Nanos), "nanos": vp.Nanos})
				if vp.Resolution != "" && !slices.Contains(resolutions, vp.Resolution) {
					resolutions = append(resolutions, vp.Resolution)
				}
			}
		}
		if provs == nil {
			continue
		}
		name := m.Name
		if e := g.catalogEntry(cat, m); e != nil && e.Name != "" {
			name = e.Name
		}
		status := "active"
		if !available {
			status = "unavailable"
		}
		if prices == nil {
			prices = []map[string]any{}
		}
		data = append(data, map[string]any{
			"id": m.Name, "object": "model", "model": m.Name, "name": name, "status": status,
			"input_types": []string{"text", "image"}, "output_types": []string{"video"},
			"seconds":     map[string]any{"min": 1, "max": maxVideoSeconds, "default": defaultVideoSeconds},
			"resolutions": resolutions, "variants": videoVariants, "providers": provs,
			"pricing": map[string]any{"currency": "USD", "unit": "second", "per_second": prices},
		})
	}
	return writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}
