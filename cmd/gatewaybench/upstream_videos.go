package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// The fake upstream's video jobs, on OpenAI's /videos wire, for the jobs tests (jobs.go):
//
//   - POST /v1/videos (JSON or multipart, as the gateway's openai adapter sends it) answers a
//     queued video object. The prompt's directive says what the job does:
//     "[bench video=done b=<bytes>]" completes at its first poll with content of that many
//     bytes; "[bench video=live p=<ms>]" stays in_progress, asking for a poll every <ms>
//     (openai-poll-after-ms), until POST /bench/videos/end.
//   - GET /v1/videos/{id} answers the job's object (seconds "4", size "1280x720").
//   - GET /v1/videos/{id}/content answers the content, made on the fly from a fixed pattern
//     (never held whole), with Range honoured (206, Content-Range) by http.ServeContent.
//   - POST /bench/videos/end completes every live job created so far; GET /bench/videos/stats
//     counts the creates, the polls of live jobs and the content bytes served.
//
// A job's id carries everything the fake needs to answer for it ("video_bench_<mode>_<param>
// _<epoch>_<seq>"): the fake keeps no table of jobs, so a thousand live jobs cost it nothing.

// videoPattern is the content's repeating pattern. Its length is prime, so that no range
// that starts at a round offset starts where another would: an offset off by any amount
// shows as different bytes.
var videoPattern = func() []byte {
	b := make([]byte, 65521)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}()

// fillPattern writes the content's bytes from offset off into p.
func fillPattern(p []byte, off int64) {
	for i := 0; i < len(p); {
		i += copy(p[i:], videoPattern[(off+int64(i))%int64(len(videoPattern)):])
	}
}

// patternContent is content of size bytes of the pattern, read and sought without holding it.
type patternContent struct{ off, size int64 }

func (c *patternContent) Read(p []byte) (int, error) {
	if c.off >= c.size {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), c.size-c.off)]
	fillPattern(p, c.off)
	c.off += int64(len(p))
	return len(p), nil
}

func (c *patternContent) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += c.off
	case io.SeekEnd:
		offset += c.size
	default:
		return 0, errors.New("bad whence")
	}
	if offset < 0 {
		return 0, errors.New("negative offset")
	}
	c.off = offset
	return offset, nil
}

// patternRun is the pattern repeated over patternRunLen bytes more than its length, so that
// any run of up to patternRunLen bytes of the content, from any offset, is one slice of it.
var patternRun = func() []byte {
	b := make([]byte, len(videoPattern)+patternRunLen)
	fillPattern(b, 0)
	return b
}()

const patternRunLen = 256 << 10

// patternChecker checks that what is written to it is the pattern from offset off on. It
// compares with a slice of patternRun, copying nothing: the check costs the load generator
// one pass over the bytes, which weighs the same on every arm.
type patternChecker struct{ off int64 }

func (c *patternChecker) Write(p []byte) (int, error) {
	for done := 0; done < len(p); {
		n := min(len(p)-done, patternRunLen)
		at := int((c.off + int64(done)) % int64(len(videoPattern)))
		got, want := p[done:done+n], patternRun[at:at+n]
		if !bytes.Equal(got, want) {
			for i := range got {
				if got[i] != want[i] {
					return done + i, fmt.Errorf("byte %d of the content differs from the upstream's", c.off+int64(done+i))
				}
			}
		}
		done += n
	}
	c.off += int64(len(p))
	return len(p), nil
}

// Video job modes, the first word of a fake job's id after its prefix.
const (
	videoDone = "done"
	videoLive = "live"
)

const videoIDPrefix = "video_bench_"

// videoJob is what a fake job's id says of it.
type videoJob struct {
	id    string
	mode  string
	param int64 // content bytes (done) or the poll interval asked, in ms (live)
	epoch int64
}

func parseVideoID(id string) (videoJob, bool) {
	rest, ok := strings.CutPrefix(id, videoIDPrefix)
	if !ok {
		return videoJob{}, false
	}
	f := strings.Split(rest, "_")
	if len(f) != 4 || f[0] != videoDone && f[0] != videoLive {
		return videoJob{}, false
	}
	param, err1 := strconv.ParseInt(f[1], 10, 64)
	epoch, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || param < 0 {
		return videoJob{}, false
	}
	return videoJob{id: id, mode: f[0], param: param, epoch: epoch}, true
}

// videoStats is the fake's count of its video traffic.
type videoStats struct {
	creates, polls, livePolls, contentBytes atomic.Int64
	// liveEpoch numbers the live jobs' generation: POST /bench/videos/end completes every
	// live job of an earlier one.
	liveEpoch atomic.Int64
	seq       atomic.Int64
}

// videoStatsJSON is GET /bench/videos/stats.
type videoStatsJSON struct {
	Creates      int64 `json:"creates"`
	Polls        int64 `json:"polls"`
	LivePolls    int64 `json:"live_polls"`
	ContentBytes int64 `json:"content_bytes"`
}

func (s *videoStats) snapshot() videoStatsJSON {
	return videoStatsJSON{Creates: s.creates.Load(), Polls: s.polls.Load(), LivePolls: s.livePolls.Load(), ContentBytes: s.contentBytes.Load()}
}

// createVideo reads the prompt (a JSON body's, or a multipart form's field) and answers the
// job, queued.
func (u *fakeUpstream) createVideo(w http.ResponseWriter, r *http.Request) {
	var prompt string
	if strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/") {
		ok := eachPart(w, r, func(p *multipart.Part) error {
			if p.FormName() == "prompt" {
				b, err := io.ReadAll(io.LimitReader(p, 1<<20))
				prompt = string(b)
				return err
			}
			return nil
		})
		if !ok {
			return
		}
	} else {
		var body struct {
			Prompt string `json:"prompt"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body); err != nil {
			http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		prompt = body.Prompt
	}
	f := benchFields([]byte(prompt))
	mode := f["video"]
	var param int64
	switch mode {
	case videoDone:
		param, _ = strconv.ParseInt(f["b"], 10, 64)
	case videoLive:
		param, _ = strconv.ParseInt(f["p"], 10, 64)
	default:
		http.Error(w, `the prompt has no "[bench video=done b=<bytes>]" or "[bench video=live p=<ms>]"`, http.StatusBadRequest)
		return
	}
	if param <= 0 {
		http.Error(w, "the directive's b or p must be positive", http.StatusBadRequest)
		return
	}
	u.videos.creates.Add(1)
	id := fmt.Sprintf("%s%s_%d_%d_%d", videoIDPrefix, mode, param, u.videos.liveEpoch.Load(), u.videos.seq.Add(1))
	writeVideo(w, id, "queued", 0)
}

// writeVideo answers a video object.
func writeVideo(w http.ResponseWriter, id, status string, progress int) {
	body := fmt.Appendf(nil, `{"id":%q,"object":"video","created_at":1700000000,"status":%q,"model":"sora-2","progress":%d,"seconds":"4","size":"1280x720"}`,
		id, status, progress)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// pollVideo answers where a job stands: a done job has completed, a live one is in
// progress (and asks for its next poll) until its epoch has ended.
func (u *fakeUpstream) pollVideo(w http.ResponseWriter, r *http.Request) {
	j, ok := parseVideoID(r.PathValue("id"))
	if !ok {
		http.Error(w, `{"error":{"message":"no such video","type":"invalid_request_error","code":"not_found"}}`, http.StatusNotFound)
		return
	}
	u.videos.polls.Add(1)
	if j.mode == videoLive && j.epoch >= u.videos.liveEpoch.Load() {
		u.videos.livePolls.Add(1)
		w.Header().Set("Openai-Poll-After-Ms", strconv.FormatInt(j.param, 10))
		writeVideo(w, j.id, "in_progress", 50)
		return
	}
	writeVideo(w, j.id, "completed", 100)
}

// videoContent serves a done job's content, whole or by Range.
func (u *fakeUpstream) videoContent(w http.ResponseWriter, r *http.Request) {
	j, ok := parseVideoID(r.PathValue("id"))
	if !ok || j.mode != videoDone {
		http.Error(w, `{"error":{"message":"no such video content","type":"invalid_request_error","code":"not_found"}}`, http.StatusNotFound)
		return
	}
	if v := r.URL.Query().Get("variant"); v != "" && v != "video" {
		http.Error(w, `{"error":{"message":"the bench serves the video variant only","type":"invalid_request_error"}}`, http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "video/mp4")
	cw := &countingWriter{ResponseWriter: w, n: &u.videos.contentBytes}
	http.ServeContent(cw, r, "", time.Time{}, &patternContent{size: j.param})
}

// countingWriter counts the bytes of a response's body.
type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// endLiveVideos completes every live job created so far.
func (u *fakeUpstream) endLiveVideos(w http.ResponseWriter, r *http.Request) {
	u.videos.liveEpoch.Add(1)
}

func (u *fakeUpstream) videoStatsHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(u.videos.snapshot())
}
