package catalog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
)

func TestEmbeddedCatalogue(t *testing.T) {
	c := Default()
	if c.Schema != SchemaVersion || c.Version == "" {
		t.Fatalf("schema %d version %q", c.Schema, c.Version)
	}
	perOrg := map[string]int{}
	for i := range c.Models {
		m := &c.Models[i]
		perOrg[m.Organisation]++
		if i > 0 && c.Models[i-1].ID >= m.ID {
			t.Errorf("models are not sorted by id: %s before %s", c.Models[i-1].ID, m.ID)
		}
		if !strings.HasPrefix(m.ID, m.Organisation+"/") {
			t.Errorf("%s: id does not start with its organisation %q", m.ID, m.Organisation)
		}
		if len(m.Prices()) == 0 {
			t.Errorf("%s has no price", m.ID)
		}
		p := m.TokenPrice()
		if m.HasEndpoint("chat") {
			if m.ContextLength == 0 || p.Input == 0 || p.Output == 0 {
				t.Errorf("%s: a chat model needs a context length and input and output prices", m.ID)
			}
			if p.CachedInput > p.Input || p.Output < p.Input/10 {
				t.Errorf("%s: implausible prices %+v", m.ID, p)
			}
		}
		for _, a := range m.Aliases {
			if got, ok := c.Lookup(a); !ok || got != m {
				t.Errorf("Lookup(%q) = %v, want %s", a, got, m.ID)
			}
		}
	}
	// The major providers the issue names, each with several models.
	for _, org := range []string{"openai", "anthropic", "google", "mistral", "meta", "deepseek", "xai"} {
		if _, ok := c.Organisation(org); !ok || perOrg[org] < 2 {
			t.Errorf("organisation %s: %d models", org, perOrg[org])
		}
	}
	for _, org := range c.Organisations {
		if perOrg[org.ID] == 0 {
			t.Errorf("organisation %s has no model", org.ID)
		}
	}
	// Every surface the discovery filter names has at least one model.
	for _, e := range Endpoints {
		found := false
		for i := range c.Models {
			found = found || c.Models[i].HasEndpoint(e)
		}
		if !found {
			t.Errorf("no model serves %s", e)
		}
	}
}

func TestLookupAndPrices(t *testing.T) {
	c := Default()
	m, ok := c.Lookup("gpt-4o-mini")
	if !ok || m.ID != "openai/gpt-4o-mini" {
		t.Fatalf("Lookup(gpt-4o-mini) = %v, %v", m, ok)
	}
	if byID, _ := c.Lookup("openai/gpt-4o-mini"); byID != m {
		t.Fatal("lookup by id and by alias differ")
	}
	want := pricing.Price{Input: 150_000_000, CachedInput: 75_000_000, CacheWrite: 150_000_000, Output: 600_000_000, Reasoning: 600_000_000}
	if got := m.TokenPrice(); got != want {
		t.Fatalf("TokenPrice = %+v, want %+v", got, want)
	}
	if _, ok := c.Lookup("no-such-model"); ok {
		t.Fatal("Lookup of an unknown name succeeded")
	}
	dalle, _ := c.Lookup("dall-e-3")
	if ps := dalle.Prices(); len(ps) != 1 || ps[0] != (Price{Dimension: "image", Unit: "image", Nanos: 40_000_000}) {
		t.Fatalf("dall-e-3 prices %+v", ps)
	}
}

func TestExtend(t *testing.T) {
	base := Default()
	overrides := `{
		"schema": 1,
		"version": "local-3",
		"organisations": [
			{"id": "acme", "name": "Acme Labs"},
			{"id": "openai", "url": "https://platform.openai.com"}
		],
		"models": [
			{"id": "openai/gpt-4o-mini", "aliases": ["gpt-4o-mini", "my-mini"], "pricing": {"input": "0.10"}},
			{"id": "acme/rocket-1", "organisation": "acme", "context_length": 32000,
			 "input_modalities": ["text"], "output_modalities": ["text"], "endpoints": ["chat"],
			 "pricing": {"input": "1", "output": "2"}}
		]
	}`
	c, err := base.Extend([]byte(overrides))
	if err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if c.Version != base.Version+"+local-3" {
		t.Errorf("version %q", c.Version)
	}
	m, ok := c.Lookup("my-mini")
	if !ok || m.ID != "openai/gpt-4o-mini" || m.ContextLength != 128000 || m.Name != "GPT-4o mini" {
		t.Fatalf("overridden model %+v", m)
	}
	if p := m.TokenPrice(); p.Input != 100_000_000 || p.CachedInput != 75_000_000 || p.Output != 600_000_000 {
		t.Errorf("overridden prices %+v: want only input changed", p)
	}
	if org, _ := c.Organisation("openai"); org.Name != "OpenAI" || org.URL != "https://platform.openai.com" {
		t.Errorf("overridden organisation %+v", org)
	}
	if r, ok := c.Lookup("acme/rocket-1"); !ok || r.Name != "rocket-1" {
		t.Errorf("added model %+v", r)
	}
	// The base is untouched.
	if bm, _ := base.Lookup("gpt-4o-mini"); bm.TokenPrice().Input != 150_000_000 {
		t.Error("Extend changed the base catalogue")
	}
	if _, ok := base.Lookup("my-mini"); ok {
		t.Error("Extend added an alias to the base catalogue")
	}

	path := filepath.Join(t.TempDir(), "catalog.json")
	if err := os.WriteFile(path, []byte(overrides), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := base.ExtendFile(path); err != nil {
		t.Errorf("ExtendFile: %v", err)
	}
	if _, err := base.ExtendFile(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("ExtendFile of a missing file succeeded")
	}
}

func TestInvalidCatalogues(t *testing.T) {
	model := func(extra string) string {
		return `{"schema":1,"version":"x","organisations":[{"id":"acme","name":"Acme"}],"models":[{"id":"acme/m","input_modalities":["text"],"output_modalities":["text"],"endpoints":["chat"]` + extra + `}]}`
	}
	tests := []struct {
		name, data, want string
	}{
		{"not json", `{`, "decoding"},
		{"unknown field", `{"schema":1,"version":"x","colour":"red"}`, "unknown field"},
		{"schema", `{"schema":2,"version":"x"}`, "schema 2"},
		{"no version", `{"schema":1}`, "version is required"},
		{"bad price", model(`,"pricing":{"input":"cheap"}`), "pricing input"},
		{"negative price", model(`,"pricing":{"input":"-1"}`), "pricing input"},
		{"unknown endpoint", strings.Replace(model(""), `["chat"]`, `["chat","telepathy"]`, 1), "telepathy"},
		{"no endpoints", strings.Replace(model(""), `"endpoints":["chat"]`, `"endpoints":[]`, 1), "endpoints must list"},
		{"unknown modality", strings.Replace(model(""), `"input_modalities":["text"]`, `"input_modalities":["smell"]`, 1), "smell"},
		{"bad id", strings.Replace(model(""), `"acme/m"`, `"m"`, 1), "<organisation>/<slug>"},
		{"unknown organisation", strings.Replace(model(""), `"acme/m"`, `"other/m"`, 1), `organisation "other"`},
		{"bad date", model(`,"release_date":"May 2025"`), "release_date"},
		{"negative context", model(`,"context_length":-1`), "negative"},
		{"alias clash", `{"schema":1,"version":"x","organisations":[{"id":"acme","name":"Acme"}],"models":[
			{"id":"acme/a","aliases":["x"],"input_modalities":["text"],"output_modalities":["text"],"endpoints":["chat"]},
			{"id":"acme/b","aliases":["x"],"input_modalities":["text"],"output_modalities":["text"],"endpoints":["chat"]}]}`, `name "x" already names`},
		{"duplicate id", `{"schema":1,"version":"x","organisations":[{"id":"acme","name":"Acme"}],"models":[
			{"id":"acme/a","input_modalities":["text"],"output_modalities":["text"],"endpoints":["chat"]},
			{"id":"acme/a","input_modalities":["text"],"output_modalities":["text"],"endpoints":["chat"]}]}`, "already names"},
		{"organisation without name", `{"schema":1,"version":"x","organisations":[{"id":"acme"}]}`, "name is required"},
		{"bad organisation id", `{"schema":1,"version":"x","organisations":[{"id":"Acme Inc","name":"A"}]}`, "lowercase"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse error = %v, want one containing %q", err, tc.want)
			}
		})
	}
	t.Run("override with an unknown organisation", func(t *testing.T) {
		_, err := Default().Extend([]byte(`{"schema":1,"version":"l","models":[{"id":"zz/m","input_modalities":["text"],"output_modalities":["text"],"endpoints":["chat"]}]}`))
		if err == nil || !strings.Contains(err.Error(), `organisation "zz"`) {
			t.Fatalf("Extend error = %v", err)
		}
	})
	t.Run("override with an incomplete new model", func(t *testing.T) {
		_, err := Default().Extend([]byte(`{"schema":1,"version":"l","models":[{"id":"openai/new-thing"}]}`))
		if err == nil || !strings.Contains(err.Error(), "must list") {
			t.Fatalf("Extend error = %v", err)
		}
	})
}
