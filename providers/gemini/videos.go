package gemini

import (
	"bytes"
	"context"
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

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
)

// Veo's video jobs on the Gemini API: POST models/{model}:predictLongRunning starts one, its
// operation (GET {name}) says when it is done and where the videos are, and each video is
// read from its URI with the API key. See StartVideo, PollVideo and VideoContent.

// veoDefaultSeconds is the length Veo makes when asked none; the adapter asks it explicitly,
// so that the length billed is the length made.
const veoDefaultSeconds = 8

// maxVideoRedirects bounds the redirects followed to a video's bytes.
const maxVideoRedirects = 5

// veoSizes are the sizes Veo makes, as the resolution and aspect ratio it takes for each.
var veoSizes = map[string][2]string{
	"1280x720": {"720p", "16:9"}, "720x1280": {"720p", "9:16"},
	"1920x1080": {"1080p", "16:9"}, "1080x1920": {"1080p", "9:16"},
	"3840x2160": {"4k", "16:9"}, "2160x3840": {"4k", "9:16"},
}

// veoRules are what a Veo model accepts, checked before any call.
type veoRules struct {
	seconds     []int
	resolutions []string
	// longOnly are the resolutions made only at the longest duration (8 s).
	longOnly []string
	// sendResolution: Veo 2 has no resolution parameter (it makes 720p).
	sendResolution bool
}

// rulesFor gives the rules of a model id: Veo 2 makes 5 to 8 s at 720p; Veo 3 and 3.1 make 4,
// 6 or 8 s at 720p, 1080p or 4k (not the Lite models), 1080p and 4k at 8 s only.
func rulesFor(id string) veoRules {
	if strings.HasPrefix(id, "veo-2") {
		return veoRules{seconds: []int{5, 6, 7, 8}, resolutions: []string{"720p"}}
	}
	r := veoRules{seconds: []int{4, 6, 8}, resolutions: []string{"720p", "1080p", "4k"}, longOnly: []string{"1080p", "4k"}, sendResolution: true}
	if strings.Contains(id, "lite") {
		r.resolutions = r.resolutions[:2]
	}
	return r
}

// veoParameters are the parameters of predictLongRunning.
type veoParameters struct {
	DurationSeconds int    `json:"durationSeconds"`
	AspectRatio     string `json:"aspectRatio"`
	Resolution      string `json:"resolution,omitempty"`
	NegativePrompt  string `json:"negativePrompt,omitempty"`
	Seed            *int64 `json:"seed,omitempty"`
}

// veoOperation is the long-running operation Veo answers to a create and to a poll.
type veoOperation struct {
	Name     string          `json:"name"`
	Done     bool            `json:"done"`
	Error    *veoStatusError `json:"error"`
	Response *struct {
		GenerateVideoResponse *struct {
			GeneratedSamples []struct {
				Video struct {
					URI      string `json:"uri"`
					MimeType string `json:"mimeType"`
				} `json:"video"`
			} `json:"generatedSamples"`
			RaiMediaFilteredCount   int      `json:"raiMediaFilteredCount"`
			RaiMediaFilteredReasons []string `json:"raiMediaFilteredReasons"`
		} `json:"generateVideoResponse"`
	} `json:"response"`
}

// veoStatusError is a google.rpc.Status: the error of a failed operation.
type veoStatusError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Status  string `json:"status"`
}

// veoState is what a Veo job keeps between calls (VideoStatus.State): what was asked, as
// StartVideo knows it, and the videos' locations once the job is done.
type veoState struct {
	Seconds    int         `json:"seconds,omitempty"`
	Size       string      `json:"size,omitempty"`
	Resolution string      `json:"resolution,omitempty"`
	Samples    []veoSample `json:"samples,omitempty"`
}

type veoSample struct {
	URI      string `json:"uri"`
	MimeType string `json:"mimeType,omitempty"`
}

// grpcCodes names the codes of google.rpc.Status, for an operation error that gives no
// status name.
var grpcCodes = []string{"ok", "cancelled", "unknown", "invalid_argument", "deadline_exceeded", "not_found",
	"already_exists", "permission_denied", "resource_exhausted", "failed_precondition", "aborted",
	"out_of_range", "unimplemented", "internal", "unavailable", "data_loss", "unauthenticated"}

// StartVideo posts {instances:[{prompt, image?}], parameters:{durationSeconds, aspectRatio,
// resolution, negativePrompt?, seed?}} to models/{model}:predictLongRunning; the operation's
// name is the NativeID.
//
// The request is checked first, and refused before any call as an unsupported invalid
// request naming the field (another route's upstream may take it):
//   - Seconds is 4, 6 or 8 (Veo 2: 5 to 8); 0 asks 8, Veo's default, explicitly.
//   - Size is one of veoSizes (1280x720 and 720x1280 are 720p, 1920x1080 and 1080x1920
//     1080p, 3840x2160 and 2160x3840 4k, 16:9 or 9:16 as they lie); without a Size,
//     Resolution (720p, 1080p, 4k or 2160p) and AspectRatio (16:9 or 9:16) say it, 720p and
//     16:9 by default. A Size wins over a Resolution and an AspectRatio that disagree.
//   - 1080p and 4k are made at 8 s only; Lite models make no 4k; Veo 2 makes 720p only and
//     is sent no resolution.
//   - InputReference, the first frame, must be an image; it goes inline, base64-encoded as
//     the body is sent rather than copied.
//
// The status answered carries the Seconds, Size and Resolution asked, which Veo does not
// echo, and keeps them in State.
func (p *Provider) StartVideo(ctx context.Context, req *providers.VideoRequest) (*providers.VideoStatus, error) {
	model, err := modelPath(req.Model)
	if err != nil {
		return nil, &providers.UpstreamError{Provider: p.name, Category: providers.CategoryModelUnavailable, Message: err.Error(), Err: err}
	}
	_, id, _ := strings.Cut(model, "/")
	params, size, err := p.veoParameters(id, req)
	if err != nil {
		return nil, err
	}
	body, err := p.veoBody(req, params)
	if err != nil {
		return nil, err
	}
	resp, at, err := p.up.SendBody(ctx, p.base+"/"+model+":predictLongRunning", body, false, nil)
	if err != nil {
		return nil, err
	}
	op, b, err := p.readOperation(ctx, at, resp)
	if err != nil {
		return nil, err
	}
	if op.Name == "" || checkOperationName(op.Name) != nil {
		return nil, p.up.Malformed(resp.StatusCode, b, fmt.Errorf("operation without a usable name"))
	}
	resolution := params.Resolution
	if resolution == "" {
		resolution = "720p"
	}
	state, _ := json.Marshal(veoState{Seconds: params.DurationSeconds, Size: size, Resolution: resolution})
	return &providers.VideoStatus{
		NativeID: op.Name, Status: providers.JobQueued,
		Seconds: time.Duration(params.DurationSeconds) * time.Second, Size: size, Resolution: resolution,
		State: state,
	}, nil
}

// veoParameters checks req against the model's rules and returns the parameters to send,
// with the size they make.
func (p *Provider) veoParameters(id string, req *providers.VideoRequest) (veoParameters, string, error) {
	rules := rulesFor(id)
	refuse := func(param, msg string) (veoParameters, string, error) {
		return veoParameters{}, "", providers.Unsupported(p.name, param, id+": "+msg, ErrUnsupportedRequest)
	}
	seconds := req.Seconds
	if seconds == 0 {
		seconds = veoDefaultSeconds
	}
	if !slices.Contains(rules.seconds, seconds) {
		return refuse("seconds", fmt.Sprintf("seconds must be one of %s, not %d", joinInts(rules.seconds), seconds))
	}
	resolution, ratio := "720p", "16:9"
	if req.Size != "" {
		rr, ok := veoSizes[req.Size]
		if !ok {
			return refuse("size", fmt.Sprintf("size %q is not one Veo makes (1280x720, 720x1280, 1920x1080, 1080x1920, 3840x2160, 2160x3840)", req.Size))
		}
		resolution, ratio = rr[0], rr[1]
	} else {
		if r := strings.ToLower(req.Resolution); r == "2160p" {
			resolution = "4k"
		} else if r != "" {
			resolution = r
		}
		if req.AspectRatio != "" {
			ratio = req.AspectRatio
		}
		if ratio != "16:9" && ratio != "9:16" {
			return refuse("aspect_ratio", fmt.Sprintf("aspect_ratio must be 16:9 or 9:16, not %q", req.AspectRatio))
		}
	}
	if !slices.Contains(rules.resolutions, resolution) {
		return refuse("resolution", fmt.Sprintf("resolution must be one of %s, not %q", strings.Join(rules.resolutions, ", "), resolution))
	}
	if slices.Contains(rules.longOnly, resolution) && seconds != 8 {
		return refuse("seconds", fmt.Sprintf("%s is made at 8 seconds only, not %d", resolution, seconds))
	}
	var size string
	for s, rr := range veoSizes {
		if rr == [2]string{resolution, ratio} {
			size = s
		}
	}
	params := veoParameters{DurationSeconds: seconds, AspectRatio: ratio, NegativePrompt: req.NegativePrompt, Seed: req.Seed}
	if rules.sendResolution {
		params.Resolution = resolution
	}
	if ref := req.InputReference; ref != nil {
		if len(ref.Data) == 0 {
			return refuse("input_reference", "input_reference is empty")
		}
		if !strings.HasPrefix(referenceType(ref), "image/") {
			return refuse("input_reference", fmt.Sprintf("input_reference must be an image, not %s", referenceType(ref)))
		}
	}
	return params, size, nil
}

// referenceType is the media type of the first frame: as given, or sniffed.
func referenceType(ref *providers.ImageInput) string {
	if ref.MIMEType != "" {
		return ref.MIMEType
	}
	ct, _, _ := strings.Cut(http.DetectContentType(ref.Data), ";")
	return ct
}

// veoBody is the JSON body of predictLongRunning. The image's base64 is made as the body is
// read, so that the request holds no encoded copy of it.
func (p *Provider) veoBody(req *providers.VideoRequest, params veoParameters) (upstreamhttp.Body, error) {
	prompt, err := json.Marshal(req.Prompt)
	if err != nil {
		return upstreamhttp.Body{}, requestError(p.name, fmt.Errorf("encoding request: %w", err))
	}
	paramJSON, err := json.Marshal(params)
	if err != nil {
		return upstreamhttp.Body{}, requestError(p.name, fmt.Errorf("encoding request: %w", err))
	}
	head := append([]byte(`{"instances":[{"prompt":`), prompt...)
	tail := []byte(`}],"parameters":`)
	var image io.Reader = bytes.NewReader(nil)
	var imageLen int
	if ref := req.InputReference; ref != nil {
		mt, _ := json.Marshal(referenceType(ref))
		head = append(append(append(head, `,"image":{"inlineData":{"mimeType":`...), mt...), `,"data":"`...)
		tail = append([]byte(`"}}`), tail...)
		image, imageLen = &base64Reader{src: ref.Data}, base64.StdEncoding.EncodedLen(len(ref.Data))
	}
	tail = append(append(tail, paramJSON...), '}')
	return upstreamhttp.Body{
		Reader: io.MultiReader(bytes.NewReader(head), image, bytes.NewReader(tail)),
		Length: int64(len(head) + imageLen + len(tail)),
	}, nil
}

// base64Reader reads src base64-encoded (standard alphabet, padded), a chunk at a time.
type base64Reader struct {
	src     []byte
	buf     [4096]byte
	pending []byte
}

func (r *base64Reader) Read(p []byte) (int, error) {
	if len(r.pending) == 0 {
		if len(r.src) == 0 {
			return 0, io.EOF
		}
		// Whole groups of three bytes, but for the last chunk, so that padding comes at the end only.
		n := min(len(r.src), len(r.buf)/4*3)
		r.pending = r.buf[:base64.StdEncoding.EncodedLen(n)]
		base64.StdEncoding.Encode(r.pending, r.src[:n])
		r.src = r.src[n:]
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	return n, nil
}

// PollVideo reads the operation: GET {base}/{name}.
//
//   - Not done is in_progress, with Progress 0: Veo says nothing of its progress, and a
//     guess from the time elapsed would be made up.
//   - Done with generatedSamples is completed: Samples counts them, the variant is video, and
//     State keeps their URIs for VideoContent.
//   - Done with an error is failed, ErrorCode the error's status (lowercased) and
//     ErrorMessage its message; done with raiMediaFilteredCount and no sample is failed with
//     content_filtered and Veo's reasons.
//
// Seconds, Size and Resolution are zero: Veo does not echo them (StartVideo's status has
// what was asked). Veo asks no poll interval. A 404 is CategoryNotFound.
func (p *Provider) PollVideo(ctx context.Context, model, nativeID string) (*providers.VideoStatus, error) {
	if err := checkOperationName(nativeID); err != nil {
		return nil, upstreamhttp.NotFound(p.name, err.Error())
	}
	resp, at, err := p.up.Fetch(ctx, upstreamhttp.Fetch{URL: p.base + "/" + nativeID})
	if err != nil {
		return nil, upstreamhttp.JobNotFound(err)
	}
	op, _, err := p.readOperation(ctx, at, resp)
	if err != nil {
		return nil, err
	}
	st := &providers.VideoStatus{NativeID: nativeID, Status: providers.JobInProgress}
	if !op.Done {
		return st, nil
	}
	st.Status = providers.JobFailed
	if e := op.Error; e != nil {
		st.ErrorCode = strings.ToLower(e.Status)
		if st.ErrorCode == "" && e.Code > 0 && e.Code < len(grpcCodes) {
			st.ErrorCode = grpcCodes[e.Code]
		}
		if st.ErrorCode == "" {
			st.ErrorCode = "video_generation_failed"
		}
		st.ErrorMessage = upstreamhttp.Truncate(string(p.up.Redact([]byte(e.Message))), upstreamhttp.MaxMessage)
		return st, nil
	}
	var state veoState
	var filtered int
	var reasons []string
	if op.Response != nil && op.Response.GenerateVideoResponse != nil {
		r := op.Response.GenerateVideoResponse
		for _, s := range r.GeneratedSamples {
			if s.Video.URI != "" {
				state.Samples = append(state.Samples, veoSample{URI: s.Video.URI, MimeType: s.Video.MimeType})
			}
		}
		filtered, reasons = r.RaiMediaFilteredCount, r.RaiMediaFilteredReasons
	}
	switch {
	case len(state.Samples) > 0:
		st.Status, st.Progress = providers.JobCompleted, 100
		st.Variants, st.Samples = []string{"video"}, len(state.Samples)
		st.State, _ = json.Marshal(state)
	case filtered > 0:
		st.ErrorCode = "content_filtered"
		st.ErrorMessage = "Veo filtered the video"
		if len(reasons) > 0 {
			st.ErrorMessage += ": " + upstreamhttp.Truncate(strings.Join(reasons, "; "), upstreamhttp.MaxMessage)
		}
	default:
		st.ErrorCode, st.ErrorMessage = "no_video", "Veo finished without a video"
	}
	return st, nil
}

// readOperation reads the operation a 2xx answer holds, and returns it with the body.
func (p *Provider) readOperation(ctx context.Context, at *upstreamhttp.Attempt, resp *http.Response) (*veoOperation, []byte, error) {
	b, err := p.up.ReadBody(ctx, at, resp)
	if err != nil {
		return nil, nil, err
	}
	var op veoOperation
	if err := json.Unmarshal(b, &op); err != nil {
		return nil, nil, p.up.Malformed(resp.StatusCode, b, err)
	}
	return &op, b, nil
}

// checkOperationName accepts an operation's resource name (models/{model}/operations/{id}):
// segments of letters, digits and -_., so that a name cannot change the URL's path or query.
func checkOperationName(name string) error {
	if len(name) > 512 || !strings.Contains(name, "/operations/") {
		return fmt.Errorf("%q is not a Veo operation", upstreamhttp.Truncate(name, 300))
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%q is not a Veo operation", upstreamhttp.Truncate(name, 300))
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
				return fmt.Errorf("%q is not a Veo operation", upstreamhttp.Truncate(name, 300))
			}
		}
	}
	return nil
}

// VideoContent streams a sample of a completed job from the URI its poll kept in State,
// with the client's Range. Only the video variant exists; another, or an index past the
// last sample, is CategoryNotFound without a call.
//
// The URI needs the API key (the x-goog-api-key header), which goes only to the configured
// base URL's host or to an https googleapis.com host: a URI elsewhere is refused without a
// call. Redirects (to a signed URL) are followed without any of the provider's headers, to
// those hosts or https googleusercontent.com ones, at most maxVideoRedirects.
func (p *Provider) VideoContent(ctx context.Context, req *providers.VideoContentRequest) (*providers.VideoContent, error) {
	if req.Variant != "" && req.Variant != "video" {
		return nil, upstreamhttp.NotFound(p.name, fmt.Sprintf("Veo makes no %q variant, only video", req.Variant))
	}
	var state veoState
	if len(req.State) > 0 {
		if err := json.Unmarshal(req.State, &state); err != nil {
			return nil, fmt.Errorf("provider %s: reading the job's state: %w", p.name, err)
		}
	}
	if req.Index < 0 || req.Index >= len(state.Samples) {
		return nil, upstreamhttp.NotFound(p.name, fmt.Sprintf("the job has no video %d (it has %d)", req.Index, len(state.Samples)))
	}
	base, err := url.Parse(p.base)
	if err != nil {
		return nil, fmt.Errorf("provider %s: parsing the base URL: %w", p.name, err)
	}
	target, err := url.Parse(state.Samples[req.Index].URI)
	if err != nil || !keyHost(base, target) {
		return nil, p.contentRefused(state.Samples[req.Index].URI)
	}
	h := http.Header{"Accept": {"*/*"}}
	if req.RangeHeader != "" {
		h.Set("Range", req.RangeHeader)
	}
	f := upstreamhttp.Fetch{URL: target.String(), Header: h, Redirects: true}
	for hops := 0; ; hops++ {
		resp, at, err := p.up.Fetch(ctx, f)
		if err != nil {
			return nil, upstreamhttp.JobNotFound(err)
		}
		if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
			return p.up.VideoContent(ctx, at, resp, p.idle), nil
		}
		loc, err := target.Parse(resp.Header.Get("Location"))
		_ = resp.Body.Close()
		at.Cancel()
		if err != nil || hops >= maxVideoRedirects || !redirectHost(base, loc) {
			return nil, p.contentRefused(resp.Header.Get("Location"))
		}
		target = loc
		f = upstreamhttp.Fetch{URL: loc.String(), Header: h, Redirects: true, Anonymous: true}
	}
}

// keyHost tells whether the API key may go to u: the scheme and host of base (the
// configured base URL), or an https googleapis.com host.
func keyHost(base, u *url.URL) bool {
	if u.User != nil {
		return false
	}
	if u.Scheme == base.Scheme && strings.EqualFold(u.Host, base.Host) {
		return true
	}
	return u.Scheme == "https" && u.Port() == "" && hostUnder(u.Hostname(), "googleapis.com")
}

// redirectHost tells whether a redirect to u is followed (without credentials): a key host,
// or an https googleusercontent.com host.
func redirectHost(base, u *url.URL) bool {
	return keyHost(base, u) || u.User == nil && u.Scheme == "https" && u.Port() == "" && hostUnder(u.Hostname(), "googleusercontent.com")
}

func hostUnder(host, domain string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	return host == domain || strings.HasSuffix(host, "."+domain)
}

// contentRefused is the refusal of a video location on a host the gateway does not call.
func (p *Provider) contentRefused(location string) *providers.UpstreamError {
	host := "an unreadable URL"
	if u, err := url.Parse(location); err == nil && u.Host != "" {
		host = u.Host
	}
	return &providers.UpstreamError{
		Provider: p.name, Category: providers.CategoryServerError,
		Message: "Veo's video is on " + host + ", a host the gateway does not send the API key to or follow a redirect to",
		Err:     errVideoHost,
	}
}

// errVideoHost is the cause of a video location refused for its host.
var errVideoHost = errors.New("video location on a host not allowed")

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}

// Interface guards.
var _ providers.VideoGenerator = (*Provider)(nil)
