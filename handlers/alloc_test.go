package handlers

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/openai"
)

// streamOf is an upstream chat stream of n content chunks, usage and [DONE].
func streamOf(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, `data: {"id":"chatcmpl-up1","object":"chat.completion.chunk","created":1700000000,"model":"up-model","choices":[{"index":0,"delta":{"content":"word%d "},"finish_reason":null}]}`+"\n\n", i)
	}
	b.WriteString(`data: {"id":"chatcmpl-up1","object":"chat.completion.chunk","created":1700000000,"model":"up-model","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":15,"total_tokens":27}}` + "\n\n")
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

// TestPassthroughStreamAllocatesNothingPerChunk: relaying a chat stream allocates per
// stream, not per chunk (each chunk is checked, its id replaced and written from buffers the
// stream keeps). A Route copied to the heap for every frame once cost a 160-byte allocation
// per chunk, growing with the length of every answer; this fails on anything like it.
func TestPassthroughStreamAllocatesNothingPerChunk(t *testing.T) {
	allocs := func(chunks int) float64 {
		p := newBenchProvider()
		p.stream = streamOf(chunks)
		g, key := benchGateway(t, p)
		serve := func() {
			r := httptest.NewRequest(http.MethodPost, "http://gw/v1/chat/completions", strings.NewReader(benchChatBody+`,"stream":true}`))
			r.Header.Set("Authorization", "Bearer "+key)
			w := httptest.NewRecorder()
			// A body sized for the answer up front, so that the recorder's growth is not counted.
			w.Body = bytes.NewBuffer(make([]byte, 0, 64<<10))
			g.ServeHTTP(w, r, "/chat/completions")
			if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "[DONE]") {
				t.Fatalf("status %d: %s", w.Code, w.Body.String())
			}
		}
		serve() // leases, caches and pools warm
		return testing.AllocsPerRun(50, serve)
	}
	short, long := allocs(10), allocs(210)
	perChunk := (long - short) / 200
	t.Logf("%.0f allocations for 10 chunks, %.0f for 210: %.2f per chunk", short, long, perChunk)
	// The race detector makes sync.Pool drop a quarter of what is put back (one pool is
	// used per chunk): 0.2-0.25 per chunk under it, against 1 per chunk for the copied route.
	limit := 0.1
	if raceEnabled {
		limit = 0.5
	}
	if perChunk > limit {
		t.Fatalf("%.2f allocations per chunk, want none", perChunk)
	}
}

// TestForwardedAnswerBytesDoNotGrowWithIt: a complete forwarded answer is read and
// decorated into buffers reused across requests, so what a request allocates does not grow
// with the size of its answer. Reading it into a new slice and decorating it into another
// cost twice its size per request.
func TestForwardedAnswerBytesDoNotGrowWithIt(t *testing.T) {
	perRequest := func(textBytes int) float64 {
		p := newBenchProvider()
		p.completion = []byte(`{"id":"chatcmpl-up1","object":"chat.completion","created":1700000000,"model":"up-model",` +
			`"choices":[{"index":0,"message":{"role":"assistant","content":"` + strings.Repeat("x", textBytes) + `"},"finish_reason":"stop"}],` +
			`"usage":{"prompt_tokens":12,"completion_tokens":10,"total_tokens":22}}`)
		g, key := benchGateway(t, p)
		return bytesPerAnswer(t, g, key, "/chat/completions", benchChatBody+`}`, textBytes)
	}
	const small, large = 100, 32 << 10
	growth := perRequest(large) - perRequest(small)
	t.Logf("%.0f more bytes per request for a %d-byte larger answer", growth, large-small)
	// Under the race detector sync.Pool drops a quarter of the buffers put back, and each
	// new one grows to the answer's size again: about one answer's size per request. Without
	// the pooled buffers it is about three (read growing step by step, then decorated).
	limit := 0.25
	if raceEnabled {
		limit = 1.5
	}
	if growth > limit*float64(large-small) {
		t.Fatalf("a request allocates %.0f more bytes for a %d-byte larger answer", growth, large-small)
	}
}

// bytesPerAnswer is the heap a request to path with body allocates on g, on average once
// its leases, caches and pools are warm; its answer must be at least minBytes long. The
// recorder's body is made large up front, the same for every answer size, so that its
// growth is not counted.
func bytesPerAnswer(t *testing.T, g *Gateway, key, path, body string, minBytes int) float64 {
	t.Helper()
	serve := func() {
		r := httptest.NewRequest(http.MethodPost, "http://gw/v1"+path, strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		w.Body = bytes.NewBuffer(make([]byte, 0, 64<<10))
		g.ServeHTTP(w, r, path)
		if w.Code != http.StatusOK || w.Body.Len() < minBytes {
			t.Fatalf("status %d, %d bytes", w.Code, w.Body.Len())
		}
	}
	for range 5 {
		serve()
	}
	return bytesPerCall(200, serve)
}

// bytesPerCall is the heap f allocates per call, on average over n calls (runtime.MemStats:
// it counts bytes, where testing.AllocsPerRun counts allocations).
func bytesPerCall(n int, f func()) float64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		f()
	}
	runtime.ReadMemStats(&after)
	return float64(after.TotalAlloc-before.TotalAlloc) / float64(n)
}

// TestCandidatesShareTheModelsRoutes: picking the routes of a model whose every route serves
// the surface copies nothing (it once copied every route, about 190 bytes a request); a
// model with a route that cannot gets a new slice of the others.
func TestCandidatesShareTheModelsRoutes(t *testing.T) {
	p := newBenchProvider()
	reg, err := NewRegistry([]*Model{
		{Name: "all", Routes: []Route{{ProviderName: "bench", Provider: p, UpstreamModel: "a"}, {ProviderName: "bench", Provider: p, UpstreamModel: "b"}}},
		{Name: "some", Routes: []Route{{ProviderName: "bench", Provider: p, UpstreamModel: "a"}, {ProviderName: "embed", Provider: embedOnly{}, UpstreamModel: "e"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, routes, _, apiErr := reg.candidates("all", &chatCompletionsSurface.capability); apiErr != nil || len(routes) != 2 {
			t.Fatalf("candidates: %v, %d routes", apiErr, len(routes))
		}
	}); n != 0 {
		t.Fatalf("%.0f allocations to pick a model's routes, want none", n)
	}
	m, routes, dropped, apiErr := reg.candidates("some", &chatCompletionsSurface.capability)
	if apiErr != nil || len(routes) != 1 || routes[0].UpstreamModel != "a" || len(m.Routes) != 2 || len(dropped) != 1 || dropped[0].reason != reasonUnsupportedEndpoint {
		t.Fatalf("candidates: %v, %+v", apiErr, routes)
	}
}

// embedOnly is a provider that serves no chat surface.
type embedOnly struct{}

func (embedOnly) Name() string                    { return "embed" }
func (embedOnly) Formats() []providers.WireFormat { return nil }

// TestTranslatedAnswerBytes: a translated answer (messages → an OpenAI-wire provider,
// through the real adapter) is read into a pooled buffer and written into another, so what
// a request allocates grows with its answer by what the neutral model keeps of it: the
// decoder's copy of the content and its text, about twice the answer's size. Reading the
// answer into a new slice of its own cost one answer more.
func TestTranslatedAnswerBytes(t *testing.T) {
	perRequest := func(textBytes int) float64 {
		fake := newBenchProvider()
		body := []byte(`{"id":"chatcmpl-up1","object":"chat.completion","created":1700000000,"model":"up-model",` +
			`"choices":[{"index":0,"message":{"role":"assistant","content":"` + strings.Repeat("x", textBytes) + `"},"finish_reason":"stop"}],` +
			`"usage":{"prompt_tokens":12,"completion_tokens":10,"total_tokens":22}}`)
		oa, err := openai.New(openai.Config{Name: "bench", BaseURL: "http://upstream.invalid/v1", APIKey: "k", Transport: wireTransport{body: body, stream: fake.stream}})
		if err != nil {
			t.Fatal(err)
		}
		g, key := benchGateway(t, oa)
		return bytesPerAnswer(t, g, key, "/messages", `{"model":"bench-model","max_tokens":256,"messages":[{"role":"user","content":"Say hello."}]}`, textBytes)
	}
	const small, large = 100, 32 << 10
	times := (perRequest(large) - perRequest(small)) / float64(large-small)
	t.Logf("a request allocates %.2f times the answer's growth", times)
	// 2.3 times on this change's machine, 3.5 with the answer read into a new slice; under
	// the race detector, whose sync.Pool drops a quarter of what is put back, 2.9.
	limit := 2.75
	if raceEnabled {
		limit = 3.5
	}
	if times > limit {
		t.Fatalf("a request allocates %.2f times the answer's growth, more than %.2f", times, limit)
	}
}

// TestGenerationIDHeadersAllocateOnce: naming the generation in three headers
// (X-Generation-Id and the SDKs' request id headers) costs what one header did.
func TestGenerationIDHeadersAllocateOnce(t *testing.T) {
	h := http.Header{"Content-Type": {"application/json"}}
	setGenerationID(h, "gen_1")
	if n := testing.AllocsPerRun(100, func() { setGenerationID(h, "gen_1") }); n > 1 {
		t.Fatalf("%.0f allocations, want at most one", n)
	}
	for _, k := range []string{"X-Generation-Id", "x-request-id", "request-id"} {
		if v := h.Get(k); v != "gen_1" {
			t.Fatalf("%s: %q, want gen_1", k, v)
		}
	}
	// Each header's value is its own: editing one in place leaves the others.
	h["X-Request-Id"][0] = "edited"
	if h.Get("X-Generation-Id") != "gen_1" || h.Get("Request-Id") != "gen_1" {
		t.Fatalf("editing x-request-id changed the others: %v", h)
	}
}
