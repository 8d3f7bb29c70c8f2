package handlers

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/internal/upload"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/mock"
	"github.com/modelgateway/caddy-modelgateway/providers/openai"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// leavingClient is a client that leaves when what it has read says so: the request's
// context ends on the write after which leaves is true.
type leavingClient struct {
	*httptest.ResponseRecorder
	leave  context.CancelFunc
	leaves func(read []byte) bool
}

func (w leavingClient) Write(p []byte) (int, error) {
	n, err := w.ResponseRecorder.Write(p)
	if w.leaves(w.Body.Bytes()) {
		w.leave()
	}
	return n, err
}

// callLeaving serves body on path to a model "m" of one route, for a client that leaves
// when leaves says so. It returns what the client read, whether it left, and the call's
// generation record.
func callLeaving(t *testing.T, rt Route, path, body string, leaves func(read []byte) bool) (string, bool, store.Generation) {
	t.Helper()
	a := newAdminGateway(t, []*Model{{Name: "m", Routes: []Route{rt}}}, nil)
	ws, std, _ := a.workspace(5 * usdNanos)
	ctx, leave := context.WithCancel(context.Background())
	defer leave()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1"+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+std)
	w := leavingClient{httptest.NewRecorder(), leave, leaves}
	a.g.ServeHTTP(w, req, path)
	gen, err := a.s.GetGeneration(context.Background(), ws, w.Header().Get("X-Generation-Id"))
	if err != nil {
		t.Fatal(err)
	}
	return w.Body.String(), ctx.Err() != nil, gen
}

// onError leaves on reading an error event, as the SDKs do.
func onError(read []byte) bool { return bytes.Contains(read, []byte(`"type":"error"`)) }

// A media stream that fails after its first events is recorded as the upstream's failure
// even when the client leaves on reading the error: the charge is recorded before the
// error is written.
func TestMediaStreamFailureRecordedBeforeTheClientLeaves(t *testing.T) {
	for _, tc := range []struct {
		name, tail, wantMessage string
	}{
		{"ends without its completed event", "", "ended before its final event"},
		{"ends with its own error event", `event: error` + "\n" + `data: {"type":"error","error":{"message":"image server overloaded"}}` + "\n\n", "image server overloaded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				for i := range 2 {
					fmt.Fprintf(w, "event: image_generation.partial_image\ndata: {\"type\":\"image_generation.partial_image\",\"b64_json\":\"cGFydGlhbA\",\"partial_image_index\":%d}\n\n", i)
				}
				fmt.Fprint(w, tc.tail)
			}))
			defer up.Close()
			p, err := openai.New(openai.Config{Name: "oa", BaseURL: up.URL + "/v1", APIKey: "k"})
			if err != nil {
				t.Fatal(err)
			}
			price := pricing.Price{Input: 5 * usdNanos, ImageOutputTokens: 40 * usdNanos}
			read, left, gen := callLeaving(t, Route{ProviderName: "oa", Provider: p, UpstreamModel: "gpt-image-1", Price: price},
				"/images/generations", `{"model":"m","prompt":"a red fox","stream":true,"partial_images":2}`, onError)
			if !left {
				t.Fatalf("no error event reached the client: %s", read)
			}
			if gen.ErrorCode != CodeUpstream || gen.Cancelled || !strings.Contains(gen.ErrorMessage, tc.wantMessage) || gen.CostNanos == 0 {
				t.Fatalf("generation %+v", gen)
			}
		})
	}
}

// breakingSpeech sends a piece of audio, then breaks off.
type breakingSpeech struct{}

func (breakingSpeech) Name() string { return "tts" }
func (breakingSpeech) Synthesize(context.Context, *providers.SpeechRequest) (*providers.SpeechResponse, error) {
	body := io.MultiReader(strings.NewReader("RIFF audio"), iotest.ErrReader(&providers.UpstreamError{Provider: "tts", Category: providers.CategoryServerError, Message: "connection reset"}))
	return &providers.SpeechResponse{ContentType: "audio/wav", Body: io.NopCloser(body)}, nil
}

// The same for speech relayed as events from a provider whose audio breaks off.
func TestSpeechEventsBrokenRecordedBeforeTheClientLeaves(t *testing.T) {
	read, left, gen := callLeaving(t, Route{ProviderName: "tts", Provider: breakingSpeech{}, UpstreamModel: "tts-1", Price: pricing.Price{InputCharacters: 15 * usdNanos}},
		"/audio/speech", `{"model":"m","input":"hello there","voice":"alloy","response_format":"wav","stream_format":"sse"}`, onError)
	if !left || !strings.Contains(read, "speech.audio.delta") {
		t.Fatalf("no audio, then error event: %s", read)
	}
	if gen.ErrorCode != CodeUpstream || gen.Cancelled || gen.CostNanos != 11*15_000 {
		t.Fatalf("generation %+v", gen)
	}
}

// wholeSpeech sends a short clip whole.
type wholeSpeech struct{}

func (wholeSpeech) Name() string { return "tts" }
func (wholeSpeech) Synthesize(context.Context, *providers.SpeechRequest) (*providers.SpeechResponse, error) {
	return &providers.SpeechResponse{ContentType: "audio/wav", Body: io.NopCloser(strings.NewReader(wholeClip))}, nil
}

const wholeClip = "RIFF the whole clip"

// A client that leaves once the whole answer is written did not cancel it: the record is
// the complete answer's.
func TestClientLeavingAfterTheWholeAnswerIsNoCancellation(t *testing.T) {
	read, left, gen := callLeaving(t, Route{ProviderName: "tts", Provider: wholeSpeech{}, UpstreamModel: "tts-1", Price: pricing.Price{InputCharacters: 15 * usdNanos}},
		"/audio/speech", `{"model":"m","input":"hello there","voice":"alloy","response_format":"wav"}`,
		func(read []byte) bool { return len(read) >= len(wholeClip) })
	if !left || read != wholeClip {
		t.Fatalf("answer %q", read)
	}
	if gen.Cancelled || gen.Status != http.StatusOK || gen.ErrorCode != "" || gen.CostNanos != 11*15_000 {
		t.Fatalf("generation %+v", gen)
	}
}

// An upload refused before its model is known names the limit as the model's when every
// route has the same, and as the largest when they differ.
func TestUploadRefusedBeforeItsModelNamesTheLimit(t *testing.T) {
	mk := mock.New(mock.Config{Name: "mock"})
	whisper := func(limit int64) Route {
		return Route{ProviderName: "mock", Provider: mk, UpstreamModel: "mock-whisper", MaxUpload: limit}
	}
	for _, tc := range []struct {
		routes []Route
		want   string
	}{
		{[]Route{whisper(0), whisper(0)}, "the upload is larger than the limit of 25 MiB (26214400 bytes)"},
		{[]Route{whisper(0), whisper(100 << 20)}, "the upload is larger than any model of /audio/transcriptions takes: the largest max_upload of its routes is 100 MiB (104857600 bytes)"},
	} {
		a := newAdminGateway(t, []*Model{{Name: "a", Routes: tc.routes[:1]}, {Name: "b", Routes: tc.routes[1:]}}, nil)
		most := a.g.uploadCeiling(&transcriptionsCapability, DefaultAudioUpload)
		e := a.g.beyondCeiling(&upload.TooLargeError{Limit: most}, &transcriptionsCapability, DefaultAudioUpload)
		if e.Status != http.StatusRequestEntityTooLarge || e.Message != tc.want {
			t.Errorf("%d %q, want %q", e.Status, e.Message, tc.want)
		}
	}
}
