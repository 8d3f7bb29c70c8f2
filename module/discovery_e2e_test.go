package module

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/modelgateway/caddy-modelgateway/internal/catalog"
)

// discoveryConfig offers a catalogue model with real prices, a model the catalogue does
// not know, and a free mock model.
func discoveryConfig(upstreamURL string) string {
	return providerBlock("primary", upstreamURL) + `
		model gpt-4o-mini {
			route primary gpt-4o-mini {
				input 1.10
				cached_input 0.275
				output 4.40
				max_output_tokens 2000
			}
		}
		model house-special {
			owned_by acme-labs
			route primary my-finetune {
				input 2
				output 3
			}
		}
		provider mock {
			type mock
		}
		model mock-1:free {
			route mock mock-1
		}`
}

func TestDiscoveryEndToEnd(t *testing.T) {
	up := newFakeOpenAI(t, chatUsage(1234, 234, 567, 67))
	env := startGateway(t, discoveryConfig(up.URL), "")
	a, b := env.team(5*usd), env.team(0)

	// Every discovery list answers both kinds of key of both teams alike.
	lists := []struct {
		path string
		want []string
	}{
		{"/gateway/models", []string{"gpt-4o-mini", "house-special", "mock-1:free"}},
		{"/gateway/models?endpoints=chat,embeddings", []string{"gpt-4o-mini", "house-special", "mock-1:free"}},
		// Free and unknown to the catalogue, the mock model is listed for all its adapter
		// serves.
		{"/gateway/models?endpoints=embeddings", []string{"mock-1:free"}},
		{"/gateway/models?organisation=openai", []string{"gpt-4o-mini"}},
		{"/providers", []string{"mock", "primary"}},
		{"/endpoints", []string{"chat", "embeddings", "moderations", "images", "audio", "video", "ocr", "music"}},
		{"/pricing/models", []string{"gpt-4o-mini", "house-special", "mock-1:free"}},
		{"/data/models?endpoints=ocr", []string{"mistral/mistral-ocr"}},
	}
	for _, l := range lists {
		for _, key := range []string{a.std, a.mgmt, b.std, b.mgmt} {
			v := env.expect(200, http.MethodGet, key, l.path, "")
			if got := itemIDs(v); !reflect.DeepEqual(got, l.want) || v["object"] != "list" {
				t.Fatalf("GET %s: %v, want %v", l.path, got, l.want)
			}
		}
	}

	v := env.expect(200, http.MethodGet, a.std, "/gateway/models", "")
	mini := findItem(t, v, "gpt-4o-mini")
	if mini["catalogue_id"] != "openai/gpt-4o-mini" || mini["context_length"] != float64(128000) ||
		mini["pricing_nanos"].(map[string]any)["cached_input"] != float64(275_000_000) {
		t.Fatalf("gpt-4o-mini %v", mini)
	}
	if house := findItem(t, v, "house-special"); house["organisation"] != "acme-labs" || house["catalogue_id"] != nil {
		t.Fatalf("house-special %v", house)
	}
	all := env.walkList(a.std, "/data/models", 7)
	if len(all) != len(catalog.Default().Models) {
		t.Fatalf("GET /data/models walked %d of %d", len(all), len(catalog.Default().Models))
	}
	orgs := env.expect(200, http.MethodGet, b.mgmt, "/organisations?limit=100", "")
	if acme := findItem(t, orgs, "acme-labs"); acme["gateway_model_count"] != float64(1) {
		t.Fatalf("acme-labs %v", acme)
	}
	eps := env.expect(200, http.MethodGet, a.std, "/endpoints", "")
	if chat := findItem(t, eps, "chat"); chat["available"] != true || chat["model_count"] != float64(3) {
		t.Fatalf("chat endpoint %v", chat)
	}

	// What the calling key can use: team b has no credit, so only the free model.
	me := env.expect(200, http.MethodGet, b.std, "/gateway/models/me", "")
	if got := itemIDs(me); !reflect.DeepEqual(got, []string{"mock-1:free"}) || me["paid_models_available"] != false {
		t.Fatalf("b's models %v", me)
	}
	if got := itemIDs(env.expect(200, http.MethodGet, a.std, "/gateway/models/me", "")); len(got) != 3 {
		t.Fatalf("a's models %v", got)
	}

	// The earlier listing's routes.
	client := env.openai(a.std)
	page, err := client.Models.List(context.Background())
	if err != nil || len(page.Data) != 3 {
		t.Fatalf("models.list: %v %v", page, err)
	}
	withEndpoints := env.expect(200, http.MethodGet, a.std, "/models?include_endpoints=true", "")
	if e := findItem(t, withEndpoints, "gpt-4o-mini")["endpoints"]; !reflect.DeepEqual(e, []any{"chat", "ocr"}) {
		t.Fatalf("include_endpoints %v", e)
	}
	if status, body := env.get("", "/health"); status != 200 || !strings.Contains(string(body), `"ok":true`) {
		t.Fatalf("health %d %s", status, body)
	}
	gen := env.chatGeneration(a.std, a.ws, "gpt-4o-mini")
	for _, path := range []string{"/generation", "/generations"} {
		if d := env.expect(200, http.MethodGet, a.std, path+"?id="+gen.ID, "")["data"].(map[string]any); d["id"] != gen.ID {
			t.Fatalf("%s: %v", path, d)
		}
		// Another team never sees it.
		env.expectError(404, "not_found", "", http.MethodGet, b.std, path+"?id="+gen.ID, "")
	}
	for _, path := range []string{"/moderations", "/moderation"} {
		env.expectError(400, "unsupported_model_or_endpoint", "model", http.MethodPost, a.std, path, `{"input":"hello"}`)
	}
	env.expectError(400, "validation_error", "endpoint", http.MethodPost, a.std, "/batches", `{"model":"m"}`)

	// Bad input, each with its precise code and param.
	bad := []struct {
		status            int
		code, param       string
		method, path, key string
		body              string
	}{
		{400, "validation_error", "endpoints", "GET", "/gateway/models?endpoints=telepathy", a.std, ""},
		{400, "validation_error", "organisation", "GET", "/data/models?organisation=nobody", a.mgmt, ""},
		{400, "validation_error", "limit", "GET", "/providers?limit=0", a.std, ""},
		{400, "validation_error", "limit", "GET", "/organisations?limit=many", a.std, ""},
		{400, "validation_error", "after", "GET", "/endpoints?after=nope", a.std, ""},
		{400, "validation_error", "include_endpoints", "GET", "/models?include_endpoints=perhaps", a.std, ""},
		{401, "unauthorised", "", "GET", "/gateway/models", "", ""},
		{401, "unauthorised", "", "GET", "/pricing/models", "gateway_v1_sk_aaaaaaaaaaaa_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", ""},
		{405, "method_not_allowed", "", "DELETE", "/gateway/models", a.mgmt, ""},
		{400, "model_required", "model", "POST", "/pricing/calculate", a.std, `{"usage":{}}`},
		{400, "unsupported_model_or_endpoint", "model", "POST", "/pricing/calculate", a.std, `{"model":"gpt-9","usage":{}}`},
		{400, "validation_error", "usage.tokens", "POST", "/pricing/calculate", a.std, `{"model":"gpt-4o-mini","usage":{"tokens":1}}`},
		{400, "invalid_json", "", "POST", "/pricing/calculate", a.std, `{"model":`},
	}
	for _, c := range bad {
		env.expectError(c.status, c.code, c.param, c.method, c.key, c.path, c.body)
	}
}

// TestPricingCalculateMatchesBilling makes a real request, then asks POST
// /pricing/calculate about the same usage, in both shapes it takes: the answer must be
// what the wallet was charged, to the nanodollar, line by line.
func TestPricingCalculateMatchesBilling(t *testing.T) {
	up := newFakeOpenAI(t, chatUsage(1234, 234, 567, 67))
	env := startGateway(t, discoveryConfig(up.URL), "")
	a := env.team(5 * usd)
	before := env.balance(a.ws).BalanceNanos

	gen := env.chatGeneration(a.std, a.ws, "gpt-4o-mini")
	charged := before - env.balance(a.ws).BalanceNanos
	if gen.CostNanos == 0 || gen.CostNanos != charged || gen.CacheReadTokens != 234 || gen.ReasoningTokens != 67 {
		t.Fatalf("generation %+v, charged %d", gen, charged)
	}
	record := env.expect(200, http.MethodGet, a.std, "/generations?id="+gen.ID, "")["data"].(map[string]any)
	usage, _ := json.Marshal(record["usage"])

	for name, body := range map[string]string{
		"the generation's counters": `{"model":"gpt-4o-mini","usage":` + string(usage) + `}`,
		"the upstream's usage": `{"model":"gpt-4o-mini","provider":"primary","usage":{"prompt_tokens":1234,"completion_tokens":567,"total_tokens":1801,
			"prompt_tokens_details":{"cached_tokens":234},"completion_tokens_details":{"reasoning_tokens":67}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			for _, key := range []string{a.std, a.mgmt} {
				v := env.expect(200, http.MethodPost, key, "/pricing/calculate", body)
				if v["cost_nanos"] != float64(gen.CostNanos) || v["cost"] != record["total_cost"] {
					t.Fatalf("calculated %v (%v), charged %d (%v)", v["cost_nanos"], v["cost"], gen.CostNanos, record["total_cost"])
				}
				lines, _ := json.Marshal(v["cost_lines"])
				billed, _ := json.Marshal(record["cost_lines"])
				if string(lines) != string(billed) {
					t.Fatalf("cost lines %s, billed %s", lines, billed)
				}
			}
		})
	}
	// Every dimension of the usage was priced: the test covers the cached and reasoning lines.
	if len(gen.CostLines) != 4 {
		t.Fatalf("cost lines %+v", gen.CostLines)
	}
}

// A model's endpoints line says what it serves where neither the catalogue nor its prices
// can: an embedding model priced by input tokens is listed as one, not as a chat model.
func TestModelEndpointsConfigured(t *testing.T) {
	up := newFakeOpenAI(t, chatUsage(10, 0, 5, 0))
	env := startGateway(t, providerBlock("primary", up.URL)+`
		model house-embed {
			endpoints embeddings
			route primary my-embedder {
				input 0.02
			}
		}
		model house-chat {
			route primary my-finetune {
				input 2
				output 3
			}
		}`, "")
	_, key := env.workspace(5 * usd)
	for path, want := range map[string][]string{
		"/gateway/models?endpoints=embeddings": {"house-embed"},
		"/gateway/models?endpoints=chat":       {"house-chat"},
	} {
		if got := itemIDs(env.expect(200, http.MethodGet, key, path, "")); !reflect.DeepEqual(got, want) {
			t.Fatalf("GET %s: %v, want %v", path, got, want)
		}
	}
	if e := findItem(t, env.expect(200, http.MethodGet, key, "/gateway/models", ""), "house-embed")["endpoints"]; !reflect.DeepEqual(e, []any{"embeddings"}) {
		t.Fatalf("house-embed endpoints %v", e)
	}
	cfgJSON, _, err := caddyconfig.GetAdapter("caddyfile").Adapt(caddyfile.Format([]byte(gatewayCaddyfile(freePort(t), filepath.Join(t.TempDir(), "g.db"),
		providerBlock("primary", up.URL)+"\n\t\tmodel m {\n\t\t\tendpoints speech\n\t\t\troute primary\n\t\t}", ""))), nil)
	if err != nil {
		t.Fatal(err)
	}
	var cfg caddy.Config
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	if err := caddy.Validate(&cfg); err == nil || !strings.Contains(err.Error(), `unknown family "speech"`) {
		t.Fatalf("an unknown family: %v", err)
	}
}
