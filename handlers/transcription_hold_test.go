package handlers

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/modelgateway/caddy-modelgateway/internal/audiogen"
	"github.com/modelgateway/caddy-modelgateway/providers"
)

// reportingTranscriber is a neutral upstream that reads the whole file and reports that it
// played for duration.
type reportingTranscriber struct{ duration time.Duration }

func (reportingTranscriber) Name() string { return "rep" }
func (p reportingTranscriber) Transcribe(_ context.Context, req *providers.TranscriptionRequest) (*providers.Transcription, error) {
	_, err := io.Copy(io.Discard, req.File)
	return &providers.Transcription{Text: "hello", Duration: p.duration}, err
}

// An upstream that reports more seconds than the request held for (but not absurdly more)
// is charged what was held; the rest is counted as unbilled and logged with the generation.
func TestTranscriptionChargeIsCappedAtItsHold(t *testing.T) {
	file := audiogen.MP3(10*44100/1152, -1) // 9.98 s: 11 seconds begun held, the second added
	rt := Route{ProviderName: "rep", Provider: reportingTranscriber{duration: 15 * time.Second}, UpstreamModel: "w"}
	rt.Price.InputAudioSeconds = 100 * usdNanos / 1000 // 0.1 USD a second
	core, logs := observer.New(zapcore.WarnLevel)
	a := newAdminGateway(t, []*Model{{Name: "whisper", Routes: []Route{rt}}}, func(g *Gateway) { g.Logger = zap.New(core) })
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg, a.g.Registry)
	if err != nil {
		t.Fatal(err)
	}
	a.g.Metrics = m
	ws, std, _ := a.workspace(5 * usdNanos)

	w := httptest.NewRecorder()
	a.g.ServeHTTP(w, postAudio(std, "whisper", file.Data), "/audio/transcriptions")
	if w.Code != http.StatusOK {
		t.Fatalf("%d %s", w.Code, w.Body.String())
	}
	const held, priced = 11 * 100 * usdNanos / 1000, 15 * 100 * usdNanos / 1000
	genID := w.Header().Get("X-Generation-Id")
	gen, err := a.s.GetGeneration(context.Background(), ws, genID)
	if err != nil || gen.CostNanos != held {
		t.Fatalf("generation %+v (%v): want %d charged", gen, err, held)
	}
	if b, _ := a.s.GetBalance(context.Background(), ws); b.BalanceNanos != 5*usdNanos-held {
		t.Fatalf("balance %d, want %d", b.BalanceNanos, 5*usdNanos-held)
	}
	want := `
# HELP model_gateway_unbilled_nanodollars_total Priced usage not charged, in nanodollars (1e-9 USD), by model and provider: beyond what its request held or beyond the wallet's balance. The operator paid the upstream for it.
# TYPE model_gateway_unbilled_nanodollars_total counter
model_gateway_unbilled_nanodollars_total{model="whisper",provider="rep"} 4e+08
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "model_gateway_unbilled_nanodollars_total"); err != nil {
		t.Fatal(err)
	}
	warned := logs.FilterMessageSnippet("held").FilterField(zap.String("generation_id", genID)).FilterField(zap.Int64("unbilled_nanos", priced-held))
	if warned.Len() != 1 {
		t.Fatalf("warnings %v", logs.All())
	}
}

func TestNullNonFinite(t *testing.T) {
	for in, want := range map[string]string{
		`{"text":"NaN and Infinity","duration":NaN}`:      `{"text":"NaN and Infinity","duration":null}`,
		`{"a":[Infinity,-Infinity,1],"b":"\"NaN\\"}`:      `{"a":[null,null,1],"b":"\"NaN\\"}`,
		`{"text":"no literal","duration":3.2}`:            `{"text":"no literal","duration":3.2}`,
		`{"text":"an escaped quote \" then NaN","d":NaN}`: `{"text":"an escaped quote \" then NaN","d":null}`,
	} {
		if got := string(nullNonFinite([]byte(in))); got != want {
			t.Errorf("%s: got %s, want %s", in, got, want)
		}
	}
}
