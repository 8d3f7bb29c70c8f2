package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The jobs tests measure the gateway's asynchronous video jobs on the fake upstream's
// /videos wire (upstream_videos.go). Like the media tests, each has an arm of the gateway of
// its own and runs only when -tests names it (or "jobs"): they are not part of "all".
//
//	video-content  GET /v1/videos/{id}/content of a completed job, whole and by Range,
//	               downloads one after another, the arms taking turns: throughput (the
//	               target: at least 0.9x plain Caddy's reverse_proxy to the same upstream
//	               path), and the proxy's peak Go heap growth over its idle heap during the
//	               downloads (the target: at most 2 MB). Every byte is checked.
//	jobs-load      chat completions at a fixed rate (open loop) on the gateway, with no live
//	               job, then with -jobs live video jobs that the fake keeps in_progress and
//	               asks to be polled every -jobs-poll-after, then with none again once the
//	               gateway has ended them: the chat p99 with the jobs live over the p99 of
//	               the two spells without (the target: at most 1.2x), plain Caddy's the
//	               same way as the machine's control, and the polls the gateway made per
//	               second.

// jobsTests are the tests that "all" leaves out ("jobs" names them all; batch-load is in
// batch.go).
var jobsTests = []string{"video-content", "jobs-load", "batch-load"}

// The gateway's arm of each jobs test, and the model of the video jobs (gatewayCaddyfile).
const (
	videoContentArm = "gw-video-content"
	jobsChatArm     = "gw-jobs-chat"
	videoModel      = "bench-video"
)

// --- video-content ---

// videoContentPath is the content of job id, the video variant (the gateway asks the
// upstream for it by name; the baselines ask the same).
func videoContentPath(id string) string { return "/v1/videos/" + id + "/content?variant=video" }

// videoCreateBody is a create of a 4 s 720p video whose directive tells the fake what the
// job does.
func videoCreateBody(directive string) []byte {
	prompt := strconv.Quote("A slow pan over a benchmark's results. " + directive)
	return fmt.Appendf(nil, `{"model":%q,"prompt":%s,"seconds":"4","size":"1280x720"}`, videoModel, prompt)
}

// videoObjectOf is the part of a video object the bench reads.
type videoObjectOf struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Error  *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// callJSON sends a request with the key and decodes a 2xx JSON answer into out.
func callJSON(ctx context.Context, client *http.Client, method, url, key string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	return readJSONAnswer(resp, method+" "+url, out)
}

// readJSONAnswer reads and closes the answer to the request what names, and decodes a 2xx
// JSON answer into out (unless out is nil); any other status is an error quoting the answer.
func readJSONAnswer(resp *http.Response, what string, out any) error {
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: status %d: %.300s", what, resp.StatusCode, bytes.TrimSpace(data))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s: %w: %.300s", what, err, data)
	}
	return nil
}

// createVideoJob creates a video job at base (the gateway's, or the fake's own) and returns
// its id.
func createVideoJob(ctx context.Context, client *http.Client, base, key, directive string) (string, error) {
	var v videoObjectOf
	if err := callJSON(ctx, client, http.MethodPost, base+"/v1/videos", key, videoCreateBody(directive), &v); err != nil {
		return "", err
	}
	if v.ID == "" {
		return "", fmt.Errorf("POST %s/v1/videos answered no id", base)
	}
	return v.ID, nil
}

// awaitVideo polls GET /v1/videos/{id} until the job has completed, as a client would.
func awaitVideo(ctx context.Context, client *http.Client, base, key, id string) error {
	for {
		var v videoObjectOf
		if err := callJSON(ctx, client, http.MethodGet, base+"/v1/videos/"+id, key, nil, &v); err != nil {
			return err
		}
		switch v.Status {
		case "completed":
			return nil
		case "failed":
			msg := ""
			if v.Error != nil {
				msg = v.Error.Code + ": " + v.Error.Message
			}
			return fmt.Errorf("video %s failed: %s", id, msg)
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return fmt.Errorf("video %s still %s: %w", id, v.Status, ctx.Err())
		}
	}
}

// prepareVideo makes the arm's content URL: a completed job of -video-bytes, created at the
// fake for direct and plain Caddy (which pass the fake's id through), through the gateway
// for its arm (which polls the job to its end first).
func (b *bench) prepareVideo(ctx context.Context, a *arm) error {
	directive := fmt.Sprintf("[bench video=done b=%d]", b.cfg.VideoBytes)
	base := b.upstreamURL
	if a.kind == kindGateway {
		base = strings.TrimSuffix(a.url, "/v1/videos")
	}
	id, err := createVideoJob(ctx, a.client, base, a.key, directive)
	if err != nil {
		return err
	}
	if err := awaitVideo(ctx, a.client, base, a.key, id); err != nil {
		return err
	}
	if a.kind == kindCaddy {
		base = strings.TrimSuffix(a.url, "/v1/videos")
	}
	a.url = base + videoContentPath(id)
	// One small range on every arm: the wire works before minutes are spent on it.
	_, _, err = a.download(ctx, "bytes=1000-66535", 1000, 65536)
	return err
}

// videoRange is a parsed -video-range: its first byte and its length.
func (c *config) videoRange() (start, n int64, err error) {
	spec, ok := strings.CutPrefix(c.VideoRange, "bytes=")
	first, last, ok2 := strings.Cut(spec, "-")
	s, err1 := strconv.ParseInt(first, 10, 64)
	e, err2 := strconv.ParseInt(last, 10, 64)
	if !ok || !ok2 || err1 != nil || err2 != nil || s < 0 || e < s || e >= c.VideoBytes {
		return 0, 0, fmt.Errorf("-video-range %q is not bytes=FIRST-LAST within the %d bytes of -video-bytes", c.VideoRange, c.VideoBytes)
	}
	return s, e - s + 1, nil
}

// download GETs the arm's content, whole (rng "") or by the range rng, which starts at start
// and holds want bytes; it checks the status, the length and every byte, and returns the
// bytes read and the time from the send to the last byte.
func (a *arm) download(ctx context.Context, rng string, start, want int64) (int64, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.url, nil)
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+a.key)
	wantStatus := http.StatusOK
	if rng != "" {
		req.Header.Set("Range", rng)
		wantStatus = http.StatusPartialContent
	}
	t0 := time.Now()
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != wantStatus {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return 0, 0, fmt.Errorf("status %d, want %d: %s", resp.StatusCode, wantStatus, bytes.TrimSpace(msg))
	}
	if rng != "" {
		if cr, want := resp.Header.Get("Content-Range"), fmt.Sprintf("bytes %d-%d/", start, start+want-1); !strings.HasPrefix(cr, want) {
			return 0, 0, fmt.Errorf("Content-Range %q, want %q…", cr, want)
		}
	}
	p := downloadBufs.Get().(*[]byte)
	defer downloadBufs.Put(p)
	n, err := io.CopyBuffer(&patternChecker{off: start}, struct{ io.Reader }{resp.Body}, *p)
	d := time.Since(t0)
	switch {
	case err != nil:
		return n, d, fmt.Errorf("after %d bytes: %w", n, err)
	case n != want:
		return n, d, fmt.Errorf("%d bytes, want %d", n, want)
	}
	return n, d, nil
}

// downloadBufs are the load generator's read buffers of content: large, so that the client
// reads in few calls.
var downloadBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// videoResult is the video-content test of one arm in one round.
type videoResult struct {
	Downloads  int   `json:"downloads"`
	Bytes      int64 `json:"bytes"`
	RangeBytes int64 `json:"range_bytes"`
	// MBps and RangeMBps are the medians of the whole and ranged downloads' throughput, in
	// MB (10^6 bytes) a second, send to last byte.
	MBps      num `json:"mb_per_s"`
	RangeMBps num `json:"range_mb_per_s"`
	// CPUPerGBs is the proxy's CPU time per GB of content (/proc utime+stime).
	CPUPerGBs num `json:"cpu_s_per_gb"`
	heapFigures
	AllocPerGBMB num    `json:"alloc_mb_per_gb"`
	Errors       int64  `json:"errors"`
	FirstError   string `json:"first_error,omitempty"`
	Note         string `json:"note,omitempty"`
}

// videoRound runs -video-downloads whole downloads and as many ranged ones on each arm, the
// arms taking turns download by download, and measures each proxy's heap around them all:
// each proxy serves its own arm alone, so its peak is its own downloads'.
func (b *bench) videoRound(ctx context.Context, arms []*arm) map[string]videoResult {
	cfg := b.cfg
	rstart, rlen, _ := cfg.videoRange() // validated
	type acc struct {
		whole, ranged []float64
		bytes         int64
		cpu           time.Duration
		errs          errorLog
		hw            *heapWatch
	}
	accs := make([]acc, len(arms))
	for i, a := range arms {
		accs[i].hw = watchHeap(ctx, a.proc)
	}
	one := func(i int, rng string, start, want int64, into *[]float64) {
		a, ac := arms[i], &accs[i]
		rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		c0 := cpuOf(a.proc)
		n, d, err := a.download(rctx, rng, start, want)
		ac.cpu += cpuOf(a.proc) - c0
		ac.bytes += n
		if err != nil {
			ac.errs.add(err)
			return
		}
		*into = append(*into, float64(n)/1e6/d.Seconds())
	}
	for k := 0; k < cfg.VideoDownloads && ctx.Err() == nil; k++ {
		for i := range arms {
			one(i, "", 0, cfg.VideoBytes, &accs[i].whole)
		}
	}
	for k := 0; k < cfg.VideoDownloads && ctx.Err() == nil; k++ {
		for i := range arms {
			one(i, cfg.VideoRange, rstart, rlen, &accs[i].ranged)
		}
	}
	out := make(map[string]videoResult, len(arms))
	for i, a := range arms {
		ac := &accs[i]
		r := videoResult{Downloads: cfg.VideoDownloads, Bytes: cfg.VideoBytes, RangeBytes: rlen,
			MBps: num(median(ac.whole)), RangeMBps: num(median(ac.ranged)), CPUPerGBs: nan, AllocPerGBMB: nan,
			Errors: ac.errs.n.Load(), FirstError: ac.errs.first}
		r.heapFigures, r.Note = ac.hw.finish(ctx)
		if gb := float64(ac.bytes) / 1e9; gb > 0 && a.proc != nil {
			r.CPUPerGBs = num(ac.cpu.Seconds() / gb)
			r.AllocPerGBMB = num(float64(r.AllocMB) / gb)
		}
		out[a.name] = r
	}
	return out
}

// --- jobs-load ---

// jobsResult is the jobs-load test of one arm in one round: its chat latency with no live
// job (before the jobs and after them), with the jobs live, and, for the gateway's arm,
// what the jobs did.
type jobsResult struct {
	IdleBefore latResult `json:"idle_before"`
	Live       latResult `json:"live"`
	IdleAfter  latResult `json:"idle_after"`
	// IdleP99Us is the p99 of the samples of both spells without a live job: a drift of the
	// machine over the round weighs on the baseline as on the spell with the jobs between.
	IdleP99Us num `json:"idle_p99_us"`
	// LiveOverIdleP99 is the p99 with the jobs live over IdleP99Us.
	LiveOverIdleP99 num `json:"live_over_idle_p99"`
	// The gateway's arm only (NaN or 0 on the others): the live jobs created and the seconds
	// their creates took; the polls of live jobs the fake saw per second while the chat was
	// measured with them (the jobs ask for Jobs / PollAfter), the jobs still live at its
	// end, and the seconds the gateway took to end them all once the fake completed them.
	Jobs           int    `json:"jobs"`
	CreateSeconds  num    `json:"create_seconds"`
	PollsPerSecond num    `json:"polls_per_second"`
	WantPollsPerS  num    `json:"want_polls_per_second"`
	LiveAtEnd      int64  `json:"live_at_end"`
	EndSeconds     num    `json:"end_seconds"`
	Errors         int64  `json:"errors"`
	FirstError     string `json:"first_error,omitempty"`
	Note           string `json:"note,omitempty"`
}

// liveJobs counts the gateway's jobs that have not ended, reading its SQLite file.
func (b *bench) liveJobs() (int64, error) {
	db, err := sql.Open("sqlite3", "file:"+b.dbPaths[0]+"?mode=ro&_busy_timeout=10000")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int64
	err = db.QueryRow(`SELECT COUNT(*) FROM jobs WHERE status IN ('queued', 'in_progress')`).Scan(&n)
	return n, err
}

// awaitNoLiveJobs waits until the gateway has no live job, or the timeout passes; it returns
// the jobs still live and the time it waited.
func (b *bench) awaitNoLiveJobs(ctx context.Context, timeout time.Duration) (int64, time.Duration, error) {
	start := time.Now()
	for {
		n, err := b.liveJobs()
		if err != nil || n == 0 || time.Since(start) > timeout || ctx.Err() != nil {
			return n, time.Since(start), err
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// fakeVideoStats reads the fake's video counters.
func (b *bench) fakeVideoStats(ctx context.Context) (videoStatsJSON, error) {
	var s videoStatsJSON
	err := callJSON(ctx, http.DefaultClient, http.MethodGet, b.upstreamURL+"/bench/videos/stats", "", nil, &s)
	return s, err
}

// createLiveJobs creates n live jobs through the gateway, conc at a time.
func createLiveJobs(ctx context.Context, gw *arm, base string, n, conc int, pollAfter time.Duration, errs *errorLog) int64 {
	directive := fmt.Sprintf("[bench video=live p=%d]", pollAfter.Milliseconds())
	var created sync.WaitGroup
	var ok int64
	var mu sync.Mutex
	next := make(chan struct{})
	for w := 0; w < conc; w++ {
		created.Go(func() {
			for range next {
				rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, err := createVideoJob(rctx, gw.client, base, gw.key, directive)
				cancel()
				if err != nil {
					errs.add(fmt.Errorf("creating a live job: %w", err))
					continue
				}
				mu.Lock()
				ok++
				mu.Unlock()
			}
		})
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		next <- struct{}{}
	}
	close(next)
	created.Wait()
	return ok
}

// pooledP99 is the p99 of the samples of every slot of the runs.
func pooledP99(runs ...latResult) num {
	var xs []float64
	for _, r := range runs {
		for _, s := range r.slots {
			xs = append(xs, s...)
		}
	}
	return num(percentile(xs, 99))
}

// jobsRound measures the chat latency on the arms (plain Caddy and the gateway's, taking
// turns in slots) with no live job, then creates the live jobs, lets their polls settle
// into their pace, measures again at the same rate, has the fake complete the jobs, waits
// for the gateway to end them all, and measures a third time without them.
func (b *bench) jobsRound(ctx context.Context, arms []*arm) map[string]jobsResult {
	cfg := b.cfg
	var gw *arm
	for _, a := range arms {
		if a.kind == kindGateway {
			gw = a
		}
	}
	body := func(a *arm) []byte { return a.body(false, directive{n: cfg.AnswerPieces, latency: cfg.Latency}) }
	var errs errorLog
	note := ""
	if n, _, err := b.awaitNoLiveJobs(ctx, 2*time.Minute); err != nil || n > 0 {
		note += fmt.Sprintf("; %d jobs of an earlier round still live (%v)", n, err)
	}
	b.quiesce(ctx)
	before := interleaved(ctx, arms, cfg.JobsRate, cfg.Warmup, cfg.Slot, cfg.JobsDuration, body)

	t0 := time.Now()
	created := createLiveJobs(ctx, gw, b.gatewayURL, cfg.Jobs, cfg.JobsCreateConc, cfg.JobsPollAfter, &errs)
	createSecs := time.Since(t0).Seconds()
	// Every job has had its first polls and asked for the next: the polls run at their pace.
	sleepCtx(ctx, max(2*cfg.JobsPollAfter, time.Second))
	s0, err0 := b.fakeVideoStats(ctx)
	p0 := time.Now()
	live := interleaved(ctx, arms, cfg.JobsRate, cfg.Warmup, cfg.Slot, cfg.JobsDuration, body)
	s1, err1 := b.fakeVideoStats(ctx)
	pollSecs := time.Since(p0).Seconds()
	liveAtEnd, errLive := b.liveJobs()

	endSecs := math.NaN()
	if err := postControl(ctx, b.upstreamURL, "/bench/videos/end"); err != nil {
		errs.add(fmt.Errorf("ending the live jobs: %w", err))
	} else {
		left, waited, err := b.awaitNoLiveJobs(ctx, 3*time.Minute)
		switch {
		case err != nil:
			errs.add(fmt.Errorf("counting the live jobs: %w", err))
		case left > 0:
			errs.add(fmt.Errorf("%d jobs still live %.0f s after the upstream completed them", left, waited.Seconds()))
		default:
			endSecs = waited.Seconds()
		}
	}
	b.quiesce(ctx)
	after := interleaved(ctx, arms, cfg.JobsRate, cfg.Warmup, cfg.Slot, cfg.JobsDuration, body)

	out := make(map[string]jobsResult, len(arms))
	for _, a := range arms {
		r := jobsResult{IdleBefore: before[a.name], Live: live[a.name], IdleAfter: after[a.name], CreateSeconds: nan, PollsPerSecond: nan, WantPollsPerS: nan, EndSeconds: nan}
		r.IdleP99Us = pooledP99(r.IdleBefore, r.IdleAfter)
		r.LiveOverIdleP99 = num(ratio(float64(r.Live.P99Us), float64(r.IdleP99Us)))
		if a == gw {
			r.Jobs, r.CreateSeconds, r.EndSeconds = int(created), num(createSecs), num(endSecs)
			r.WantPollsPerS = num(float64(created) / cfg.JobsPollAfter.Seconds())
			if err0 == nil && err1 == nil {
				r.PollsPerSecond = num(float64(s1.LivePolls-s0.LivePolls) / pollSecs)
			} else {
				note += fmt.Sprintf("; the fake's counters could not be read (%v, %v)", err0, err1)
			}
			if errLive == nil {
				r.LiveAtEnd = liveAtEnd
			}
			r.Errors, r.FirstError, r.Note = errs.n.Load(), errs.first, strings.TrimPrefix(note, "; ")
		}
		out[a.name] = r
	}
	return out
}

// jobsFigureDefs are the figures of the jobs tests.
func (rep *report) jobsFigureDefs() []figureDef {
	c := rep.Config
	video := func(f func(*videoResult) num) func(roundResult) float64 {
		return testValue(func(r roundResult) *videoResult { return r.Video }, f)
	}
	jobs := func(f func(*jobsResult) num) func(roundResult) float64 {
		return testValue(func(r roundResult) *jobsResult { return r.Jobs }, f)
	}
	return []figureDef{
		{key: "video_content_throughput", test: "video-content", arm: videoContentArm, unit: "MB/s", compare: byRatio,
			title: fmt.Sprintf("Video content download, whole: GET /v1/videos/{id}/content of %.0f MB, %d downloads per arm and round one after another, the arms taking turns (median MB/s, send to last byte, every byte checked)",
				float64(c.VideoBytes)/1e6, c.VideoDownloads),
			value: video(func(v *videoResult) num { return v.MBps }), target: gatewayLimit(atLeast, 0.9)},
		{key: "video_range_throughput", test: "video-content", arm: videoContentArm, unit: "MB/s", compare: byRatio,
			title: fmt.Sprintf("Video content download by Range %s (206), as above", c.VideoRange),
			value: video(func(v *videoResult) num { return v.RangeMBps }), target: gatewayLimit(atLeast, 0.9)},
		{key: "video_heap_growth", test: "video-content", arm: videoContentArm, unit: "MB", compare: byAdded, proxiesOnly: true, absolute: true,
			title: "Video content download, peak Go heap growth of the proxy over its idle heap (heap objects after a collection, then the most its 1 ms sampler saw during the round's downloads; MB = MiB)",
			value: video(func(v *videoResult) num { return v.HeapGrowthMB }), target: gatewayLimit(atMost, 2)},
		{key: "video_cpu_per_gb", test: "video-content", arm: videoContentArm, unit: "s", compare: byRatio, proxiesOnly: true,
			title: "Video content download, CPU time of the proxy per GB of content (/proc utime+stime)",
			value: video(func(v *videoResult) num { return v.CPUPerGBs })},
		{key: "video_alloc_per_gb", test: "video-content", arm: videoContentArm, unit: "MB", compare: byRatio, proxiesOnly: true,
			title: "Video content download, heap allocated by the proxy per GB of content (Go runtime's TotalAlloc; MB = MiB)",
			value: video(func(v *videoResult) num { return v.AllocPerGBMB })},
		{key: "jobs_chat_p99_idle", test: "jobs-load", arm: jobsChatArm, unit: "µs", compare: byAdded,
			title: fmt.Sprintf("Chat latency p99 with no live job: chat completions at %d rps, open loop, %s measured before the jobs and %s after them in a round (this p99 is of both), the arms taking turns in %s slots", c.JobsRate, c.JobsDuration, c.JobsDuration, c.Slot),
			value: jobs(func(j *jobsResult) num { return j.IdleP99Us })},
		{key: "jobs_chat_p99_live", test: "jobs-load", arm: jobsChatArm, unit: "µs", compare: byAdded,
			title: fmt.Sprintf("Chat latency p99 with %d live video jobs on the gateway, each polled every %s as its upstream asks (same rate, same run, between the two spells without)", c.Jobs, c.JobsPollAfter),
			value: jobs(func(j *jobsResult) num { return j.Live.P99Us })},
		{key: "jobs_chat_p99_live_over_idle", test: "jobs-load", arm: jobsChatArm, unit: "x", compare: byRatio, absolute: true,
			title: "Chat latency p99 with the jobs live over p99 with none, each arm its own (plain Caddy's, which has no job, is the machine's drift between the spells)",
			value: jobs(func(j *jobsResult) num { return j.LiveOverIdleP99 }), target: gatewayLimit(atMost, 1.2)},
		{key: "jobs_chat_p50_live", test: "jobs-load", arm: jobsChatArm, unit: "µs", compare: byAdded,
			title: "Chat latency p50 with the jobs live",
			value: jobs(func(j *jobsResult) num { return j.Live.P50Us })},
		{key: "jobs_polls_per_second", test: "jobs-load", arm: jobsChatArm, unit: "polls/s", compare: byRatio, proxiesOnly: true, absolute: true,
			title: fmt.Sprintf("Polls of the live jobs the fake upstream received per second while the chat was measured with them (%d jobs asking for one every %s: %.0f/s asked; the engine runs at most DefaultGroupCap, 4, polls of one provider at once)", c.Jobs, c.JobsPollAfter, float64(c.Jobs)/c.JobsPollAfter.Seconds()),
			value: jobs(func(j *jobsResult) num { return j.PollsPerSecond })},
		{key: "jobs_create_seconds", test: "jobs-load", arm: jobsChatArm, unit: "s", compare: byRatio, proxiesOnly: true, absolute: true,
			title: fmt.Sprintf("Seconds to create the %d live jobs through POST /v1/videos, %d at a time", c.Jobs, c.JobsCreateConc),
			value: jobs(func(j *jobsResult) num { return j.CreateSeconds })},
		{key: "jobs_end_seconds", test: "jobs-load", arm: jobsChatArm, unit: "s", compare: byRatio, proxiesOnly: true, absolute: true,
			title: "Seconds the gateway took to end every live job once the fake completed them (each is polled, settled and ended)",
			value: jobs(func(j *jobsResult) num { return j.EndSeconds })},
	}
}
