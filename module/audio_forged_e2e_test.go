package module

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/modelgateway/caddy-modelgateway/internal/audiogen"
)

// newTranscriber is an OpenAI-wire transcription upstream that reports no usage: it answers
// text, or, for a model named "says-<value>", JSON whose duration is <value> written as is
// (NaN included, as Python's json module writes it), or, for "reports-<seconds>", JSON
// whose usage reports that many seconds. It counts the calls it answers.
func newTranscriber(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if err := r.ParseMultipartForm(1 << 20); err != nil {
			http.Error(w, `{"error":{"message":"not multipart","type":"invalid_request_error"}}`, 400)
			return
		}
		defer func() { _ = r.MultipartForm.RemoveAll() }()
		model := r.FormValue("model")
		if v, ok := strings.CutPrefix(model, "says-"); ok {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"text":"Hello there.","duration":%s}`, v)
			return
		}
		if v, ok := strings.CutPrefix(model, "reports-"); ok {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"text":"Hello there.","usage":{"type":"duration","seconds":%s}}`, v)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, "Hello there.\n")
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

// startedSeconds is how many seconds a per-second route bills for d: every second begun.
func startedSeconds(d time.Duration) int64 { return int64(math.Ceil(d.Seconds())) }

// Audio whose headers claim 1 s but which plays for a minute, in each container the
// gateway measures, is billed the minute (the upstream reports no length: a text answer),
// or refused before the upstream is called.
func TestForgedAudioIsBilledWhatItPlays(t *testing.T) {
	up, calls := newTranscriber(t)
	env := startGateway(t, providerBlock("oa", up.URL)+
		embeddingModel("whisper", embeddingRoute("oa", "whisper-1", "input_audio_seconds 0.0001")), "")
	wsID, key := env.workspace(5 * usd)
	oc := env.openai(key)
	for _, f := range audiogen.Forged(60) {
		t.Run(f.Name, func(t *testing.T) {
			before, n := env.balance(wsID).BalanceNanos, calls.Load()
			var resp *http.Response
			var text string
			_, err := oc.Audio.Transcriptions.New(context.Background(), openai.AudioTranscriptionNewParams{
				Model: "whisper", ResponseFormat: openai.AudioResponseFormatText, File: openai.File(bytes.NewReader(f.Data), "upload.bin", "application/octet-stream"),
			}, option.WithResponseInto(&resp), option.WithResponseBodyInto(&text))
			if f.Refusable {
				var apiErr *openai.Error
				if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "file" || !strings.Contains(apiErr.Message, "cannot be billed by its length") {
					t.Fatalf("got %v, want a 400 refusing the file", err)
				}
				if calls.Load() != n || env.balance(wsID).BalanceNanos != before {
					t.Fatal("a refused file reached the upstream or was charged")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			secs := startedSeconds(f.Length)
			env.chargedLines(t, wsID, resp.Header.Get("X-Generation-Id"), before, secs*100_000, fmt.Sprintf("input_audio_seconds:%d", secs))
		})
	}
}

// A duration the upstream reports that no audio plays for (none, negative, not a number,
// or three years for a file of seconds) is not billed: the gateway's own reading is.
func TestImplausibleUpstreamDurationsBillTheGatewaysReading(t *testing.T) {
	up, _ := newTranscriber(t)
	clip := wavFile(3200 * time.Millisecond)
	says := []string{"0", "-5", "NaN", "1e8", "0.0"}
	var models string
	for _, v := range says {
		models += embeddingModel("says"+v, embeddingRoute("oa", "says-"+v, "input_audio_seconds 0.0001"))
	}
	env := startGateway(t, providerBlock("oa", up.URL)+models, "")
	wsID, key := env.workspace(5 * usd)
	oc := env.openai(key)
	for _, v := range says {
		t.Run(v, func(t *testing.T) {
			before := env.balance(wsID).BalanceNanos
			var resp *http.Response
			res, err := oc.Audio.Transcriptions.New(context.Background(), openai.AudioTranscriptionNewParams{
				Model: "says" + v, File: openai.File(bytes.NewReader(clip), "meeting.wav", "audio/wav"),
			}, option.WithResponseInto(&resp))
			if err != nil {
				t.Fatal(err)
			}
			if res.Text != "Hello there." || res.Usage.Type != "duration" || res.Usage.Seconds != 4 {
				t.Fatalf("answer %+v, want the 4 seconds begun billed", res)
			}
			env.chargedLines(t, wsID, resp.Header.Get("X-Generation-Id"), before, 4*100_000, "input_audio_seconds:4")
		})
	}
}

// Two hundred uploads at once of an MP3 whose Xing header counts one frame, on a wallet that
// pays for four of them, with an upstream that reports their true length: each request holds
// what the file plays, so the wallet admits no more than it can pay for and nothing goes
// unbilled.
func TestConcurrentForgedUploadsStayWithinTheWallet(t *testing.T) {
	const concurrent = 200
	file := audiogen.MP3(10*44100/1152, 1) // 9.98 s after a Xing frame counting 1
	secs := startedSeconds(file.Length)
	price := 100 * usd / 1000 // 0.1 USD a second
	up, _ := newTranscriber(t)
	env := startGateway(t, providerBlock("oa", up.URL)+
		embeddingModel("whisper", embeddingRoute("oa", fmt.Sprintf("reports-%d", secs), "input_audio_seconds 0.1")), "")
	const balance = 5 * usd
	wsID, key := env.workspace(balance)
	oc := env.openai(key)

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		admitted []string
		refused  int
		failures []error
	)
	for range concurrent {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var resp *http.Response
			_, err := oc.Audio.Transcriptions.New(context.Background(), openai.AudioTranscriptionNewParams{
				Model: "whisper", File: openai.File(bytes.NewReader(file.Data), "forged.mp3", "audio/mpeg"),
			}, option.WithResponseInto(&resp))
			mu.Lock()
			defer mu.Unlock()
			var apiErr *openai.Error
			switch {
			case err == nil:
				admitted = append(admitted, resp.Header.Get("X-Generation-Id"))
			case errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusPaymentRequired:
				refused++
			default:
				failures = append(failures, err)
			}
		}()
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d requests failed otherwise than for funds, first: %v", len(failures), failures[0])
	}
	cost := secs * price
	if len(admitted) == 0 || int64(len(admitted))*cost > balance || len(admitted)+refused != concurrent {
		t.Fatalf("%d admitted at %d nanos each, %d refused, on a wallet of %d", len(admitted), cost, refused, balance)
	}
	for _, id := range admitted {
		if gen := env.generation(wsID, id); gen.CostNanos != cost || gen.UnbilledNanos != 0 {
			t.Fatalf("generation %s charged %d, %d unbilled; want %d and none", id, gen.CostNanos, gen.UnbilledNanos, cost)
		}
	}
	if got := env.balance(wsID).BalanceNanos; got != balance-int64(len(admitted))*cost {
		t.Fatalf("balance %d after %d charges of %d", got, len(admitted), cost)
	}
}
