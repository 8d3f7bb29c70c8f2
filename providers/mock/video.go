package mock

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// The mock's video upstream. A job renders for Config.VideoRender from its start, queued
// for the first quarter of it, then in progress, its progress growing with the time its
// polls come at; then it is complete, and its content is VideoBytesPerSecond bytes a second
// of video: an MP4 box header (ftyp, then an mdat box spanning the rest) followed by
// pseudo-random bytes that any offset recomputes, so that a video of hundreds of megabytes
// streams, range by range, without ever being held.
//
// Everything a poll needs is in the job's native id (when it started, what it makes, how
// it ends), so that any mock with the same configuration polls any job, across reloads and
// instances. Only deletions are remembered, by the Provider that made them.
//
// Failures, for tests: an upstream model whose name contains "fail" (or a prompt containing
// "[mock:fail]") makes jobs that end failed; one whose name contains "down" refuses to
// start them with a retryable 503, as an upstream out of capacity does.

// Defaults of the mock's videos.
const (
	DefaultVideoRender         = 3 * time.Second
	DefaultVideoBytesPerSecond = 64 << 10
	defaultVideoSeconds        = 4
	defaultVideoSize           = "720x1280"
	// mp4Header is the ftyp box and the header of the mdat box (64-bit size) that begin
	// every mock video.
	mp4Header = 32 + 16
)

// Markers of the mock's video failures.
const (
	videoFailMarker   = "fail"
	videoDownMarker   = "down"
	videoPromptFail   = "[mock:fail]"
	videoNativePrefix = "mockvid"
)

// videoJobs is what a Provider keeps of its video jobs: its deletions.
type videoJobs struct {
	// now is the clock of video jobs; nil is time.Now.
	now func() time.Time
	// nonce tells apart the video jobs of identical requests.
	nonce   atomic.Uint64
	mu      sync.Mutex
	deleted map[string]bool
}

// mockVideo is what a job's native id says of it.
type mockVideo struct {
	seed    uint64
	started time.Time
	seconds int
	size    string
	fails   bool
}

func (v mockVideo) id(nonce uint64) string {
	fails := "ok"
	if v.fails {
		fails = "fail"
	}
	return fmt.Sprintf("%s_%016x_%d_%d_%d_%s_%s", videoNativePrefix, v.seed, v.started.UnixMilli(), nonce, v.seconds, v.size, fails)
}

func parseMockVideo(id string) (mockVideo, bool) {
	f := strings.Split(id, "_")
	if len(f) != 7 || f[0] != videoNativePrefix {
		return mockVideo{}, false
	}
	seed, err1 := strconv.ParseUint(f[1], 16, 64)
	started, err2 := strconv.ParseInt(f[2], 10, 64)
	seconds, err3 := strconv.Atoi(f[4])
	if err1 != nil || err2 != nil || err3 != nil || seconds <= 0 {
		return mockVideo{}, false
	}
	if _, _, ok := parseSize(f[5]); !ok {
		return mockVideo{}, false
	}
	return mockVideo{seed: seed, started: time.UnixMilli(started), seconds: seconds, size: f[5], fails: f[6] == "fail"}, true
}

// resolution is the video's resolution as prices name it: its short side, "720p".
func (v mockVideo) resolution() string {
	w, h, _ := parseSize(v.size)
	return strconv.Itoa(min(w, h)) + "p"
}

func (p *Provider) videoRender() time.Duration {
	if p.cfg.VideoRender > 0 {
		return p.cfg.VideoRender
	}
	return DefaultVideoRender
}

// videoLength is the length of the video content of v in bytes.
func (p *Provider) videoLength(v mockVideo) int64 {
	perSecond := p.cfg.VideoBytesPerSecond
	if perSecond <= 0 {
		perSecond = DefaultVideoBytesPerSecond
	}
	return max(int64(v.seconds)*perSecond, mp4Header+1)
}

func (p *Provider) clock() time.Time {
	if p.videos.now != nil {
		return p.videos.now()
	}
	return time.Now()
}

// StartVideo starts a job after the latency. Seconds 0 is 4; no size and no resolution is
// 720x1280; a resolution with no size is the 16:9 (or AspectRatio's) size of that height.
func (p *Provider) StartVideo(ctx context.Context, req *providers.VideoRequest) (*providers.VideoStatus, error) {
	if strings.Contains(req.Model, videoDownMarker) {
		return nil, &providers.UpstreamError{
			Provider: p.cfg.Name, Status: http.StatusServiceUnavailable, Type: "server_error", Code: "overloaded",
			Message: "the mock video model " + req.Model + " is down", Category: providers.CategoryServerError, Retryable: true,
		}
	}
	seconds := req.Seconds
	if seconds == 0 {
		seconds = defaultVideoSeconds
	}
	if seconds < 0 || seconds > 600 {
		return nil, p.invalid(fmt.Sprintf("seconds is %d: from 1 to 600", seconds))
	}
	size, err := mockVideoSize(req)
	if err != nil {
		return nil, p.invalid(err.Error())
	}
	key := req.Model + "\x00" + req.Prompt + "\x00" + strconv.Itoa(seconds) + "\x00" + size + "\x00" + req.NegativePrompt
	if req.Seed != nil {
		key += "\x00seed " + strconv.FormatInt(*req.Seed, 10)
	}
	if req.InputReference != nil {
		key += "\x00ref " + strconv.FormatUint(hash(string(req.InputReference.Data)), 16)
	}
	v := mockVideo{
		seed: hash(key), started: p.clock().Truncate(time.Millisecond), seconds: seconds, size: size,
		fails: strings.Contains(req.Model, videoFailMarker) || strings.Contains(req.Prompt, videoPromptFail),
	}
	if err := p.delay(ctx); err != nil {
		return nil, fmt.Errorf("provider %s: %w", p.cfg.Name, err)
	}
	return p.videoStatus(v, v.id(p.videos.nonce.Add(1))), nil
}

// mockVideoSize is the size a request asks for, as WIDTHxHEIGHT.
func mockVideoSize(req *providers.VideoRequest) (string, error) {
	if req.Size != "" {
		size := strings.ToLower(req.Size)
		if _, _, ok := parseSize(size); !ok {
			return "", fmt.Errorf("size %q is not WIDTHxHEIGHT", req.Size)
		}
		return size, nil
	}
	if req.Resolution == "" {
		return defaultVideoSize, nil
	}
	h, err := strconv.Atoi(strings.TrimSuffix(strings.ToLower(req.Resolution), "p"))
	if err != nil || h <= 0 || h > 8192 {
		return "", fmt.Errorf("resolution %q is not such as 720p", req.Resolution)
	}
	aw, ah := 16, 9
	if req.AspectRatio != "" {
		a, b, ok := strings.Cut(req.AspectRatio, ":")
		x, err1 := strconv.Atoi(a)
		y, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil || x <= 0 || y <= 0 {
			return "", fmt.Errorf("aspect_ratio %q is not such as 16:9", req.AspectRatio)
		}
		aw, ah = x, y
	}
	if aw >= ah {
		return fmt.Sprintf("%dx%d", h*aw/ah, h), nil
	}
	return fmt.Sprintf("%dx%d", h, h*ah/aw), nil
}

// PollVideo says where the job stands, from the time since it started.
func (p *Provider) PollVideo(ctx context.Context, model, nativeID string) (*providers.VideoStatus, error) {
	v, err := p.video(nativeID)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("provider %s: %w", p.cfg.Name, err)
	}
	return p.videoStatus(v, nativeID), nil
}

// video reads a native id of this mock, refusing one it deleted or never made.
func (p *Provider) video(nativeID string) (mockVideo, error) {
	v, ok := parseMockVideo(nativeID)
	p.videos.mu.Lock()
	deleted := p.videos.deleted[nativeID]
	p.videos.mu.Unlock()
	if !ok || deleted {
		return mockVideo{}, p.notFound(fmt.Sprintf("no video job %q", nativeID))
	}
	return v, nil
}

func (p *Provider) videoStatus(v mockVideo, nativeID string) *providers.VideoStatus {
	render := p.videoRender()
	elapsed := p.clock().Sub(v.started)
	st := &providers.VideoStatus{NativeID: nativeID, Size: v.size, Resolution: v.resolution(), PollAfter: render / 4}
	switch {
	case elapsed >= render && v.fails:
		st.Status, st.ErrorCode, st.ErrorMessage = providers.JobFailed, "video_generation_failed", "the mock video model was asked to fail"
		st.PollAfter = 0
	case elapsed >= render:
		st.Status, st.Progress, st.PollAfter = providers.JobCompleted, 100, 0
		st.Seconds = time.Duration(v.seconds) * time.Second
		st.Variants, st.Samples = []string{"video", "thumbnail"}, 1
	case elapsed < render/4:
		st.Status = providers.JobQueued
	default:
		st.Status, st.Progress = providers.JobInProgress, min(int(elapsed*100/render), 99)
	}
	return st
}

// VideoContent streams a completed job's video (video/mp4) or thumbnail (a PNG); there is
// no spritesheet, and one sample. A single byte range is honoured (206); several are
// answered whole, as HTTP allows.
func (p *Provider) VideoContent(ctx context.Context, req *providers.VideoContentRequest) (*providers.VideoContent, error) {
	v, err := p.video(req.NativeID)
	if err != nil {
		return nil, err
	}
	if st := p.videoStatus(v, req.NativeID); st.Status != providers.JobCompleted {
		return nil, p.notFound("video job " + req.NativeID + " has no content: it is " + st.Status)
	}
	if req.Index != 0 {
		return nil, p.notFound(fmt.Sprintf("video job %s made one sample; index %d does not exist", req.NativeID, req.Index))
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("provider %s: %w", p.cfg.Name, err)
	}
	switch req.Variant {
	case "", "video":
	case "thumbnail":
		seed := v.seed
		w, h, _ := parseSize(v.size)
		png, err := thumbnail(&seed, clampEdge(w), clampEdge(h), false)
		if err != nil {
			return nil, fmt.Errorf("provider %s: encoding a thumbnail: %w", p.cfg.Name, err)
		}
		return &providers.VideoContent{Body: io.NopCloser(strings.NewReader(string(png))), ContentType: "image/png", Status: http.StatusOK, Length: int64(len(png))}, nil
	default:
		return nil, p.notFound(fmt.Sprintf("video job %s has no %q variant", req.NativeID, req.Variant))
	}
	total := p.videoLength(v)
	from, to, ranged, err := byteRange(req.RangeHeader, total)
	if err != nil {
		return nil, &providers.UpstreamError{Provider: p.cfg.Name, Status: http.StatusRequestedRangeNotSatisfiable, Type: "invalid_request_error",
			Code: "range_not_satisfiable", Message: err.Error(), Category: providers.CategoryInvalidRequest}
	}
	out := &providers.VideoContent{
		Body: io.NopCloser(&videoBytes{seed: v.seed, total: total, off: from, end: to + 1}), ContentType: "video/mp4",
		Status: http.StatusOK, Length: to + 1 - from,
	}
	if ranged {
		out.Status, out.ContentRange = http.StatusPartialContent, fmt.Sprintf("bytes %d-%d/%d", from, to, total)
	}
	return out, nil
}

// byteRange reads a Range header of one byte range over a body of total bytes: the first
// and last byte it asks (the whole body when there is no header, or several ranges), and
// whether it is a range. A range that starts past the end is an error.
func byteRange(header string, total int64) (from, to int64, ranged bool, err error) {
	spec, ok := strings.CutPrefix(strings.TrimSpace(header), "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return 0, total - 1, false, nil
	}
	a, b, ok := strings.Cut(strings.TrimSpace(spec), "-")
	if !ok {
		return 0, total - 1, false, nil
	}
	if a == "" {
		n, perr := strconv.ParseInt(b, 10, 64)
		if perr != nil || n <= 0 {
			return 0, 0, false, fmt.Errorf("range %q is not satisfiable", header)
		}
		return max(total-n, 0), total - 1, true, nil
	}
	from, perr := strconv.ParseInt(a, 10, 64)
	if perr != nil || from < 0 || from >= total {
		return 0, 0, false, fmt.Errorf("range %q is not satisfiable: the video has %d bytes", header, total)
	}
	to = total - 1
	if b != "" {
		last, perr := strconv.ParseInt(b, 10, 64)
		if perr != nil || last < from {
			return 0, 0, false, fmt.Errorf("range %q is not satisfiable", header)
		}
		to = min(last, total-1)
	}
	return from, to, true, nil
}

// DeleteVideo forgets a job: its polls and content are 404 from then on, from this
// Provider.
func (p *Provider) DeleteVideo(ctx context.Context, model, nativeID string) error {
	if _, err := p.video(nativeID); err != nil {
		return err
	}
	p.videos.mu.Lock()
	defer p.videos.mu.Unlock()
	if p.videos.deleted == nil || len(p.videos.deleted) > 100_000 {
		p.videos.deleted = map[string]bool{} // bounded: a mock is not a database
	}
	p.videos.deleted[nativeID] = true
	return nil
}

func (p *Provider) notFound(msg string) *providers.UpstreamError {
	return &providers.UpstreamError{
		Provider: p.cfg.Name, Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found",
		Message: msg, Category: providers.CategoryNotFound,
	}
}

// VideoBytes returns the video content of the mock job nativeID as VideoContent streams
// it, and its length, for tests that check what the gateway relayed.
func (p *Provider) VideoBytes(nativeID string) (io.Reader, int64, error) {
	v, ok := parseMockVideo(nativeID)
	if !ok {
		return nil, 0, fmt.Errorf("%q is not a mock video id", nativeID)
	}
	total := p.videoLength(v)
	return &videoBytes{seed: v.seed, total: total, end: total}, total, nil
}

// videoBytes reads bytes [off, end) of a mock video of total bytes: the MP4 header, then
// SplitMix64 of each 8-byte block's index, so that any offset is computed alone.
type videoBytes struct {
	seed       uint64
	total, off int64
	end        int64
}

func (r *videoBytes) Read(p []byte) (int, error) {
	if r.off >= r.end {
		return 0, io.EOF
	}
	n := 0
	var block [8]byte
	for n < len(p) && r.off < r.end {
		var c int
		if r.off < mp4Header {
			hdr := mp4HeaderBytes(r.total)
			c = copy(p[n:], hdr[r.off:min(mp4Header, r.end)])
		} else {
			state := r.seed + uint64(r.off/8)*0x9E3779B97F4A7C15
			binary.LittleEndian.PutUint64(block[:], splitmix(&state))
			c = copy(p[n:], block[r.off%8:min(8, r.off%8+r.end-r.off)])
		}
		n += c
		r.off += int64(c)
	}
	return n, nil
}

// mp4HeaderBytes is the ftyp box and the mdat box header of a video of total bytes.
func mp4HeaderBytes(total int64) [mp4Header]byte {
	var h [mp4Header]byte
	binary.BigEndian.PutUint32(h[0:], 32)
	copy(h[4:], "ftypisom")
	binary.BigEndian.PutUint32(h[12:], 0x200)
	copy(h[16:], "isomiso2avc1mp41")
	binary.BigEndian.PutUint32(h[32:], 1) // the size is the 64-bit one that follows
	copy(h[36:], "mdat")
	binary.BigEndian.PutUint64(h[40:], uint64(total-32))
	return h
}

// Interface guards.
var (
	_ providers.VideoGenerator = (*Provider)(nil)
	_ providers.VideoDeleter   = (*Provider)(nil)
)
