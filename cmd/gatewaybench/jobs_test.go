package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestPatternContent: the content reads and seeks as the pattern, the checker takes the
// pattern from any offset and names the first byte that differs.
func TestPatternContent(t *testing.T) {
	const size = 300_000
	whole, err := io.ReadAll(&patternContent{size: size})
	if err != nil || len(whole) != size {
		t.Fatalf("read %d bytes (%v)", len(whole), err)
	}
	c := &patternContent{size: size}
	if _, err := c.Seek(123_457, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	tail, _ := io.ReadAll(c)
	if !bytes.Equal(tail, whole[123_457:]) {
		t.Fatal("a sought read differs from the whole content")
	}
	if _, err := (&patternChecker{off: 70_000}).Write(whole[70_000:200_000]); err != nil {
		t.Fatal(err)
	}
	// A range off by one byte: the pattern never repeats at a shift shorter than its length.
	n, err := (&patternChecker{off: 70_000}).Write(whole[70_001:200_001])
	if err == nil {
		t.Fatal("content shifted by one byte passed the check")
	}
	if want := fmt.Sprintf("byte %d ", 70_000+n); !strings.Contains(err.Error(), want) {
		t.Fatalf("%v, want it to name %s", err, want)
	}
}

// TestFakeVideos: the fake creates jobs from JSON and multipart bodies (as the gateway's
// openai adapter sends them), a done job completes at its first poll and serves its content
// whole and by Range, a live one stays in_progress with openai-poll-after-ms until the jobs
// are ended, and the counters count.
func TestFakeVideos(t *testing.T) {
	u := &fakeUpstream{holds: map[string]chan struct{}{}}
	srv := httptest.NewServer(newUpstreamServer(u).Handler)
	defer srv.Close()
	ctx := context.Background()
	client := srv.Client()

	const size = 5_000_000
	done, err := createVideoJob(ctx, client, srv.URL, "k", fmt.Sprintf("[bench video=done b=%d]", size))
	if err != nil {
		t.Fatal(err)
	}
	if err := awaitVideo(ctx, client, srv.URL, "k", done); err != nil {
		t.Fatal(err)
	}
	a := &arm{name: "direct", url: srv.URL + videoContentPath(done), client: client, key: "k"}
	if n, _, err := a.download(ctx, "", 0, size); err != nil || n != size {
		t.Fatalf("whole download: %d bytes, %v", n, err)
	}
	if n, _, err := a.download(ctx, "bytes=1000000-2999999", 1_000_000, 2_000_000); err != nil || n != 2_000_000 {
		t.Fatalf("ranged download: %d bytes, %v", n, err)
	}
	// The checks fail: a range that is not the one asked, a length that is not the one
	// expected, a range past the end.
	if _, _, err := a.download(ctx, "bytes=1000000-2999999", 1_000_001, 2_000_000); err == nil {
		t.Fatal("a download of other bytes than expected passed")
	}
	if _, _, err := a.download(ctx, "", 0, size+1); err == nil {
		t.Fatal("a download shorter than expected passed")
	}
	if _, _, err := a.download(ctx, "bytes=6000000-6000001", 6_000_000, 2); err == nil || !strings.Contains(err.Error(), "status 416") {
		t.Fatalf("a range past the end: %v, want status 416", err)
	}

	// A multipart create, as the gateway sends it.
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	_ = mw.WriteField("model", "up-video")
	_ = mw.WriteField("prompt", "pan [bench video=live p=1000]")
	_ = mw.WriteField("seconds", "4")
	_ = mw.Close()
	resp, err := client.Post(srv.URL+"/v1/videos", mw.FormDataContentType(), &form)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	live, ok := parseVideoID(strings.Split(strings.Split(string(body), `"id":"`)[1], `"`)[0])
	if resp.StatusCode != 200 || !ok || live.mode != videoLive || live.param != 1000 {
		t.Fatalf("multipart create: %d %s", resp.StatusCode, body)
	}
	poll := func() (string, string) {
		resp, err := client.Get(srv.URL + "/v1/videos/" + live.id)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v videoObjectOf
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, &v); err != nil || !strings.Contains(string(b), `"seconds":"4","size":"1280x720"`) {
			t.Fatalf("poll: %v %s", err, b)
		}
		return v.Status, resp.Header.Get("Openai-Poll-After-Ms")
	}
	if st, after := poll(); st != "in_progress" || after != "1000" {
		t.Fatalf("live job: %s, poll after %q", st, after)
	}
	if err := postControl(ctx, srv.URL, "/bench/videos/end"); err != nil {
		t.Fatal(err)
	}
	if st, after := poll(); st != "completed" || after != "" {
		t.Fatalf("ended job: %s, poll after %q", st, after)
	}
	b := &bench{upstreamURL: srv.URL}
	s, err := b.fakeVideoStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Creates != 2 || s.LivePolls != 1 || s.Polls < 3 || s.ContentBytes < size+2_000_000 {
		t.Fatalf("stats %+v", s)
	}
	for _, bad := range []string{"/v1/videos/video_other_1", "/v1/videos/" + live.id + "/content"} {
		resp, err := client.Get(srv.URL + bad)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", bad, resp.StatusCode)
		}
	}
	resp, err = client.Post(srv.URL+"/v1/videos", "application/json", strings.NewReader(`{"prompt":"no directive"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a create without a directive: %d, want 400", resp.StatusCode)
	}
}

// TestVideoRange: -video-range is read, and one outside the content refused.
func TestVideoRange(t *testing.T) {
	c := config{VideoBytes: 200_000_000, VideoRange: "bytes=50000000-149999999"}
	if s, n, err := c.videoRange(); err != nil || s != 50_000_000 || n != 100_000_000 {
		t.Fatalf("%d %d %v", s, n, err)
	}
	for _, bad := range []string{"bytes=5-4", "bytes=0-200000000", "50-60", "bytes=-5", "bytes=5-"} {
		c.VideoRange = bad
		if _, _, err := c.videoRange(); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestBuildJobsFigures: the video throughput is judged against Caddy's, the heap growth and
// the chat p99 ratio on the gateway's own values; plain Caddy's p99 ratio is shown beside as
// the control; the gateway-only figures have no Caddy row.
func TestBuildJobsFigures(t *testing.T) {
	vid := func(mbps, rng, heap float64) roundResult {
		return roundResult{Video: &videoResult{MBps: num(mbps), RangeMBps: num(rng), CPUPerGBs: 1, AllocPerGBMB: 1, heapFigures: heapFigures{HeapGrowthMB: num(heap)}}}
	}
	jl := func(idle, live float64, polls float64) roundResult {
		return roundResult{Jobs: &jobsResult{IdleP99Us: num(idle), Live: latResult{P99Us: num(live)}, LiveOverIdleP99: num(live / idle),
			PollsPerSecond: num(polls), CreateSeconds: num(polls), EndSeconds: num(polls)}}
	}
	merge := func(a, b roundResult) roundResult { a.Jobs = b.Jobs; return a }
	nan3 := nan
	rep := &report{Config: config{Tests: "jobs", Rounds: 3, VideoBytes: 200_000_000, VideoRange: "bytes=0-1", Jobs: 1000, JobsPollAfter: time.Second},
		Arms: []string{"direct", "caddy", videoContentArm, jobsChatArm},
		Rounds: map[string][]roundResult{
			"direct":        {vid(3000, 3000, float64(nan3)), vid(3000, 3000, float64(nan3)), vid(3000, 3000, float64(nan3))},
			"caddy":         {merge(vid(1000, 1000, 0.1), jl(1000, 1100, float64(nan3))), merge(vid(1000, 1000, 0.1), jl(1000, 1000, float64(nan3))), merge(vid(1000, 1000, 0.1), jl(1000, 1000, float64(nan3)))},
			videoContentArm: {vid(950, 850, 1), vid(920, 800, 3), vid(800, 880, 1.5)},
			jobsChatArm:     {jl(1000, 1100, 990), jl(1000, 1300, 980), jl(1000, 1150, 1000)},
		}}
	rep.build()
	got := targetVerdicts(rep)
	for k, want := range map[string]string{
		"video_content_throughput >= 0.90x " + videoContentArm:  "pass 0.92x",
		"video_range_throughput >= 0.90x " + videoContentArm:    "FAIL 0.85x",
		"video_heap_growth <= 2.00 MB " + videoContentArm:       "pass 1.50 MB (per round 1.00 3.00 1.50)",
		"jobs_chat_p99_live_over_idle <= 1.20 x " + jobsChatArm: "pass 1.15 x (per round 1.10 1.30 1.15)",
	} {
		if got[k] != want {
			t.Errorf("%s: %q, want %q (all: %v)", k, got[k], want, got)
		}
	}
	rows := figureArms(rep)
	for key, want := range map[string]string{
		"video_content_throughput":     "direct,caddy," + videoContentArm,
		"video_heap_growth":            "caddy," + videoContentArm,
		"jobs_chat_p99_live_over_idle": "caddy," + jobsChatArm,
		"jobs_polls_per_second":        jobsChatArm,
	} {
		if rows[key] != want {
			t.Errorf("%s: rows %s, want %s", key, rows[key], want)
		}
	}
	var out bytes.Buffer
	rep.print(&out)
	if !strings.Contains(out.String(), "Chat latency p99 with 1000 live video jobs") {
		t.Errorf("no jobs figure in the report:\n%s", out.String())
	}
}

// TestPooledP99: the idle baseline is the p99 of both spells' samples together.
func TestPooledP99(t *testing.T) {
	var before, after []float64
	for i := 1; i <= 100; i++ {
		before = append(before, float64(i))
		after = append(after, float64(1000+i))
	}
	got := pooledP99(latResult{slots: [][]float64{before[:50], before[50:]}}, latResult{slots: [][]float64{after}})
	if got != 1098 {
		t.Fatalf("pooled p99 %v, want 1098 (rank 198 of 200)", got)
	}
}

// targetVerdicts are the report's target lines by target and arm: the verdict and the value.
func targetVerdicts(rep *report) map[string]string {
	got := map[string]string{}
	for _, tl := range rep.Targets {
		got[tl.Target+" "+tl.Arm] = tl.Verdict + " " + tl.Value
	}
	return got
}

// figureArms are the arms of each figure's rows, comma-separated, by the figure's key.
func figureArms(rep *report) map[string]string {
	rows := map[string]string{}
	for _, fig := range rep.Figures {
		var arms []string
		for _, r := range fig.Rows {
			arms = append(arms, r.Arm)
		}
		rows[fig.Key] = strings.Join(arms, ",")
	}
	return rows
}
