package handlers

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/billing"
	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/anthropic"
	"github.com/modelgateway/caddy-modelgateway/providers/openai"
	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/sqlite"
)

// benchProvider is an upstream that answers at once with canned bodies: chat completions
// by forwarding, everything else through the neutral model.
type benchProvider struct {
	completion []byte
	stream     []byte
}

func newBenchProvider() *benchProvider {
	p := &benchProvider{completion: []byte(`{"id":"chatcmpl-up1","object":"chat.completion","created":1700000000,"model":"up-model",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"Hello there, how can I help you today?"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":12,"completion_tokens":10,"total_tokens":22}}`)}
	var b bytes.Buffer
	chunk := func(delta, finish string) {
		fmt.Fprintf(&b, `data: {"id":"chatcmpl-up1","object":"chat.completion.chunk","created":1700000000,"model":"up-model","choices":[{"index":0,"delta":%s,"finish_reason":%s}]}`+"\n\n", delta, finish)
	}
	chunk(`{"role":"assistant","content":""}`, "null")
	for i := 0; i < 14; i++ {
		chunk(fmt.Sprintf(`{"content":"word%d "}`, i), "null")
	}
	chunk(`{}`, `"stop"`)
	b.WriteString(`data: {"id":"chatcmpl-up1","object":"chat.completion.chunk","created":1700000000,"model":"up-model","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":15,"total_tokens":27}}` + "\n\n")
	b.WriteString("data: [DONE]\n\n")
	p.stream = b.Bytes()
	return p
}

func (p *benchProvider) Name() string { return "bench" }

var benchFormats = []providers.WireFormat{providers.FormatOpenAIChat}

func (p *benchProvider) Formats() []providers.WireFormat { return benchFormats }

func (p *benchProvider) Forward(_ context.Context, req *providers.RawRequest) (*providers.RawResponse, error) {
	body := p.completion
	if req.Stream {
		body = p.stream
	}
	return &providers.RawResponse{Status: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(body))}, nil
}

func (p *benchProvider) Chat(_ context.Context, req *providers.Request) (*providers.Response, error) {
	return &providers.Response{ID: "msg-up1", Model: req.Model, Text: "Hello there, how can I help you today?",
		FinishReason: providers.FinishStop, Usage: providers.Usage{Input: 12, Output: 10}}, nil
}

func (p *benchProvider) ChatStream(_ context.Context, req *providers.Request) (providers.Stream, error) {
	evs := make([]providers.Event, 0, 17)
	for i := 0; i < 14; i++ {
		evs = append(evs, providers.Event{Type: providers.EventText, Text: fmt.Sprintf("word%d ", i)})
	}
	evs = append(evs, providers.Event{Type: providers.EventFinish, FinishReason: providers.FinishStop},
		providers.Event{Type: providers.EventUsage, Usage: providers.Usage{Input: 12, Output: 15}})
	return &benchStream{evs: evs, i: -1}, nil
}

type benchStream struct {
	evs []providers.Event
	i   int
}

func (s *benchStream) Next() bool               { s.i++; return s.i < len(s.evs) }
func (s *benchStream) Current() providers.Event { return s.evs[s.i] }
func (s *benchStream) Err() error               { return nil }
func (s *benchStream) Close() error             { return nil }

// benchGateway is a Gateway over SQLite with one priced model routed to benchProvider, and a
// funded standard key.
func benchGateway(b testing.TB, provider providers.Provider) (*Gateway, string) {
	b.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "gateway.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	var price pricing.Price
	price.Input, _ = pricing.ParseUSD("0.15")
	price.Output, _ = pricing.ParseUSD("0.60")
	price.CachedInput, price.CacheWrite, price.Reasoning = price.Input, price.Input, price.Output
	reg, err := NewRegistry([]*Model{{Name: "bench-model", Routes: []Route{{ProviderName: "bench", Provider: provider, UpstreamModel: "up-model", Price: price}}}})
	if err != nil {
		b.Fatal(err)
	}
	// As the module configures it by default: leases linger between requests.
	g := &Gateway{Config: billing.Config{Store: s, LeaseLinger: 2 * time.Second}, Registry: reg}
	g.Init()
	b.Cleanup(func() { _ = g.Close() })
	ws := ids.New("ws")
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: ws, Name: "bench"}); err != nil {
		b.Fatal(err)
	}
	if _, err := s.AddCredits(ctx, ws, 1_000_000*usdNanos, "bench"); err != nil {
		b.Fatal(err)
	}
	k, plain, err := NewKey(ws, store.KeyStandard, "bench")
	if err != nil {
		b.Fatal(err)
	}
	k.CreatedAt = g.Now()
	if err := s.CreateKey(ctx, k); err != nil {
		b.Fatal(err)
	}
	return g, plain
}

func benchServe(b *testing.B, path, body string, check func(*httptest.ResponseRecorder)) {
	benchServeWith(b, newBenchProvider(), path, body, check)
}

func benchServeWith(b *testing.B, provider providers.Provider, path, body string, check func(*httptest.ResponseRecorder)) {
	g, key := benchGateway(b, provider)
	serve := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "http://gw/v1"+path, strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+key)
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r, path)
		return w
	}
	w := serve()
	if w.Code != http.StatusOK {
		b.Fatalf("status %d: %s", w.Code, w.Body.String())
	}
	check(w)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		serve()
	}
}

const benchChatBody = `{"model":"bench-model","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello."}],"max_tokens":256,"temperature":0.2,"meta":true`

func BenchmarkHotPath(b *testing.B) {
	b.Run("chat", func(b *testing.B) {
		benchServe(b, "/chat/completions", benchChatBody+`}`, func(w *httptest.ResponseRecorder) {
			if !strings.Contains(w.Body.String(), `"cost_lines"`) || !strings.Contains(w.Body.String(), `"meta"`) {
				b.Fatalf("answer lacks cost or meta: %s", w.Body.String())
			}
		})
	})
	b.Run("chat_stream", func(b *testing.B) {
		benchServe(b, "/chat/completions", benchChatBody+`,"stream":true}`, func(w *httptest.ResponseRecorder) {
			if got := strings.Count(w.Body.String(), "data: "); got != 18 || !strings.Contains(w.Body.String(), `"cost_lines"`) {
				b.Fatalf("%d events: %s", got, w.Body.String())
			}
		})
	})
	b.Run("messages", func(b *testing.B) {
		benchServe(b, "/messages", `{"model":"bench-model","max_tokens":256,"system":"You are terse.","messages":[{"role":"user","content":"Say hello."}]}`, func(w *httptest.ResponseRecorder) {
			if !strings.Contains(w.Body.String(), `"cost_lines"`) {
				b.Fatalf("answer lacks cost: %s", w.Body.String())
			}
		})
	})
	b.Run("messages_stream", func(b *testing.B) {
		benchServe(b, "/messages", `{"model":"bench-model","max_tokens":256,"stream":true,"messages":[{"role":"user","content":"Say hello."}]}`, func(w *httptest.ResponseRecorder) {
			if !strings.Contains(w.Body.String(), "message_stop") {
				b.Fatalf("stream incomplete: %s", w.Body.String())
			}
		})
	})
}

// wireTransport answers every request with a canned upstream body, streamed or not as the
// request asks, so that the real provider adapters encode the request and decode the answer
// without a network in between: BenchmarkHotPathAdapters measures translation as served.
type wireTransport struct {
	body, stream []byte
}

func (t wireTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	req, _ := io.ReadAll(r.Body)
	_ = r.Body.Close()
	body, ct := t.body, "application/json"
	if bytes.Contains(req, []byte(`"stream":true`)) {
		body, ct = t.stream, "text/event-stream"
	}
	return &http.Response{StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {ct}}, Body: io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)), Request: r}, nil
}

func anthropicWire() wireTransport {
	var st bytes.Buffer
	ev := func(name, data string) { fmt.Fprintf(&st, "event: %s\ndata: %s\n\n", name, data) }
	ev("message_start", `{"type":"message_start","message":{"id":"msg_up1","type":"message","role":"assistant","model":"up-model","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}`)
	ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
	for i := 0; i < 14; i++ {
		ev("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"word%d "}}`, i))
	}
	ev("content_block_stop", `{"type":"content_block_stop","index":0}`)
	ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}`)
	ev("message_stop", `{"type":"message_stop"}`)
	return wireTransport{
		body: []byte(`{"id":"msg_up1","type":"message","role":"assistant","model":"up-model","content":[{"type":"text","text":"Hello there, how can I help you today?"}],` +
			`"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":10}}`),
		stream: st.Bytes(),
	}
}

// benchAdapters returns the real adapters over canned upstreams: Anthropic-wire and
// OpenAI-wire.
func benchAdapters(b *testing.B) (an, oa providers.Provider) {
	an, err := anthropic.New(anthropic.Config{Name: "bench", BaseURL: "http://upstream.invalid", APIKey: "k", Transport: anthropicWire()})
	if err != nil {
		b.Fatal(err)
	}
	fake := newBenchProvider()
	oa, err = openai.New(openai.Config{Name: "bench", BaseURL: "http://upstream.invalid/v1", APIKey: "k", Transport: wireTransport{body: fake.completion, stream: fake.stream}})
	if err != nil {
		b.Fatal(err)
	}
	return an, oa
}

// BenchmarkHotPathAdapters is BenchmarkHotPath through the real adapters: chat completions
// to an Anthropic-wire provider, and messages to an OpenAI-wire provider.
func BenchmarkHotPathAdapters(b *testing.B) {
	an, oa := benchAdapters(b)
	b.Run("chat_to_anthropic", func(b *testing.B) {
		benchServeWith(b, an, "/chat/completions", benchChatBody+`}`, func(w *httptest.ResponseRecorder) {
			if !strings.Contains(w.Body.String(), `"Hello there`) || !strings.Contains(w.Body.String(), `"cost_lines"`) {
				b.Fatalf("answer: %s", w.Body.String())
			}
		})
	})
	b.Run("chat_to_anthropic_stream", func(b *testing.B) {
		benchServeWith(b, an, "/chat/completions", benchChatBody+`,"stream":true}`, func(w *httptest.ResponseRecorder) {
			if !strings.Contains(w.Body.String(), "word13") || !strings.Contains(w.Body.String(), "[DONE]") {
				b.Fatalf("stream: %s", w.Body.String())
			}
		})
	})
	b.Run("messages_to_openai", func(b *testing.B) {
		benchServeWith(b, oa, "/messages", `{"model":"bench-model","max_tokens":256,"system":"You are terse.","messages":[{"role":"user","content":"Say hello."}]}`, func(w *httptest.ResponseRecorder) {
			if !strings.Contains(w.Body.String(), `"Hello there`) || !strings.Contains(w.Body.String(), `"cost_lines"`) {
				b.Fatalf("answer: %s", w.Body.String())
			}
		})
	})
	b.Run("messages_to_openai_stream", func(b *testing.B) {
		benchServeWith(b, oa, "/messages", `{"model":"bench-model","max_tokens":256,"stream":true,"messages":[{"role":"user","content":"Say hello."}]}`, func(w *httptest.ResponseRecorder) {
			if !strings.Contains(w.Body.String(), "word13") || !strings.Contains(w.Body.String(), "message_stop") {
				b.Fatalf("stream: %s", w.Body.String())
			}
		})
	})
}

// BenchmarkLongPrompt is a request carrying 100 KB of prose (a pasted document) through each
// surface, as BenchmarkHotPath and BenchmarkHotPathAdapters serve it: the body is checked,
// read and, but for chat passthrough, translated, so that every pass over the text shows
// (encoding/json unquoting a message's string content made /messages five times slower than
// chat before rawjson.UnmarshalString).
func BenchmarkLongPrompt(b *testing.B) {
	text := strings.Repeat(`The quick brown fox jumps over the lazy dog; \"quoted\" text, then a new line.\n`, 1300)
	body := `{"model":"bench-model","messages":[{"role":"user","content":"` + text + `"}],"max_tokens":256}`
	an, oa := benchAdapters(b)
	for _, c := range []struct {
		name, path string
		provider   providers.Provider
	}{
		{"chat", "/chat/completions", newBenchProvider()},
		{"messages", "/messages", newBenchProvider()},
		{"chat_to_anthropic", "/chat/completions", an},
		{"messages_to_openai", "/messages", oa},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			benchServeWith(b, c.provider, c.path, body, func(w *httptest.ResponseRecorder) {
				if !strings.Contains(w.Body.String(), "Hello there") {
					b.Fatalf("answer: %s", w.Body.String())
				}
			})
		})
	}
}
