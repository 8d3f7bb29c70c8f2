package module

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/modelgateway/caddy-modelgateway/providers"
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
		{name: "no type", adapter: `{"api_key":"` + secret + `"}`, wantErr: "type is required (anthropic, batch_fake, echo, elevenlabs, gemini, media_fake, mistral, mock or openai)"},
		{name: "unknown type", adapter: `{"type":"nope","api_key":"` + secret + `"}`,
			wantErr: "no module model_gateway.providers.nope in this build, whose types are anthropic, batch_fake, echo, elevenlabs, gemini, media_fake, mistral, mock and openai; add a provider type from another Go module with xcaddy build --with"},
		{name: "unknown option", adapter: `{"type":"mock","base_url":"http://a"}`, wantErr: `unknown field "base_url"`},
		{name: "bad base_url", adapter: `{"type":"openai","base_url":"localhost:8000"}`, wantErr: "must be an http or https URL"},
		{name: "bad api", adapter: `{"type":"openai","api":"completions"}`, wantErr: "want chat or responses"},
		{name: "negative timeout", adapter: `{"type":"gemini","timeout":-1}`, wantErr: "timeout must not be negative"},
		{name: "openai", adapter: `{"type":"openai","api_key":"` + secret + `"}`},
		{name: "anthropic", adapter: `{"type":"anthropic","version":"2023-06-01"}`, wantPrefill: true},
		{name: "gemini", adapter: `{"type":"gemini"}`},
		{name: "mistral", adapter: `{"type":"mistral","api_key":"` + secret + `","base_url":"https://eu.api.mistral.ai/v1","timeout":60000000000}`},
		{name: "mistral bad base_url", adapter: `{"type":"mistral","base_url":"api.mistral.ai"}`, wantErr: "must be an http or https URL"},
		{name: "mistral unknown option", adapter: `{"type":"mistral","api":"responses"}`, wantErr: `unknown field "api"`},
		{name: "mistral negative timeout", adapter: `{"type":"mistral","timeout":-1}`, wantErr: "timeout must not be negative"},
		{name: "elevenlabs", adapter: `{"type":"elevenlabs","api_key":"` + secret + `","stream_idle_timeout":5000000000}`},
		{name: "elevenlabs bad base_url", adapter: `{"type":"elevenlabs","api_key":"` + secret + `","base_url":"api.elevenlabs.io"}`, wantErr: "must be an http or https URL"},
		{name: "elevenlabs negative timeout", adapter: `{"type":"elevenlabs","timeout":-1}`, wantErr: "timeout must not be negative"},
		{name: "elevenlabs unknown option", adapter: `{"type":"elevenlabs","api":"chat"}`, wantErr: `unknown field "api"`},
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

// TestElevenLabsProviderCaddyfile: an elevenlabs provider written in a Caddyfile adapts as
// "caddy adapt" does, keeps its key as a placeholder until the configuration loads, and
// builds an adapter with the speech capabilities that calls the configured base URL with
// the key read from the environment.
func TestElevenLabsProviderCaddyfile(t *testing.T) {
	var gotKey, gotPath string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotKey, gotPath = r.Header.Get("xi-api-key"), r.URL.Path
		w.Header().Set("Content-Type", "audio/mpeg")
		_, _ = w.Write([]byte("ID3-audio"))
	}))
	defer upstream.Close()
	t.Setenv("TEST_ELEVENLABS_KEY", "sk_el_from_the_environment")
	cf := "{\n\tmodel_gateway {\n\t\tprovider el {\n\t\t\ttype elevenlabs\n\t\t\tapi_key {env.TEST_ELEVENLABS_KEY}\n" +
		"\t\t\tbase_url " + upstream.URL + "\n\t\t\ttimeout 1m\n\t\t\tstream_idle_timeout 5s\n\t\t\tretries 1\n" +
		"\t\t\ttransport http {\n\t\t\t\tdial_timeout 2s\n\t\t\t}\n\t\t}\n\t}\n}\n"
	cfgJSON, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), map[string]any{"filename": "Caddyfile"})
	if err != nil || len(warnings) > 0 {
		t.Fatalf("adapting: %v %v", err, warnings)
	}
	var cfg struct {
		Apps struct {
			ModelGateway struct {
				Providers map[string]*ProviderConfig `json:"providers"`
			} `json:"model_gateway"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	pc := cfg.Apps.ModelGateway.Providers["el"]
	if pc == nil || pc.Retries == nil || *pc.Retries != 1 || !strings.Contains(string(pc.AdapterRaw), `"api_key":"{env.TEST_ELEVENLABS_KEY}"`) {
		t.Fatalf("adapted to %s", cfgJSON)
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	p, err := pc.build(ctx, "el")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.(providers.Transcriber); !ok {
		t.Fatalf("%T is no Transcriber", p)
	}
	synth, ok := p.(providers.SpeechSynthesizer)
	if !ok {
		t.Fatalf("%T is no SpeechSynthesizer", p)
	}
	resp, err := synth.Synthesize(context.Background(), &providers.SpeechRequest{Model: "eleven_flash_v2_5", Input: "hi", Voice: "v1", Format: "mp3"})
	if err != nil {
		t.Fatal(err)
	}
	audio, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || string(audio) != "ID3-audio" {
		t.Fatalf("audio %q, %v", audio, err)
	}
	if gotKey != "sk_el_from_the_environment" || gotPath != "/v1/text-to-speech/v1/stream" {
		t.Fatalf("upstream saw key %q path %q", gotKey, gotPath)
	}
}
