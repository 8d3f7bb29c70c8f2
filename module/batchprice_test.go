package module

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// TestBatchCaddyfile: batch_api on the providers that have a batch API and a route's
// batch_discount_percent adapt to their JSON, and their wrong values are refused.
func TestBatchCaddyfile(t *testing.T) {
	runCaddyfileCases(t, []caddyfileCase{
		{name: "batch options", input: "model_gateway {\n provider oa {\n type openai\n base_url http://vllm:8000/v1\n batch_api on\n }\n provider an {\n type anthropic\n batch_api off\n }\n model m {\n route oa m {\n  input 2\n  batch_discount_percent 0\n }\n route an {\n  batch_discount_percent 100\n }\n }\n}",
			want: `{"providers":{"an":{"adapter":{"batch_api":false,"type":"anthropic"}},"oa":{"adapter":{"base_url":"http://vllm:8000/v1","batch_api":true,"type":"openai"}}},"models":[{"name":"m","routes":[{"provider":"oa","model":"m","pricing":{"input":"2","batch_discount_percent":0}},{"provider":"an","pricing":{"batch_discount_percent":100}}]}]}`},
		{name: "batch_api value", input: "model_gateway {\n provider oa {\n type openai\n batch_api yes\n }\n}", wantErr: `batch_api: want on or off, got "yes"`},
		{name: "batch_api twice", input: "model_gateway {\n provider an {\n type anthropic\n batch_api on\n batch_api off\n }\n}", wantErr: "batch_api already specified"},
		{name: "batch_api on another type", input: "model_gateway {\n provider g {\n type gemini\n batch_api on\n }\n}", wantErr: `unrecognized subdirective "batch_api"`},
		{name: "discount above 100", input: "model_gateway {\n model m {\n route p {\n  batch_discount_percent 150\n }\n }\n}", wantErr: `batch_discount_percent: want a whole number from 0 to 100, got "150"`},
		{name: "discount negative", input: "model_gateway {\n model m {\n route p {\n  batch_discount_percent -5\n }\n }\n}", wantErr: "from 0 to 100"},
		{name: "discount twice", input: "model_gateway {\n model m {\n route p {\n  batch_discount_percent 10\n  batch_discount_percent 20\n }\n }\n}", wantErr: "batch_discount_percent already specified"},
	}, func() caddyfile.Unmarshaler { return new(App) })
}

// TestRouteBatchDiscount: a route's batch price is 50% off by default when its provider
// runs batches natively (OpenAI's and Anthropic's own APIs, or batch_api on), the
// configured discount when one is set, and the interactive price on a provider whose
// batches the gateway runs itself.
func TestRouteBatchDiscount(t *testing.T) {
	ten := int64(10)
	for _, tc := range []struct {
		name      string
		adapter   string
		discount  *int64
		native    bool
		wantBatch int64 // the batch price of an input of $2 per million tokens
	}{
		{name: "openai's own API", adapter: `{"type":"openai","api_key":"k"}`, native: true, wantBatch: 1_000_000_000},
		{name: "compatible server", adapter: `{"type":"openai","base_url":"http://vllm:8000/v1"}`, wantBatch: 2_000_000_000},
		{name: "compatible server with batch_api", adapter: `{"type":"openai","base_url":"http://proxy:8000/v1","batch_api":true}`, native: true, wantBatch: 1_000_000_000},
		{name: "openai with batch_api off", adapter: `{"type":"openai","api_key":"k","batch_api":false}`, wantBatch: 2_000_000_000},
		{name: "anthropic's own API", adapter: `{"type":"anthropic","api_key":"k"}`, native: true, wantBatch: 1_000_000_000},
		{name: "anthropic-compatible server", adapter: `{"type":"anthropic","base_url":"http://claude-proxy"}`, wantBatch: 2_000_000_000},
		{name: "configured discount", adapter: `{"type":"anthropic","api_key":"k"}`, discount: &ten, native: true, wantBatch: 1_800_000_000},
		{name: "gemini", adapter: `{"type":"gemini","api_key":"k"}`, wantBatch: 2_000_000_000},
		{name: "mock", adapter: `{"type":"mock"}`, wantBatch: 2_000_000_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
			defer cancel()
			pc := &ProviderConfig{AdapterRaw: []byte(tc.adapter)}
			p, err := pc.build(ctx, "p")
			if err != nil {
				t.Fatal(err)
			}
			br, ok := p.(providers.BatchRunner)
			if native := ok && br.SupportsBatch("/v1/chat/completions"); native != tc.native {
				t.Fatalf("runs chat batches natively: %v, want %v", native, tc.native)
			}
			a := &App{
				Providers: map[string]*ProviderConfig{"p": pc},
				Models:    []*ModelConfig{{Name: "m", Routes: []*RouteConfig{{Provider: "p", Pricing: &PriceConfig{Input: "2", BatchDiscountPercent: tc.discount}}}}},
			}
			models, err := a.buildModels(map[string]providers.Provider{"p": p})
			if err != nil {
				t.Fatal(err)
			}
			price := models[0].Routes[0].Price
			if price.Input != 2_000_000_000 || price.Batch().Input != tc.wantBatch {
				t.Fatalf("interactive %d, batch %d, want batch %d", price.Input, price.Batch().Input, tc.wantBatch)
			}
		})
	}
}

// TestBatchesNativeDocCaddyfiles adapts the Caddyfile fragments of docs/batches-native.md, so
// that what operators copy from it loads.
func TestBatchesNativeDocCaddyfiles(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "docs", "batches-native.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeCaddyfiles(t, src)
	if len(blocks) == 0 {
		t.Fatal("docs/batches-native.md has no ```caddyfile block")
	}
	for _, b := range blocks {
		body := wrapFragment(b.body)
		if !b.fragment {
			body = b.body
		}
		if _, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(body), map[string]any{"filename": "block"}); err != nil || len(warnings) > 0 {
			t.Errorf("line %d: adapting:\n%s\n%v %v", b.line, body, err, warnings)
		}
	}
}
