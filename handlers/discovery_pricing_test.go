package handlers

import (
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// everyDimension is a price of every dimension, keyed ones with a price for any key and
// prices for some.
func everyDimension(t *testing.T) pricing.Price {
	t.Helper()
	p := pricing.Price{PerRequest: 1_000_000}
	for i, d := range pricing.Dimensions() {
		if !d.Keyed && d.Name != pricing.DimRequest {
			// Prices that no two dimensions share, and that round: 0.15 USD + i nanos per unit.
			if err := p.SetPerUnit(d.Name, 150_000_000+int64(i)+1); err != nil {
				t.Fatal(err)
			}
		}
	}
	p, err := p.WithImages(
		pricing.ImagePrice{Size: "1024x1024", Quality: "hd", Nanos: 80_000_000},
		pricing.ImagePrice{Size: "1024x1024", Nanos: 40_000_000},
		pricing.ImagePrice{Size: "1792x1024", Quality: "standard", Nanos: 80_000_001},
	)
	if err != nil {
		t.Fatal(err)
	}
	if p, err = p.WithVideoSeconds(pricing.VideoPrice{Resolution: "720p", Nanos: 100_000_000}, pricing.VideoPrice{Nanos: 300_000_000}); err != nil {
		t.Fatal(err)
	}
	return p
}

func newPricingGateway(t *testing.T) (*adminGateway, pricing.Price) {
	price := everyDimension(t)
	media := route("openai", "omni-1", "", "")
	media.Price = price
	free := media
	return newAdminGateway(t, []*Model{
		{Name: "omni", Routes: []Route{media, route("azure", "omni-1", "0.2", "0.8")}},
		{Name: "omni:free", Routes: []Route{free}},
	}, nil), price
}

// wantCost checks a price calculation's answer against lines and total, to the nanodollar.
func wantCost(t *testing.T, v map[string]any, lines []store.CostLine, total int64) {
	t.Helper()
	if v["cost_nanos"] != float64(total) || v["cost_usd"] != pricing.FormatUSD(total) {
		t.Fatalf("answer %v, want total %d", v, total)
	}
	got := v["cost_lines"].([]any)
	if len(got) != len(lines) {
		t.Fatalf("lines %v, want %+v", got, lines)
	}
	for i, l := range lines {
		g := got[i].(map[string]any)
		if g["dimension"] != l.Dimension || g["quantity"] != float64(l.Quantity) || g["unit_price_nanos"] != float64(l.UnitPriceNanos) || g["nanos"] != float64(l.Nanos) {
			t.Fatalf("line %d: %v, want %+v", i, g, l)
		}
	}
}

// TestPricingCalculateEveryDimension: POST /pricing/calculate prices each dimension with the
// arithmetic that bills, Price.Cost, to the nanodollar, and reads each dimension into its
// own line.
func TestPricingCalculateEveryDimension(t *testing.T) {
	a, price := newPricingGateway(t)
	_, std, _ := a.workspace(0)
	tests := []struct {
		dim   string
		usage string
		want  pricing.Usage
	}{
		{pricing.DimInput, `{"input_tokens":1234567}`, pricing.Usage{Input: 1234567}},
		{pricing.DimCachedInput, `{"cache_read_tokens":333}`, pricing.Usage{CachedInput: 333}},
		{pricing.DimCacheWrite, `{"cache_write_tokens":7}`, pricing.Usage{CacheWrite: 7}},
		{pricing.DimOutput, `{"output_tokens":1}`, pricing.Usage{Output: 1}},
		{pricing.DimReasoning, `{"reasoning_tokens":999}`, pricing.Usage{Reasoning: 999}},
		{pricing.DimInputAudioTokens, `{"input_audio_tokens":1500}`, pricing.Usage{InputAudioTokens: 1500}},
		{pricing.DimOutputAudioTokens, `{"output_audio_tokens":2}`, pricing.Usage{OutputAudioTokens: 2}},
		{pricing.DimImageInputTokens, `{"image_input_tokens":323}`, pricing.Usage{ImageInputTokens: 323}},
		{pricing.DimImageOutputTokens, `{"image_output_tokens":4160}`, pricing.Usage{ImageOutputTokens: 4160}},
		{pricing.DimInputCharacters, `{"input_characters":4096}`, pricing.Usage{InputCharacters: 4096}},
		{pricing.DimInputAudioSeconds, `{"input_audio_seconds":61.25}`, pricing.Usage{InputAudio: 61250 * time.Millisecond}},
		{pricing.DimOutputAudioSeconds, `{"output_audio_seconds":3}`, pricing.Usage{OutputAudio: 3 * time.Second}},
		{pricing.DimImage, `{"images":2,"size":"1024x1024","quality":"hd"}`, pricing.Usage{Images: 2, ImageSize: "1024x1024", ImageQuality: "hd"}},
		{pricing.DimImage, `{"images":3,"size":"1024x1024"}`, pricing.Usage{Images: 3, ImageSize: "1024x1024"}},
		{pricing.DimImage, `{"images":1,"size":"1792x1024","quality":"standard"}`, pricing.Usage{Images: 1, ImageSize: "1792x1024", ImageQuality: "standard"}},
		{pricing.DimPage, `{"pages":42}`, pricing.Usage{Pages: 42}},
		{pricing.DimOutputVideoSeconds, `{"output_video_seconds":8,"resolution":"720p"}`, pricing.Usage{OutputVideo: 8 * time.Second, VideoResolution: "720p"}},
		{pricing.DimOutputVideoSeconds, `{"output_video_seconds":4.5,"resolution":"1080p"}`, pricing.Usage{OutputVideo: 4500 * time.Millisecond, VideoResolution: "1080p"}},
		{pricing.DimRequest, `{"requests":3}`, pricing.Usage{Requests: 3}},
	}
	covered := map[string]bool{}
	for _, tc := range tests {
		t.Run(tc.dim, func(t *testing.T) {
			v := a.mustDo(200, http.MethodPost, "/pricing/calculate", std, `{"model":"omni","usage":`+tc.usage+`}`)
			lines, total, err := price.Cost(tc.want)
			if err != nil {
				t.Fatal(err)
			}
			if v["free"] != false {
				t.Fatalf("answer %v", v)
			}
			wantCost(t, v, lines, total)
			// The dimension was read: it has a line that costs money (the request fee aside).
			if lines[0].Dimension != tc.dim || lines[0].Nanos <= 0 {
				t.Fatalf("lines %+v, want one for %s first", lines, tc.dim)
			}
			covered[tc.dim] = true
		})
	}
	for _, d := range pricing.Dimensions() {
		if !covered[d.Name] {
			t.Errorf("no case prices %s", d.Name)
		}
	}

	// Every dimension at once is the sum of each.
	all := `{"input_tokens":10,"cache_read_tokens":10,"cache_write_tokens":10,"output_tokens":10,"reasoning_tokens":10,"input_audio_tokens":10,` +
		`"output_audio_tokens":10,"image_input_tokens":10,"image_output_tokens":10,"input_characters":10,"input_audio_seconds":0.5,` +
		`"output_audio_seconds":1.5,"images":1,"size":"1024x1024","quality":"HD","pages":1,"output_video_seconds":1,"resolution":"720P","requests":1}`
	v := a.mustDo(200, http.MethodPost, "/pricing/calculate", std, `{"model":"omni","usage":`+all+`}`)
	u := pricing.Usage{Input: 10, CachedInput: 10, CacheWrite: 10, Output: 10, Reasoning: 10, InputAudioTokens: 10, OutputAudioTokens: 10,
		ImageInputTokens: 10, ImageOutputTokens: 10, InputCharacters: 10, InputAudio: 500 * time.Millisecond, OutputAudio: 1500 * time.Millisecond,
		Images: 1, ImageSize: "1024x1024", ImageQuality: "HD", Pages: 1, OutputVideo: time.Second, VideoResolution: "720P", Requests: 1}
	lines, total, _ := price.Cost(u)
	if v["cost_nanos"] != float64(total) || len(v["cost_lines"].([]any)) != len(pricing.Dimensions()) || len(lines) != len(pricing.Dimensions()) {
		t.Fatalf("every dimension: %v, want %d", v, total)
	}
	if uv := v["usage"].(map[string]any); uv["input_audio_seconds"] != 0.5 || uv["size"] != "1024x1024" || uv["images"] != float64(1) || uv["prompt_tokens"] != float64(50) {
		t.Fatalf("usage %v", uv)
	}

	// A free model is charged nothing, whatever its route's prices, as billing charges it;
	// and keys its route does not price are no reason to refuse it.
	v = a.mustDo(200, http.MethodPost, "/pricing/calculate", std, `{"model":"omni:free","usage":`+all+`}`)
	if v["cost_nanos"] != float64(0) || v["free"] != true {
		t.Fatalf("free model %v", v)
	}
	v = a.mustDo(200, http.MethodPost, "/pricing/calculate", std, `{"model":"omni:free","usage":{"images":1,"size":"256x256"}}`)
	if v["cost_nanos"] != float64(0) {
		t.Fatalf("free model, unpriced size: %v", v)
	}
	// Another route, another price: tokens only, its images free.
	v = a.mustDo(200, http.MethodPost, "/pricing/calculate", std, `{"model":"omni","provider":"azure","usage":{"images":1,"size":"256x256","input_tokens":1000000}}`)
	if v["cost_nanos"] != float64(200_000_000) || v["provider"] != "azure" {
		t.Fatalf("azure route %v", v)
	}
}

// TestPricingCalculateRefusals: a usage the route cannot price is refused with the key at
// fault, never priced 0; so is a quantity that is not one.
func TestPricingCalculateRefusals(t *testing.T) {
	a, _ := newPricingGateway(t)
	_, std, _ := a.workspace(0)
	for _, b := range []struct {
		name, usage, param string
	}{
		{"unpriced size", `{"images":1,"size":"256x256"}`, "usage.size"},
		{"unpriced quality of a size", `{"images":1,"size":"1792x1024","quality":"hd"}`, "usage.size"},
		{"auto size", `{"images":1,"size":"auto"}`, "usage.size"},
		{"no size", `{"images":1}`, "usage.size"},
		{"negative images", `{"images":-1,"size":"1024x1024"}`, "usage.images"},
		{"size not a string", `{"images":1,"size":1024}`, "usage.size"},
		{"negative seconds", `{"input_audio_seconds":-1}`, "usage.input_audio_seconds"},
		{"seconds as a string", `{"output_video_seconds":"8"}`, "usage.output_video_seconds"},
		{"seconds in exponent form", `{"output_audio_seconds":1e3}`, "usage.output_audio_seconds"},
		{"nanosecond precision at most", `{"input_audio_seconds":0.0000000001}`, "usage.input_audio_seconds"},
		{"fraction of a page", `{"pages":1.5}`, "usage.pages"},
		{"chat usage with a dimension", `{"prompt_tokens":5,"images":1}`, "usage.images"},
		{"unknown", `{"image":1}`, "usage.image"},
	} {
		t.Run(b.name, func(t *testing.T) {
			status, v := a.do(http.MethodPost, "/pricing/calculate", std, `{"model":"omni","usage":`+b.usage+`}`)
			wantError(t, b.name, status, v, 400, CodeValidation, b.param)
		})
	}
	// A resolution no price names takes the price for any resolution.
	v := a.mustDo(200, http.MethodPost, "/pricing/calculate", std, `{"model":"omni","usage":{"output_video_seconds":1,"resolution":"4k"}}`)
	if v["cost_nanos"] != float64(300_000_000+1_000_000) {
		t.Fatalf("any resolution: %v", v)
	}
}

// TestPricingModelsEveryDimension: GET /pricing/models lists every dimension of every route,
// in USD with its unit and in nanodollars by dimension name, the keyed ones as lists.
func TestPricingModelsEveryDimension(t *testing.T) {
	a, price := newPricingGateway(t)
	_, std, _ := a.workspace(0)
	v := a.mustDo(200, http.MethodGet, "/pricing/models", std, "")
	omni := item(t, v, "omni")
	routes := omni["routes"].([]any)
	first, second := routes[0].(map[string]any), routes[1].(map[string]any)
	nanos, usd := first["pricing_nanos"].(map[string]any), first["pricing"].(map[string]any)
	for _, d := range pricing.Dimensions() {
		n, ok := nanos[d.Name]
		if !ok {
			t.Errorf("pricing_nanos has no %s: %v", d.Name, nanos)
			continue
		}
		if _, ok := usd[priceViewKeys[d.Name]]; !ok || priceViewKeys[d.Name] == "" {
			t.Errorf("pricing has no %s: %v", d.Name, usd)
		}
		if !d.Keyed && n != float64(price.PerUnit(d.Name)) {
			t.Errorf("%s: %v, want %d", d.Name, n, price.PerUnit(d.Name))
		}
		if _, ok := second["pricing_nanos"].(map[string]any)[d.Name]; !ok {
			t.Errorf("the second route's pricing_nanos has no %s", d.Name)
		}
	}
	if len(usd) != len(pricing.Dimensions())+1 || usd["currency"] != "USD" {
		t.Fatalf("pricing %v", usd)
	}
	wantImages := []any{
		map[string]any{"size": "1024x1024", "quality": "hd", "nanos": float64(80_000_000)},
		map[string]any{"size": "1024x1024", "quality": nil, "nanos": float64(40_000_000)},
		map[string]any{"size": "1792x1024", "quality": "standard", "nanos": float64(80_000_001)},
	}
	if !reflect.DeepEqual(nanos[pricing.DimImage], wantImages) {
		t.Fatalf("images %v", nanos[pricing.DimImage])
	}
	wantVideo := []any{map[string]any{"resolution": "720p", "price": 0.1}, map[string]any{"resolution": nil, "price": 0.3}}
	if !reflect.DeepEqual(usd["output_video_per_second"], wantVideo) || usd["per_request"] != 0.001 || usd["input_audio_per_second"] != 0.150000011 {
		t.Fatalf("pricing %v", usd)
	}
	// A route that prices no image lists none.
	if imgs := second["pricing_nanos"].(map[string]any)[pricing.DimImage]; !reflect.DeepEqual(imgs, []any{}) {
		t.Fatalf("second route images %v", imgs)
	}
	// The model's own pricing is its first route's.
	if !reflect.DeepEqual(omni["pricing_nanos"], nanos) {
		t.Fatalf("model pricing %v", omni["pricing_nanos"])
	}
}
