package handlers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/internal/audiogen"
	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/mock"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// settleOutage is a store whose settlements fail while down is set, as when the database
// is unreachable; they work again once it is cleared.
type settleOutage struct {
	store.Store
	down atomic.Bool
}

var errSettleDown = errors.New("disk I/O error")

func (s *settleOutage) Settle(ctx context.Context, p store.SettleParams) (store.Generation, error) {
	if s.down.Load() {
		return store.Generation{}, errSettleDown
	}
	return s.Store.Settle(ctx, p)
}

func (s *settleOutage) SettleLease(ctx context.Context, p store.SettleLeaseParams) (store.Generation, error) {
	if s.down.Load() {
		return store.Generation{}, errSettleDown
	}
	return s.Store.SettleLease(ctx, p)
}

// familyGateway is a Gateway over a settleOutage with one model per family, all on the
// mock provider: "m" (text), "emb", "mod", "tts", "stt", "img" and "ocr".
func familyGateway(t *testing.T, journal bool) (*adminGateway, *settleOutage) {
	t.Helper()
	mk := mock.New(mock.Config{Name: "mock", Chunks: 3, Text: "secret answer text"})
	one := func(name string, p pricing.Price) *Model {
		return &Model{Name: name, Routes: []Route{{ProviderName: "mock", Provider: mk, UpstreamModel: name + "-1", Price: p}}}
	}
	models := []*Model{
		one("m", route("mock", "m-1", "1", "2").Price),
		one("emb", pricing.Price{Input: 100_000_000}),
		one("mod", pricing.Price{PerRequest: 1_000_000}),
		one("tts", pricing.Price{InputCharacters: 15 * usdNanos}),
		one("stt", pricing.Price{InputAudioSeconds: usdNanos / 100}),
		one("img", imagePrices(t, pricing.ImagePrice{Nanos: 40_000_000})),
		one("ocr", pricing.Price{Page: 1_000_000}),
	}
	a := newAdminGateway(t, models, func(g *Gateway) {
		if !journal {
			g.JournalDir = ""
		}
	})
	s := &settleOutage{Store: a.s}
	a.g.Store = s
	t.Cleanup(func() { _ = a.g.Close() })
	return a, s
}

// familyCall is one request of a family: post sends it with the key and returns the
// recorder.
type familyCall struct {
	name string
	post func(a *adminGateway, key string) *httptest.ResponseRecorder
	// delivered: the client has the answer, whole or in part, before its end is settled (a
	// stream, a binary answer); otherwise the answer is withheld until it is recorded.
	delivered bool
	// secret is a part of the answer that a withheld answer must not show.
	secret string
	// binary: the answer is audio bytes, delivered whole once its charge is journaled.
	binary bool
}

func postJSON(path, body string) func(a *adminGateway, key string) *httptest.ResponseRecorder {
	return func(a *adminGateway, key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "http://gw/v1"+path, strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		a.g.ServeHTTP(w, r, path)
		return w
	}
}

func postTranscription(a *adminGateway, key string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	a.g.ServeHTTP(w, postAudio(key, "stt", audiogen.MP3(3*44100/1152, -1).Data), "/audio/transcriptions")
	return w
}

// postAudio is a POST /audio/transcriptions of audio as talk.mp3 to model.
func postAudio(key, model string, audio []byte) *http.Request {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("model", model)
	fw, _ := mw.CreateFormFile("file", "talk.mp3")
	_, _ = fw.Write(audio)
	_ = mw.Close()
	r := httptest.NewRequest(http.MethodPost, "http://gw/v1/audio/transcriptions", &body)
	r.Header.Set("Authorization", "Bearer "+key)
	r.Header.Set("Content-Type", mw.FormDataContentType())
	return r
}

var familyCalls = []familyCall{
	{name: "chat", post: postJSON("/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`), secret: "secret answer"},
	{name: "chat stream", post: postJSON("/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`), delivered: true},
	{name: "responses", post: postJSON("/responses", `{"model":"m","input":"hi"}`), secret: "secret answer"},
	{name: "responses stream", post: postJSON("/responses", `{"model":"m","stream":true,"input":"hi"}`), delivered: true},
	{name: "messages", post: postJSON("/messages", `{"model":"m","max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`), secret: "secret answer"},
	{name: "messages stream", post: postJSON("/messages", `{"model":"m","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`), delivered: true},
	{name: "embeddings", post: postJSON("/embeddings", `{"model":"emb","input":"hello"}`), secret: "embedding"},
	{name: "moderations", post: postJSON("/moderations", `{"model":"mod","input":"hello"}`), secret: "flagged"},
	{name: "speech", post: postJSON("/audio/speech", `{"model":"tts","input":"hello there","voice":"alloy","response_format":"wav"}`), delivered: true, binary: true},
	{name: "speech sse", post: postJSON("/audio/speech", `{"model":"tts","input":"hello there","voice":"alloy","response_format":"wav","stream_format":"sse"}`), delivered: true},
	{name: "transcription", post: postTranscription, secret: `"text"`},
	{name: "images", post: postJSON("/images/generations", `{"model":"img","prompt":"a cat"}`), secret: "b64_json"},
	{name: "images stream", post: postJSON("/images/generations", `{"model":"img","prompt":"a cat","stream":true}`), delivered: true},
	{name: "image edit", post: func(a *adminGateway, key string) *httptest.ResponseRecorder {
		return a.postEdit(key, map[string]string{"model": "img", "prompt": "add a hat"}, 1, false)
	}, secret: "b64_json"},
	{name: "ocr", post: postJSON("/ocr", `{"model":"ocr","document":{"type":"document_url","document_url":"https://example.com/a.pdf"},"pages":[0]}`), secret: "pages"},
}

// One rule for charge and delivery, per family, with the store failing at settlement: an
// answer not yet delivered is withheld (503 store_unavailable), charged nothing and its hold
// released; an answer the client has (a stream, audio) has its charge journaled and
// applied once the store is back, so it is billed exactly once.
//
// A 5 USD wallet's requests are admitted from a small credit lease; a wallet with little
// more than the 1.00 USD preflight takes none, and each request reserves for itself.
func TestSettlementFailurePerFamily(t *testing.T) {
	for _, credits := range []int64{5 * usdNanos, MinPreflightNanos + 100_000_000} {
		t.Run(fmt.Sprintf("wallet %d nanos", credits), func(t *testing.T) { settlementFailurePerFamily(t, credits) })
	}
}

func settlementFailurePerFamily(t *testing.T, credits int64) {
	a, s := familyGateway(t, true)
	for _, fc := range familyCalls {
		t.Run(fc.name, func(t *testing.T) {
			ctx := context.Background()
			ws, key, _ := a.workspace(credits)
			s.down.Store(true)
			w := fc.post(a, key)
			body := w.Body.String()
			genID := w.Header().Get("X-Generation-Id")
			if genID == "" {
				t.Fatalf("no generation id: %d %s", w.Code, body)
			}
			if !fc.delivered {
				s.down.Store(false)
				if w.Code != http.StatusServiceUnavailable || !strings.Contains(body, CodeStoreUnavailable) || !strings.Contains(body, "could not record") ||
					strings.Contains(body, fc.secret) {
					t.Fatalf("withheld answer: %d %s", w.Code, body)
				}
				if n := a.g.ledger.JournalPending(); n != 0 {
					t.Fatalf("%d settlements journaled for an answer withheld", n)
				}
				if b, _ := a.s.GetBalance(ctx, ws); b.BalanceNanos != credits || b.ReservedNanos != 0 {
					t.Fatalf("after a withheld answer: %+v, want nothing charged or held", b)
				}
				return
			}
			if w.Code != http.StatusOK {
				t.Fatalf("delivered answer: %d %s", w.Code, body)
			}
			if fc.binary && !bytes.Equal(w.Body.Bytes(), wholeSpeechAudio(t)) {
				t.Fatalf("audio of %d bytes, want the whole clip once its charge is journaled", w.Body.Len())
			}
			if n := a.g.ledger.JournalPending(); n != 1 {
				t.Fatalf("%d settlements journaled, want the answer's", n)
			}
			s.down.Store(false)
			var gen store.Generation
			waitFor(t, func() bool {
				var err error
				gen, err = a.s.GetGeneration(ctx, ws, genID)
				return err == nil && a.g.ledger.JournalPending() == 0
			})
			b, _ := a.s.GetBalance(ctx, ws)
			if gen.CostNanos <= 0 || b.BalanceNanos != credits-gen.CostNanos || b.ReservedNanos != 0 {
				t.Fatalf("journaled charge applied: generation %+v, balance %+v", gen, b)
			}
		})
	}
}

// A binary answer whose charge can be neither recorded nor journaled is cut off before it
// ends: the client never keeps audio that was never billed.
func TestSpeechNotWholeWhenItsChargeIsLost(t *testing.T) {
	a, s := familyGateway(t, false)
	_, key, _ := a.workspace(5 * usdNanos)
	s.down.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.g.ServeHTTP(w, r, "/audio/speech")
	}))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"model":"tts","input":"hello there","voice":"alloy","response_format":"wav"}`))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err == nil {
		t.Fatalf("the client read %d bytes of audio as whole (of %d), never billed", len(got), len(wholeSpeechAudio(t)))
	}
}

// wholeSpeechAudio is the mock's clip for the speech requests above.
func wholeSpeechAudio(t *testing.T) []byte {
	t.Helper()
	resp, err := mock.New(mock.Config{Name: "mock", Chunks: 3}).Synthesize(context.Background(), &providers.SpeechRequest{Model: "tts-1", Input: "hello there", Voice: "alloy", Format: "wav"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// An image route priced by the image alone charges at most what the request held: an
// upstream that makes more images than asked is its own error, not the caller's to pay.
func TestImageChargeIsCappedAtItsHold(t *testing.T) {
	gen := &fakeImages{name: "gen", resp: providers.ImageResponse{Images: []providers.GeneratedImage{{B64JSON: "aW1hZ2Ux", MIMEType: "image/png"}, {B64JSON: "aW1hZ2Uy", MIMEType: "image/png"}}}}
	a := newAdminGateway(t, []*Model{{Name: "img", Routes: []Route{{ProviderName: "gen", Provider: gen, UpstreamModel: "img-1",
		Price: imagePrices(t, pricing.ImagePrice{Nanos: 40_000_000})}}}}, nil)
	ws, std, _ := a.workspace(5 * usdNanos)
	status, h, v := a.doHeader(http.MethodPost, "/images/generations", std, `{"model":"img","prompt":"a cat","n":1}`)
	if status != http.StatusOK {
		t.Fatalf("%d %v", status, v)
	}
	g, err := a.s.GetGeneration(context.Background(), ws, h.Get("X-Generation-Id"))
	if err != nil || g.CostNanos != 40_000_000 {
		t.Fatalf("generation %+v (%v), want the one image held charged", g, err)
	}
}
