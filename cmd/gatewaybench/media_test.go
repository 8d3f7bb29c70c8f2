package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"image/png"
	"io"
	"math"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestWAVUpload: the transcription upload is a multipart body of the length asked (one byte
// less for an odd count of sample bytes), the model first, then a canonical WAV file whose
// header says how many bytes of samples follow; two readers read the same bytes.
func TestWAVUpload(t *testing.T) {
	for _, total := range []int64{1 << 20, 1<<20 + 1, 25 << 20} {
		u, err := newWAVUpload("bench-whisper", total)
		if err != nil {
			t.Fatal(err)
		}
		if n := u.Len(); n != total && n != total-1 {
			t.Fatalf("%d bytes asked, the body has %d", total, n)
		}
		data, err := io.ReadAll(u.open())
		if err != nil || int64(len(data)) != u.Len() {
			t.Fatalf("read %d bytes of %d: %v", len(data), u.Len(), err)
		}
		again, _ := io.ReadAll(u.open())
		if !bytes.Equal(data, again) {
			t.Fatal("two readers of the upload read different bytes")
		}
		_, params, err := mime.ParseMediaType(u.contentType)
		if err != nil {
			t.Fatal(err)
		}
		mr := multipart.NewReader(bytes.NewReader(data), params["boundary"])
		var names []string
		for {
			p, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, p.FormName())
			if p.FormName() != "file" {
				_, _ = io.Copy(io.Discard, p)
				continue
			}
			if ct := p.Header.Get("Content-Type"); ct != "audio/wav" {
				t.Errorf("file part of type %q", ct)
			}
			file, _ := io.ReadAll(p)
			if string(file[:4]) != "RIFF" || int64(binary.LittleEndian.Uint32(file[4:])) != int64(len(file))-8 ||
				int64(binary.LittleEndian.Uint32(file[40:])) != int64(len(file))-wavHeaderLen {
				t.Fatalf("WAV header % x for a file of %d bytes", file[:wavHeaderLen], len(file))
			}
			secs, err := wavSeconds(bytes.NewReader(file))
			if err != nil || math.Abs(secs-u.Seconds()) > 1e-9 {
				t.Fatalf("the fake reads %v s (%v), the upload holds %v s", secs, err, u.Seconds())
			}
		}
		if strings.Join(names, ",") != "model,response_format,file" {
			t.Fatalf("parts %v", names)
		}
	}
	if _, err := newWAVUpload("m", 100); err == nil {
		t.Fatal("an upload with no room for audio")
	}
}

// TestFakeMedia: each media endpoint of the fake answers what the arms check, through the
// load generator's own requests.
func TestFakeMedia(t *testing.T) {
	srv := httptest.NewServer(newUpstreamServer(&fakeUpstream{holds: map[string]chan struct{}{}}).Handler)
	defer srv.Close()
	ctx := context.Background()
	newArm := func(path string) *arm {
		return &arm{name: "direct", url: srv.URL + path, model: "m", key: "k", client: newClient()}
	}

	t.Run("speech", func(t *testing.T) {
		a := newArm("/v1/audio/speech")
		d := directive{n: 4, interval: 20 * time.Millisecond}
		ttfb, last, err := a.speak(ctx, speechBody(a, d), 4*speechPiece)
		if err != nil {
			t.Fatal(err)
		}
		// The first piece comes at once, the last three gaps later.
		if ttfb > last-50*time.Millisecond || last < 60*time.Millisecond {
			t.Fatalf("first byte after %v, last after %v, for gaps of %v", ttfb, last, d.interval)
		}
		if _, _, err := a.speak(ctx, speechBody(a, d), 5*speechPiece); err == nil {
			t.Fatal("audio of the wrong length passed")
		}
		if a.ok200.Load() != 2 {
			t.Fatalf("%d answers counted, want 2", a.ok200.Load())
		}
	})

	t.Run("transcription", func(t *testing.T) {
		u, err := newWAVUpload("m", 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		a := newArm("/v1/audio/transcriptions")
		if err := a.upload(ctx, u); err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPost, a.url, u.open())
		req.Header.Set("Content-Type", u.contentType)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var ans struct {
			Text  string `json:"text"`
			Usage struct {
				Type    string  `json:"type"`
				Seconds float64 `json:"seconds"`
			} `json:"usage"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
			t.Fatal(err)
		}
		if ans.Usage.Type != "duration" || ans.Usage.Seconds != math.Ceil(u.Seconds()) || ans.Text == "" {
			t.Fatalf("answer %+v for %v s of audio", ans, u.Seconds())
		}
	})

	t.Run("image edit", func(t *testing.T) {
		const size = 40_000
		body, ct, err := imageEditBody("m", size)
		if err != nil {
			t.Fatal(err)
		}
		_, params, _ := mime.ParseMediaType(ct)
		mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
		var names []string
		for {
			p, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, p.FormName())
			if p.FormName() != "image[]" {
				continue
			}
			data, _ := io.ReadAll(p)
			if _, err := png.Decode(bytes.NewReader(data)); err != nil {
				t.Fatalf("image of %d bytes: %v", len(data), err)
			}
			if len(data) < size*9/10 || len(data) > size*11/10 {
				t.Fatalf("image of %d bytes, want about %d", len(data), size)
			}
		}
		if strings.Join(names, ",") != "model,prompt,image[],image[]" {
			t.Fatalf("parts %v", names)
		}
		a := newArm("/v1/images/edits")
		a.contentType = ct
		if err := a.do(ctx, body); err != nil {
			t.Fatal(err)
		}
		var ans struct {
			Data  []struct{ B64JSON string } `json:"data"`
			Usage struct {
				InputTokens        int `json:"input_tokens"`
				InputTokensDetails struct {
					ImageTokens int `json:"image_tokens"`
				} `json:"input_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(imageEditAnswer(2), &ans); err != nil || len(ans.Data) != 1 || ans.Usage.InputTokensDetails.ImageTokens != 2*194 {
			t.Fatalf("answer %+v: %v", ans, err)
		}
	})

	// The fake refuses an upload that did not arrive whole, so that a proxy that cuts or
	// drops files counts errors instead of throughput.
	t.Run("cut uploads are refused", func(t *testing.T) {
		post := func(path, ct string, body []byte) int {
			resp, err := http.Post(srv.URL+path, ct, bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			return resp.StatusCode
		}
		multi := func(parts ...[3]string) ([]byte, string) {
			var buf bytes.Buffer
			mw := multipart.NewWriter(&buf)
			for _, p := range parts {
				w, _ := mw.CreateFormFile(p[0], p[1])
				_, _ = w.Write([]byte(p[2]))
			}
			_ = mw.Close()
			return buf.Bytes(), mw.FormDataContentType()
		}
		body, bct, err := imageEditBody("m", 20_000)
		if err != nil {
			t.Fatal(err)
		}
		_, params, _ := mime.ParseMediaType(bct)
		var pics []string
		mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
		for p, err := mr.NextPart(); err == nil; p, err = mr.NextPart() {
			if data, _ := io.ReadAll(p); p.FileName() != "" {
				pics = append(pics, string(data))
			}
		}
		whole, wct := multi([3]string{"image[]", "a.png", pics[0]}, [3]string{"image[]", "b.png", pics[1]})
		cut, cct := multi([3]string{"image[]", "a.png", pics[0]}, [3]string{"image[]", "b.png", pics[1][:len(pics[1])-5]})
		one, oct := multi([3]string{"image[]", "a.png", pics[0]})
		if got := post("/v1/images/edits", wct, whole); got != http.StatusOK {
			t.Fatalf("two whole images: %d", got)
		}
		if got := post("/v1/images/edits", cct, cut); got != http.StatusBadRequest {
			t.Errorf("an image cut short: %d, want 400", got)
		}
		if got := post("/v1/images/edits", oct, one); got != http.StatusBadRequest {
			t.Errorf("one image of two: %d, want 400", got)
		}
		u, err := newWAVUpload("m", 64<<10)
		if err != nil {
			t.Fatal(err)
		}
		wav, _ := io.ReadAll(u.open())
		_, params, _ = mime.ParseMediaType(u.contentType)
		mr = multipart.NewReader(bytes.NewReader(wav), params["boundary"])
		var audio string
		for p, err := mr.NextPart(); err == nil; p, err = mr.NextPart() {
			if data, _ := io.ReadAll(p); p.FormName() == "file" {
				audio = string(data)
			}
		}
		short, sct := multi([3]string{"file", "a.wav", audio[:len(audio)-100]})
		if got := post("/v1/audio/transcriptions", sct, short); got != http.StatusBadRequest {
			t.Errorf("audio cut short: %d, want 400", got)
		}
	})
}

// TestRunsMedia: "all" leaves the media tests out, "media" names them, and each can be
// named alone.
func TestRunsMedia(t *testing.T) {
	for _, tc := range []struct {
		tests     string
		runs, not []string
	}{
		{"all", []string{"saturation", "capacity"}, append(slices.Clone(mediaTests), jobsTests...)},
		{"media", mediaTests, append([]string{"latency", "memory"}, jobsTests...)},
		{"jobs", jobsTests, append([]string{"latency", "memory"}, mediaTests...)},
		{"video-content", []string{"video-content"}, []string{"jobs-load", "saturation"}},
		{"latency,speech-ttfb", []string{"latency", "speech-ttfb"}, []string{"image-edit", "streams"}},
	} {
		t.Run(tc.tests, func(t *testing.T) {
			c := config{Tests: tc.tests}
			for _, x := range tc.runs {
				if !c.runs(x) {
					t.Errorf("%s not run", x)
				}
			}
			for _, x := range tc.not {
				if c.runs(x) {
					t.Errorf("%s run", x)
				}
			}
		})
	}
}

// TestProcPeakRSS: the peak resident set is read, and it is at least the resident set.
func TestProcPeakRSS(t *testing.T) {
	pid := os.Getpid()
	rss, err := procRSS(pid) // first: the resident set may grow between the reads
	if err != nil {
		t.Fatal(err)
	}
	hwm, err := procPeakRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	if hwm < rss {
		t.Fatalf("peak RSS %d below RSS %d", hwm, rss)
	}
}

// TestBuildMediaFigures: the media figures have rows for direct, caddy and their own arm
// only; the heap target is judged on the arm's own value; the speech figures compare the
// gateway with direct too.
func TestBuildMediaFigures(t *testing.T) {
	up := func(growth float64) roundResult {
		return roundResult{Transcription: &uploadResult{heapFigures: heapFigures{HeapGrowthMB: num(growth), RSSGrowthMB: 1}, AllocPerUploadMB: 1, SecondsPerUpload: 1}}
	}
	sp := func(p99 float64) *speechResult {
		return &speechResult{TTFBP50Us: 100, TTFBP99Us: num(p99), LastByteP50Us: 1000}
	}
	rep := &report{Config: config{Tests: "speech-ttfb,transcription-heap", Rounds: 3},
		Arms: []string{"direct", "caddy", "gw-chat-passthrough", speechArm, transcriptionArm},
		Rounds: map[string][]roundResult{
			"direct":         {{Speech: sp(1000)}, {Speech: sp(1100)}, {Speech: sp(900)}},
			"caddy":          {{Speech: sp(2000), Transcription: up(0.2).Transcription}, {Speech: sp(2000), Transcription: up(0.3).Transcription}, {Speech: sp(2000), Transcription: up(0.2).Transcription}},
			speechArm:        {{Speech: sp(2500)}, {Speech: sp(3500)}, {Speech: sp(2600)}},
			transcriptionArm: {up(1.5), up(2.5), up(2.4)},
		}}
	rep.build()
	got := map[string]string{}
	for _, tl := range rep.Targets {
		got[tl.Target+" "+tl.Arm] = tl.Verdict + " " + tl.Value
	}
	for k, want := range map[string]string{
		"speech_ttfb_p99 <= +1000 µs gw-speech":                 "pass +600 µs",
		"transcription_heap_growth <= 2.00 MB gw-transcription": "FAIL 2.40 MB (per round 1.50 2.50 2.40)",
	} {
		if got[k] != want {
			t.Errorf("%s: %q, want %q (all: %v)", k, got[k], want, got)
		}
	}
	for _, fig := range rep.Figures {
		var arms []string
		for _, r := range fig.Rows {
			arms = append(arms, r.Arm)
			if fig.Key == "speech_ttfb_p99" && r.Arm == speechArm && (r.VsDirect == nil || *r.VsDirect != 1700) {
				t.Errorf("speech p99 minus direct's: %v, want 1700", r.VsDirect)
			}
		}
		want := "direct,caddy," + speechArm
		if strings.HasPrefix(fig.Key, "transcription") {
			want = "caddy," + transcriptionArm
		}
		if strings.Join(arms, ",") != want {
			t.Errorf("%s: rows %v, want %s", fig.Key, arms, want)
		}
	}
	var out bytes.Buffer
	rep.print(&out)
	if !strings.Contains(out.String(), "minus direct's (the fake itself): +1700 µs, per round +1500 µs +2400 µs +1700 µs") {
		t.Errorf("no comparison with direct in the report:\n%s", out.String())
	}
}
