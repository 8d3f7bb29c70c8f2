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
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/openai"
)

// leavingWriter is a client that leaves as soon as it reads an error event, as the SDKs
// do: the request's context ends on the write that carries it.
type leavingWriter struct {
	*httptest.ResponseRecorder
	leave context.CancelFunc
}

func (w leavingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseRecorder.Write(p)
	if bytes.Contains(p, []byte(`"type":"error"`)) {
		w.leave()
	}
	return n, err
}

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
			a := newAdminGateway(t, []*Model{{Name: "img", Routes: []Route{{ProviderName: "oa", Provider: p, UpstreamModel: "gpt-image-1", Price: price}}}}, nil)
			ws, std, _ := a.workspace(5 * usdNanos)

			ctx, leave := context.WithCancel(context.Background())
			defer leave()
			req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/images/generations",
				strings.NewReader(`{"model":"img","prompt":"a red fox","stream":true,"partial_images":2}`))
			req.Header.Set("Authorization", "Bearer "+std)
			w := leavingWriter{httptest.NewRecorder(), leave}
			a.g.ServeHTTP(w, req, "/images/generations")
			if ctx.Err() == nil {
				t.Fatalf("no error event reached the client: %s", w.Body)
			}
			gen, err := a.s.GetGeneration(context.Background(), ws, w.Header().Get("X-Generation-Id"))
			if err != nil {
				t.Fatal(err)
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
	price := pricing.Price{InputCharacters: 15 * usdNanos}
	a := newAdminGateway(t, []*Model{{Name: "tts", Routes: []Route{{ProviderName: "tts", Provider: breakingSpeech{}, UpstreamModel: "tts-1", Price: price}}}}, nil)
	ws, std, _ := a.workspace(5 * usdNanos)
	ctx, leave := context.WithCancel(context.Background())
	defer leave()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/audio/speech",
		strings.NewReader(`{"model":"tts","input":"hello there","voice":"alloy","response_format":"wav","stream_format":"sse"}`))
	req.Header.Set("Authorization", "Bearer "+std)
	w := leavingWriter{httptest.NewRecorder(), leave}
	a.g.ServeHTTP(w, req, "/audio/speech")
	if ctx.Err() == nil || !strings.Contains(w.Body.String(), "speech.audio.delta") {
		t.Fatalf("no audio, then error event: %s", w.Body)
	}
	gen, err := a.s.GetGeneration(context.Background(), ws, w.Header().Get("X-Generation-Id"))
	if err != nil {
		t.Fatal(err)
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

// doneWriter is a client that leaves once it has the whole answer.
type doneWriter struct {
	*httptest.ResponseRecorder
	leave context.CancelFunc
	whole int
}

func (w doneWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseRecorder.Write(p)
	if w.Body.Len() >= w.whole {
		w.leave()
	}
	return n, err
}

// A client that leaves once the whole answer is written did not cancel it: the record is
// the complete answer's.
func TestClientLeavingAfterTheWholeAnswerIsNoCancellation(t *testing.T) {
	price := pricing.Price{InputCharacters: 15 * usdNanos}
	a := newAdminGateway(t, []*Model{{Name: "tts", Routes: []Route{{ProviderName: "tts", Provider: wholeSpeech{}, UpstreamModel: "tts-1", Price: price}}}}, nil)
	ws, std, _ := a.workspace(5 * usdNanos)
	ctx, leave := context.WithCancel(context.Background())
	defer leave()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/audio/speech",
		strings.NewReader(`{"model":"tts","input":"hello there","voice":"alloy","response_format":"wav"}`))
	req.Header.Set("Authorization", "Bearer "+std)
	w := doneWriter{httptest.NewRecorder(), leave, len(wholeClip)}
	a.g.ServeHTTP(w, req, "/audio/speech")
	if ctx.Err() == nil || w.Body.String() != wholeClip {
		t.Fatalf("answer %q", w.Body)
	}
	gen, err := a.s.GetGeneration(context.Background(), ws, w.Header().Get("X-Generation-Id"))
	if err != nil {
		t.Fatal(err)
	}
	if gen.Cancelled || gen.Status != http.StatusOK || gen.ErrorCode != "" || gen.CostNanos != 11*15_000 {
		t.Fatalf("generation %+v", gen)
	}
}
