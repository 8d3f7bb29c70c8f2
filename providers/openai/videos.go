package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
)

// The content variants of OpenAI's videos, in the order the API lists them.
var videoVariants = []string{"video", "thumbnail", "spritesheet"}

// videoSizes are the sizes a Resolution and an AspectRatio name, for a request that gives
// those instead of a Size: Sora's four, and 1080p for compatible servers that make it.
var videoSizes = map[[2]string]string{
	{"720p", "16:9"}: "1280x720", {"720p", "9:16"}: "720x1280",
	{"1024p", "16:9"}: "1792x1024", {"1024p", "9:16"}: "1024x1792",
	{"1080p", "16:9"}: "1920x1080", {"1080p", "9:16"}: "1080x1920",
}

// ErrUnsupportedVideo is the cause of a video request refused before any call for what the
// /videos API has no field for (a negative prompt, a seed, a resolution without a size it
// names): another route's upstream may take it.
var ErrUnsupportedVideo = errors.New("request not supported by the /videos API")

// videoObject is OpenAI's video job, as GET /videos/{id} and POST /videos answer it.
// Compatible servers send seconds as a number and progress as a float: both are read.
type videoObject struct {
	ID       string      `json:"id"`
	Status   string      `json:"status"`
	Progress float64     `json:"progress"`
	Seconds  looseString `json:"seconds"`
	Size     string      `json:"size"`
	Error    *struct {
		Code    looseString `json:"code"`
		Message string      `json:"message"`
	} `json:"error"`
}

// StartVideo posts the request to {base}/videos as multipart, as OpenAI documents it and its
// SDKs send it: model, prompt, seconds ("8"), size and the input_reference file part. The
// image is streamed from the request's bytes, not copied into the body.
//
// Size is sent as given; without it, Resolution (720p by default) and AspectRatio (16:9 by
// default) name one of videoSizes (720p 16:9 is 1280x720, 1024p 9:16 is 1024x1792...). What the API has no field for (a
// negative prompt, a seed, a resolution or aspect ratio naming no size) is refused before
// any call as an unsupported invalid request naming the field, on which the gateway tries the
// model's next route.
func (p *Provider) StartVideo(ctx context.Context, req *providers.VideoRequest) (*providers.VideoStatus, error) {
	size, err := p.videoSize(req)
	if err != nil {
		return nil, err
	}
	switch {
	case req.NegativePrompt != "":
		return nil, providers.Unsupported(p.name, "negative_prompt", "the /videos API takes no negative prompt", ErrUnsupportedVideo)
	case req.Seed != nil:
		return nil, providers.Unsupported(p.name, "seed", "the /videos API takes no seed", ErrUnsupportedVideo)
	}
	resp, at, err := p.up.SendBody(ctx, p.base+"/videos", videoForm(req, size), false, nil)
	if err != nil {
		return nil, err
	}
	return p.readVideo(ctx, at, resp)
}

// videoSize is the size to ask for: Size, or the one Resolution and AspectRatio name.
func (p *Provider) videoSize(req *providers.VideoRequest) (string, error) {
	if req.Size != "" || req.Resolution == "" && req.AspectRatio == "" {
		return req.Size, nil
	}
	res, ratio := strings.ToLower(req.Resolution), req.AspectRatio
	if res == "" {
		res = "720p"
	}
	if ratio == "" {
		ratio = "16:9"
	}
	if size, ok := videoSizes[[2]string{res, ratio}]; ok {
		return size, nil
	}
	param := "aspect_ratio"
	if _, ok := videoSizes[[2]string{res, "16:9"}]; !ok {
		param = "resolution"
	}
	return "", providers.Unsupported(p.name, param, fmt.Sprintf("the /videos API takes a size; resolution %s with aspect ratio %s names none (720p, 1024p or 1080p, 16:9 or 9:16)",
		res, ratio), ErrUnsupportedVideo)
}

// videoForm is the multipart body of a video request: the fields, then the image part whose
// bytes are read from the request's as the body is sent (not copied), then the closing
// boundary.
func videoForm(req *providers.VideoRequest, size string) upstreamhttp.Body {
	var head bytes.Buffer
	mw := multipart.NewWriter(&head)
	// Writes to a bytes.Buffer do not fail.
	_ = mw.WriteField("model", req.Model)
	_ = mw.WriteField("prompt", req.Prompt)
	if req.Seconds > 0 {
		_ = mw.WriteField("seconds", strconv.Itoa(req.Seconds))
	}
	if size != "" {
		_ = mw.WriteField("size", size)
	}
	var image []byte
	if ref := req.InputReference; ref != nil {
		name, ct := ref.FileName, ref.MIMEType
		if ct == "" {
			ct = http.DetectContentType(ref.Data)
		}
		if name == "" {
			name = "input_reference"
		}
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", multipart.FileContentDisposition("input_reference", name))
		h.Set("Content-Type", ct)
		_, _ = mw.CreatePart(h)
		image = ref.Data
	}
	// What mw.Close would write after the image.
	tail := "\r\n--" + mw.Boundary() + "--\r\n"
	return upstreamhttp.Body{
		Reader:      io.MultiReader(&head, bytes.NewReader(image), strings.NewReader(tail)),
		Length:      int64(head.Len() + len(image) + len(tail)),
		ContentType: mw.FormDataContentType(),
	}
}

// PollVideo reads GET {base}/videos/{id}. Statuses: queued, in_progress, completed and
// failed are OpenAI's own; compatible servers' pending is queued, their cancelled, canceled
// and expired are failed with that code, and any other status is in_progress, so that a
// server's own name for a running job does not fail it (the gateway's job expiry bounds a
// job that never ends). seconds (a string or a number) is Seconds, size is Size and its
// Resolution (the shorter side and "p": 1280x720 is 720p, 1792x1024 is 1024p), and the
// openai-poll-after-ms header is PollAfter. A completed job has the three variants, one
// sample. A 404 is CategoryNotFound.
func (p *Provider) PollVideo(ctx context.Context, model, nativeID string) (*providers.VideoStatus, error) {
	resp, at, err := p.fetchVideo(ctx, http.MethodGet, nativeID, "", nil)
	if err != nil {
		return nil, err
	}
	return p.readVideo(ctx, at, resp)
}

// readVideo reads a video object answered to a create or a poll.
func (p *Provider) readVideo(ctx context.Context, at *upstreamhttp.Attempt, resp *http.Response) (*providers.VideoStatus, error) {
	b, err := p.up.ReadBody(ctx, at, resp)
	if err != nil {
		return nil, err
	}
	var v videoObject
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, p.up.Malformed(resp.StatusCode, b, err)
	}
	if v.ID == "" {
		return nil, p.up.Malformed(resp.StatusCode, b, fmt.Errorf("video object without an id"))
	}
	st := &providers.VideoStatus{
		NativeID:   v.ID,
		Progress:   int(min(max(math.Round(v.Progress), 0), 100)),
		PollAfter:  pollAfter(resp.Header),
		Seconds:    videoSeconds(string(v.Seconds)),
		Size:       v.Size,
		Resolution: sizeResolution(v.Size),
	}
	switch s := strings.ToLower(v.Status); s {
	case providers.JobQueued, "pending":
		st.Status = providers.JobQueued
	case providers.JobCompleted:
		st.Status, st.Progress = providers.JobCompleted, 100
		st.Variants, st.Samples = slices.Clone(videoVariants), 1
	case providers.JobFailed, "cancelled", "canceled", "expired":
		st.Status = providers.JobFailed
		st.ErrorCode, st.ErrorMessage = s, "the upstream reports the video "+s
		if s == providers.JobFailed {
			st.ErrorCode, st.ErrorMessage = "video_generation_failed", "the upstream reports the video failed"
		}
		if v.Error != nil {
			if v.Error.Code != "" {
				st.ErrorCode = string(v.Error.Code)
			}
			if v.Error.Message != "" {
				st.ErrorMessage = upstreamhttp.Truncate(string(p.up.Redact([]byte(v.Error.Message))), upstreamhttp.MaxMessage)
			}
		}
	default:
		st.Status = providers.JobInProgress
	}
	return st, nil
}

// VideoContent streams GET {base}/videos/{id}/content?variant=..., with the client's Range.
// A variant other than video, thumbnail and spritesheet, or a sample past the first (the API
// makes one), is CategoryNotFound without a call; so is the upstream's 404.
func (p *Provider) VideoContent(ctx context.Context, req *providers.VideoContentRequest) (*providers.VideoContent, error) {
	variant := req.Variant
	if variant == "" {
		variant = "video"
	}
	if !slices.Contains(videoVariants, variant) {
		return nil, upstreamhttp.NotFound(p.name, fmt.Sprintf("the /videos API has no variant %q (video, thumbnail or spritesheet)", variant))
	}
	if req.Index != 0 {
		return nil, upstreamhttp.NotFound(p.name, fmt.Sprintf("the /videos API makes one video: there is no sample %d", req.Index))
	}
	h := http.Header{"Accept": {"application/binary"}}
	if req.RangeHeader != "" {
		h.Set("Range", req.RangeHeader)
	}
	resp, at, err := p.fetchVideo(ctx, http.MethodGet, req.NativeID, "/content?variant="+url.QueryEscape(variant), h)
	if err != nil {
		return nil, err
	}
	return p.up.VideoContent(ctx, at, resp, p.idle), nil
}

// DeleteVideo deletes the job upstream: DELETE {base}/videos/{id}. A 404 is
// CategoryNotFound, which the caller may take as already deleted.
func (p *Provider) DeleteVideo(ctx context.Context, model, nativeID string) error {
	resp, at, err := p.fetchVideo(ctx, http.MethodDelete, nativeID, "", nil)
	if err != nil {
		return err
	}
	b, err := p.up.ReadBody(ctx, at, resp)
	if err != nil {
		return err
	}
	var d struct {
		Deleted *bool `json:"deleted"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return p.up.Malformed(resp.StatusCode, b, err)
	}
	if d.Deleted != nil && !*d.Deleted {
		return p.up.Malformed(resp.StatusCode, b, fmt.Errorf("the upstream answered deleted false"))
	}
	return nil
}

// fetchVideo sends a bodiless request about a job: to {base}/videos/{id}, with rest
// appended. The id is escaped, so that it cannot change the path; an empty one, and the
// upstream's 404, are CategoryNotFound.
func (p *Provider) fetchVideo(ctx context.Context, method, id, rest string, h http.Header) (*http.Response, *upstreamhttp.Attempt, error) {
	if id == "" {
		return nil, nil, upstreamhttp.NotFound(p.name, "the video job has no upstream id")
	}
	resp, at, err := p.up.Fetch(ctx, upstreamhttp.Fetch{Method: method, URL: p.base + "/videos/" + url.PathEscape(id) + rest, Header: h})
	return resp, at, upstreamhttp.JobNotFound(err)
}

// pollAfter reads openai-poll-after-ms, zero when absent or unreadable.
func pollAfter(h http.Header) time.Duration {
	ms, err := strconv.ParseInt(strings.TrimSpace(h.Get("Openai-Poll-After-Ms")), 10, 64)
	if err != nil || ms <= 0 {
		return 0
	}
	return min(time.Duration(ms)*time.Millisecond, upstreamhttp.MaxRetryWait)
}

// videoSeconds reads the seconds of a video object ("8", 8 or 8.5), zero when it says none.
func videoSeconds(s string) time.Duration {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || f <= 0 || math.IsInf(f, 0) || f > 24*3600 {
		return 0
	}
	return time.Duration(f * float64(time.Second))
}

// sizeResolution names a "WIDTHxHEIGHT" size by its shorter side: 1280x720 and 720x1280 are
// 720p, 1792x1024 is 1024p. It is "" for anything else.
func sizeResolution(size string) string {
	w, h, ok := strings.Cut(size, "x")
	if !ok {
		return ""
	}
	wi, err1 := strconv.Atoi(w)
	hi, err2 := strconv.Atoi(h)
	if err1 != nil || err2 != nil || wi <= 0 || hi <= 0 {
		return ""
	}
	return strconv.Itoa(min(wi, hi)) + "p"
}

// Interface guards.
var (
	_ providers.VideoGenerator = (*Provider)(nil)
	_ providers.VideoDeleter   = (*Provider)(nil)
)
