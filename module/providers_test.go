package module

import (
	"context"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// TestProviderAdapter loads provider adapters from JSON, as the app does whatever the
// configuration's source: errors name what is wrong and never quote the adapter's options.
func TestProviderAdapter(t *testing.T) {
	const secret = "sk-do-not-print"
	for _, tc := range []struct {
		name        string
		adapter     string
		wantErr     string
		wantPrefill bool
	}{
		{name: "missing", wantErr: "adapter is required"},
		{name: "no type", adapter: `{"api_key":"` + secret + `"}`, wantErr: "type is required (anthropic, echo, gemini, media_fake, mock, ocr_wire or openai)"},
		{name: "unknown type", adapter: `{"type":"nope","api_key":"` + secret + `"}`,
			wantErr: "no module model_gateway.providers.nope in this build, whose types are anthropic, echo, gemini, media_fake, mock, ocr_wire and openai; add a provider type from another Go module with xcaddy build --with"},
		{name: "unknown option", adapter: `{"type":"mock","base_url":"http://a"}`, wantErr: `unknown field "base_url"`},
		{name: "bad base_url", adapter: `{"type":"openai","base_url":"localhost:8000"}`, wantErr: "must be an http or https URL"},
		{name: "bad api", adapter: `{"type":"openai","api":"completions"}`, wantErr: "want chat or responses"},
		{name: "negative timeout", adapter: `{"type":"gemini","timeout":-1}`, wantErr: "timeout must not be negative"},
		{name: "openai", adapter: `{"type":"openai","api_key":"` + secret + `"}`},
		{name: "anthropic", adapter: `{"type":"anthropic","version":"2023-06-01"}`, wantPrefill: true},
		{name: "gemini", adapter: `{"type":"gemini"}`},
		{name: "mock", adapter: `{"type":"mock","chunks":2}`, wantPrefill: true},
		{name: "third-party", adapter: `{"type":"echo","greeting":"hi"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
			defer cancel()
			pc := &ProviderConfig{AdapterRaw: []byte(tc.adapter)}
			if tc.adapter == "" {
				pc.AdapterRaw = nil
			}
			p, err := pc.build(ctx, "p")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), secret) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Name() != "p" || pc.prefill != tc.wantPrefill {
				t.Fatalf("name %q prefill %v", p.Name(), pc.prefill)
			}
		})
	}
}
