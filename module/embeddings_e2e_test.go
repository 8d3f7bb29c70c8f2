package module

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// upstreamVectors are the fake upstreams' embeddings: one per input, by position.
var upstreamVectors = [][]float64{
	{0.0123456789, -0.5, 0.25, 1e-7},
	{-0.0009765625, 0.333333333, -0.75, 0.5},
}

func vectorJSON(v []float64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func float32Base64(v []float64) string {
	raw := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(float32(x)))
	}
	return base64.StdEncoding.EncodeToString(raw)
}

// newFakeEmbeddings answers OpenAI's /v1/embeddings (honouring encoding_format unless
// floatsOnly, as some compatible servers do) and /v1/moderations, and Gemini's
// batchEmbedContents and countTokens under /v1beta.
func newFakeEmbeddings(t *testing.T, floatsOnly bool) (*httptest.Server, *atomic.Int64) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var req map[string]any
		_ = json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/v1/embeddings":
			inputs, _ := req["input"].([]any)
			if s, ok := req["input"].(string); ok {
				inputs = []any{s}
			}
			var items []string
			for i := range inputs {
				emb := vectorJSON(upstreamVectors[i])
				if req["encoding_format"] == "base64" && !floatsOnly {
					emb = `"` + float32Base64(upstreamVectors[i]) + `"`
				}
				items = append(items, fmt.Sprintf(`{"object":"embedding","index":%d,"embedding":%s}`, i, emb))
			}
			fmt.Fprintf(w, `{"object":"list","data":[%s],"model":%q,"usage":{"prompt_tokens":%d,"total_tokens":%d}}`,
				strings.Join(items, ","), req["model"], 7*len(inputs), 7*len(inputs))
		case r.URL.Path == "/v1/moderations":
			cats, scores := []string{}, []string{}
			for _, c := range []string{"harassment", "hate", "violence"} {
				cats = append(cats, fmt.Sprintf(`%q:%v`, c, c == "violence"))
				scores = append(scores, fmt.Sprintf(`%q:%v`, c, map[bool]float64{true: 0.91, false: 0.01}[c == "violence"]))
			}
			result := fmt.Sprintf(`{"flagged":true,"categories":{%s},"category_scores":{%s},"category_applied_input_types":{"violence":["text"]}}`,
				strings.Join(cats, ","), strings.Join(scores, ","))
			results := []string{result}
			if inputs, ok := req["input"].([]any); ok {
				results = slices.Repeat(results, len(inputs))
			}
			fmt.Fprintf(w, `{"id":"modr-up","model":%q,"results":[%s]}`, req["model"], strings.Join(results, ","))
		case strings.HasSuffix(r.URL.Path, ":batchEmbedContents"):
			reqs, _ := req["requests"].([]any)
			var items []string
			for i := range reqs {
				items = append(items, `{"values":`+vectorJSON(upstreamVectors[i])+`}`)
			}
			fmt.Fprintf(w, `{"embeddings":[%s]}`, strings.Join(items, ","))
		case strings.HasSuffix(r.URL.Path, ":countTokens"):
			contents, _ := req["contents"].([]any)
			fmt.Fprintf(w, `{"totalTokens":%d}`, 5*len(contents))
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"error":{"message":"no such path","type":"invalid_request_error"}}`)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

func embeddingModel(name, routes string) string {
	return fmt.Sprintf("\n\t\tmodel %s {%s\n\t\t}", name, routes)
}

func embeddingRoute(provider, upstream, price string) string {
	return fmt.Sprintf("\n\t\t\troute %s %s {\n\t\t\t\t%s\n\t\t\t}", provider, upstream, price)
}

func TestEmbeddingsAndModerations(t *testing.T) {
	oa, oaCalls := newFakeEmbeddings(t, false)
	floaty, _ := newFakeEmbeddings(t, true)
	ge, geCalls := newFakeEmbeddings(t, false)
	down := newScripted(t, func(int) behaviour { return upstreamError(503, "server_error", "", "unavailable", nil) })
	cfg := providerBlock("oa", oa.URL) + providerBlock("floaty", floaty.URL) + resilientProvider("down", down.URL, "retries 0") +
		fmt.Sprintf(`
		provider ge {
			type gemini
			base_url %s/v1beta
			api_key gemini-upstream-secret
		}
		provider an {
			type anthropic
			base_url %s
			api_key sk-ant-upstream-secret
		}
		provider mk {
			type mock
		}`, ge.URL, oa.URL) +
		embeddingModel("emb-openai", embeddingRoute("oa", "text-embedding-3-small", "input 0.02")) +
		embeddingModel("emb-floaty", embeddingRoute("floaty", "nomic-embed", "input 0.02")) +
		embeddingModel("emb-gemini", embeddingRoute("ge", "gemini-embedding-001", "input 0.15")) +
		embeddingModel("emb-fallback", embeddingRoute("down", "x", "input 0.02")+embeddingRoute("oa", "text-embedding-3-small", "input 0.02")) +
		embeddingModel("emb-mixed", embeddingRoute("an", "claude", "input 1")+embeddingRoute("mk", "mock-embed", "input 0.10")) +
		embeddingModel("chat-only", embeddingRoute("an", "claude", "input 1\n\t\t\t\toutput 1")) +
		embeddingModel("omni-moderation-latest", embeddingRoute("oa", "omni-moderation-latest", "request 0.001")) +
		embeddingModel("mod-mock:free", embeddingRoute("mk", "mock-moderation", "request 0.001")) +
		embeddingModel("mod-by-tokens", embeddingRoute("oa", "omni-moderation-latest", "input 1"))
	env := startGateway(t, cfg, "")
	wsID, key := env.workspace(5 * usd)
	ctx := context.Background()
	oc := env.openai(key)
	inputs := []string{"The food was delicious.", "Ünïcode and / slashes"}

	checkCharge := func(t *testing.T, genID string, usage map[string]any, dimension string, quantity int64, nanos int64) {
		t.Helper()
		gen := env.generation(wsID, genID)
		if gen.CostNanos != nanos || len(gen.CostLines) != 1 || gen.CostLines[0].Dimension != dimension || gen.CostLines[0].Quantity != quantity {
			t.Fatalf("generation cost %d %+v, want %d for %d %s", gen.CostNanos, gen.CostLines, nanos, quantity, dimension)
		}
		if fmt.Sprint(usage["cost_nanos"]) != fmt.Sprint(nanos) {
			t.Fatalf("usage shows cost_nanos %v, charged %d", usage["cost_nanos"], nanos)
		}
	}
	rawUsage := func(t *testing.T, raw string) map[string]any {
		t.Helper()
		var v struct {
			Usage map[string]any `json:"usage"`
		}
		dec := json.NewDecoder(strings.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		return v.Usage
	}

	for _, tc := range []struct {
		model  string
		tokens int64 // billed input tokens for the two inputs
		price  int64 // nanos per token
	}{
		{"emb-openai", 14, 20}, {"emb-floaty", 14, 20}, {"emb-gemini", 10, 150}, {"emb-fallback", 14, 20},
	} {
		for _, enc := range []openai.EmbeddingNewParamsEncodingFormat{"", openai.EmbeddingNewParamsEncodingFormatFloat, openai.EmbeddingNewParamsEncodingFormatBase64} {
			t.Run(tc.model+"/"+string(enc), func(t *testing.T) {
				var httpResp *http.Response
				resp, err := oc.Embeddings.New(ctx, openai.EmbeddingNewParams{
					Model: tc.model, EncodingFormat: enc,
					Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: inputs},
				}, option.WithResponseInto(&httpResp))
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.Data) != len(inputs) {
					t.Fatalf("%d embeddings", len(resp.Data))
				}
				for i, d := range resp.Data {
					want := upstreamVectors[i]
					if enc == openai.EmbeddingNewParamsEncodingFormatBase64 {
						var s string
						if err := json.Unmarshal([]byte(d.JSON.Embedding.Raw()), &s); err != nil || s != float32Base64(want) {
							t.Fatalf("embedding %d is %s, want base64 %s", i, d.JSON.Embedding.Raw(), float32Base64(want))
						}
						continue
					}
					if d.JSON.Embedding.Raw() != vectorJSON(want) {
						t.Fatalf("embedding %d is %s, want the upstream's %s", i, d.JSON.Embedding.Raw(), vectorJSON(want))
					}
				}
				if resp.Usage.PromptTokens != tc.tokens {
					t.Fatalf("usage %s", resp.Usage.RawJSON())
				}
				checkCharge(t, httpResp.Header.Get("X-Generation-Id"), rawUsage(t, resp.RawJSON()), "input", tc.tokens, tc.tokens*tc.price)
			})
		}
	}
	if n := geCalls.Load(); n != 6 {
		t.Fatalf("gemini upstream called %d times, want an embedding and a token count per request", n)
	}

	t.Run("mock and a route without the capability", func(t *testing.T) {
		var httpResp *http.Response
		resp, err := oc.Embeddings.New(ctx, openai.EmbeddingNewParams{
			Model: "emb-mixed", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hello there")},
			Dimensions: openai.Int(4),
		}, option.WithResponseInto(&httpResp))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Data) != 1 || len(resp.Data[0].Embedding) != 4 || resp.Usage.PromptTokens != 3 {
			t.Fatalf("%s", resp.RawJSON())
		}
		gen := env.generation(wsID, httpResp.Header.Get("X-Generation-Id"))
		if gen.Provider != "mk" || len(gen.Attempts) != 1 || gen.CostNanos != 300 {
			t.Fatalf("generation %+v", gen)
		}
	})

	t.Run("no route serves embeddings", func(t *testing.T) {
		status, _, body := env.post(key, "/embeddings", `{"model":"chat-only","input":"hi"}`)
		var v struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
			Candidates struct {
				Dropped []string `json:"droppedUnsupportedEndpoint"`
			} `json:"provider_candidate_diagnostics"`
		}
		_ = json.Unmarshal(body, &v)
		if status != 400 || v.Error.Code != "unsupported_model_or_endpoint" || len(v.Candidates.Dropped) != 1 || v.Candidates.Dropped[0] != "an" {
			t.Fatalf("%d %s", status, body)
		}
	})

	t.Run("invalid input", func(t *testing.T) {
		for _, body := range []string{`{"model":"emb-openai"}`, `{"model":"emb-openai","input":""}`, `{"model":"emb-openai","input":[1.5]}`,
			`{"model":"emb-openai","input":"x","encoding_format":"int8"}`, `{"model":"emb-openai","input":"x","dimensions":0}`, `{"input":"x"}`} {
			if status, _, out := env.post(key, "/embeddings", body); status != 400 || !strings.Contains(string(out), `"param"`) {
				t.Fatalf("%s: %d %s", body, status, out)
			}
		}
	})

	t.Run("moderations", func(t *testing.T) {
		var httpResp *http.Response
		resp, err := oc.Moderations.New(ctx, openai.ModerationNewParams{
			Input: openai.ModerationNewParamsInputUnion{OfString: openai.String("I will hurt you")},
		}, option.WithResponseInto(&httpResp))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Results) != 1 || !resp.Results[0].Flagged || !resp.Results[0].Categories.Violence || resp.Model != "omni-moderation-latest" {
			t.Fatalf("%s", resp.RawJSON())
		}
		checkCharge(t, httpResp.Header.Get("X-Generation-Id"), rawUsage(t, resp.RawJSON()), "request", 1, 1_000_000)
		// Each input is a check, billed as a request.
		resp, err = oc.Moderations.New(ctx, openai.ModerationNewParams{
			Input: openai.ModerationNewParamsInputUnion{OfStringArray: []string{"one", "two", "three"}},
		}, option.WithResponseInto(&httpResp))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Results) != 3 {
			t.Fatalf("%s", resp.RawJSON())
		}
		checkCharge(t, httpResp.Header.Get("X-Generation-Id"), rawUsage(t, resp.RawJSON()), "request", 3, 3_000_000)

		resp, err = oc.Moderations.New(ctx, openai.ModerationNewParams{
			Model: "mod-mock:free",
			Input: openai.ModerationNewParamsInputUnion{OfModerationMultiModalArray: []openai.ModerationMultiModalInputUnionParam{
				{OfText: &openai.ModerationTextInputParam{Text: "a calm sentence"}},
				{OfText: &openai.ModerationTextInputParam{Text: "mock:flag:hate"}},
				{OfImageURL: &openai.ModerationImageURLInputParam{ImageURL: openai.ModerationImageURLInputImageURLParam{URL: "https://example.com/a.png"}}},
			}},
		}, option.WithResponseInto(&httpResp))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Results) != 3 || resp.Results[0].Flagged || !resp.Results[1].Flagged || !resp.Results[1].Categories.Hate || resp.Results[2].Flagged {
			t.Fatalf("%s", resp.RawJSON())
		}
		if gen := env.generation(wsID, httpResp.Header.Get("X-Generation-Id")); gen.CostNanos != 0 {
			t.Fatalf("a free model charged %d", gen.CostNanos)
		}
		if status, _, out := env.post(key, "/moderation", `{"input":"legacy alias"}`); status != 200 || !strings.Contains(string(out), `"results"`) {
			t.Fatalf("POST /moderation: %d %s", status, out)
		}
		// A moderation reports no tokens: a route priced by them could only charge 0.
		before := oaCalls.Load()
		if status, _, out := env.post(key, "/moderations", `{"model":"mod-by-tokens","input":"hi"}`); status != 400 || !strings.Contains(string(out), "bills it by input") || !strings.Contains(string(out), "unsupported_model_or_endpoint") {
			t.Fatalf("a moderation priced by tokens: %d %s", status, out)
		}
		if oaCalls.Load() != before {
			t.Fatal("the upstream was called for a request that could not be billed")
		}
	})

	t.Run("402 below 1.00 USD", func(t *testing.T) {
		_, poor := env.workspace(usd / 2)
		status, _, body := env.post(poor, "/embeddings", `{"model":"emb-openai","input":"hi"}`)
		if status != http.StatusPaymentRequired || !strings.Contains(string(body), "insufficient_funds") {
			t.Fatalf("%d %s", status, body)
		}
		if status, _, body := env.post(poor, "/moderations", `{"model":"mod-mock:free","input":"hi"}`); status != 200 {
			t.Fatalf("a free moderation model with 0.50 USD: %d %s", status, body)
		}
	})
}
