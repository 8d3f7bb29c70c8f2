package module

import (
	"net/http"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
)

// TestPricingEndToEnd: a price line of every dimension in a Caddyfile route reaches
// GET /pricing/models and POST /pricing/calculate, through the JSON configuration and the
// app's provisioning, to the nanodollar.
func TestPricingEndToEnd(t *testing.T) {
	env := startGateway(t, `
		provider mock {
			type mock
		}
		model omni {
			route mock omni-1 {
				input 0.15
				output 0.60
				input_audio_tokens 40
				output_audio_tokens 80
				image_input_tokens 10
				image_output_tokens 40
				input_characters 15
				input_audio_seconds 0.0001
				output_audio_seconds 0.0002
				image 0.04 size 1024x1024
				image 0.08 size 1024x1024 quality hd
				page 0.001
				output_video_seconds 0.10 resolution 720p
				request 0.001
			}
		}`, "")
	a := env.team(0)
	v := env.expect(200, http.MethodGet, a.std, "/pricing/models", "")
	var omni map[string]any
	for _, it := range v["data"].([]any) {
		if m := it.(map[string]any); m["id"] == "omni" {
			omni = m
		}
	}
	if omni == nil {
		t.Fatalf("no omni in %v", v)
	}
	nanos := omni["routes"].([]any)[0].(map[string]any)["pricing_nanos"].(map[string]any)
	want := map[string]float64{
		pricing.DimInput: 150_000_000, pricing.DimCachedInput: 150_000_000, pricing.DimCacheWrite: 150_000_000, pricing.DimOutput: 600_000_000,
		pricing.DimReasoning: 600_000_000, pricing.DimInputAudioTokens: 40_000_000_000, pricing.DimOutputAudioTokens: 80_000_000_000,
		pricing.DimImageInputTokens: 10_000_000_000, pricing.DimImageOutputTokens: 40_000_000_000, pricing.DimInputCharacters: 15_000_000_000,
		pricing.DimInputAudioSeconds: 100_000, pricing.DimOutputAudioSeconds: 200_000, pricing.DimPage: 1_000_000, pricing.DimRequest: 1_000_000,
	}
	for dim, n := range want {
		if nanos[dim] != n {
			t.Errorf("%s: %v, want %.0f", dim, nanos[dim], n)
		}
	}
	if imgs := nanos[pricing.DimImage].([]any); len(imgs) != 2 || imgs[1].(map[string]any)["quality"] != "hd" || imgs[1].(map[string]any)["nanos"] != float64(80_000_000) {
		t.Fatalf("images %v", imgs)
	}
	if vid := nanos[pricing.DimOutputVideoSeconds].([]any); len(vid) != 1 || vid[0].(map[string]any)["resolution"] != "720p" {
		t.Fatalf("video %v", vid)
	}

	v = env.expect(200, http.MethodPost, a.std, "/pricing/calculate", `{"model":"omni","usage":{"images":2,"size":"1024x1024","quality":"hd","input_characters":1000000}}`)
	if v["cost_nanos"] != float64(2*80_000_000+15_000_000_000+1_000_000) || len(v["cost_lines"].([]any)) != 3 {
		t.Fatalf("calculation %v", v)
	}
	env.expectError(400, "validation_error", "usage.size", http.MethodPost, a.std, "/pricing/calculate", `{"model":"omni","usage":{"images":1,"size":"512x512"}}`)
	env.expectError(400, "validation_error", "usage.resolution", http.MethodPost, a.std, "/pricing/calculate", `{"model":"omni","usage":{"output_video_seconds":4,"resolution":"1080p"}}`)
}
