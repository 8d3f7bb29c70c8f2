package module

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"testing"

	"github.com/openai/openai-go/v3"
)

// TestModelsServeWhatDiscoveryLists: a model answers an endpoint family exactly when
// discovery lists it for it. A chat model routed to a provider that could embed is neither
// listed for embeddings nor forwarded an embedding request; a model whose provider cannot
// embed is refused as well; an embedding model unknown to the catalogue, priced by input
// tokens alone, is listed for embeddings and served.
func TestModelsServeWhatDiscoveryLists(t *testing.T) {
	oa, oaCalls := newFakeEmbeddings(t, false)
	cfg := providerBlock("oa", oa.URL) + fmt.Sprintf(`
		provider an {
			type anthropic
			base_url %s
			api_key sk-ant-upstream-secret
		}`, oa.URL) +
		embeddingModel("gpt-4o-mini", embeddingRoute("oa", "gpt-4o-mini", "input 0.15\n\t\t\t\toutput 0.60")) +
		embeddingModel("claude-embedder", embeddingRoute("an", "claude-embed", "input 0.02")) +
		embeddingModel("house-embedder", embeddingRoute("oa", "house-embed-v1", "input 0.02"))
	env := startGateway(t, cfg, "")
	_, key := env.workspace(5 * usd)
	oc := env.openai(key)

	v := env.expect(200, http.MethodGet, key, "/gateway/models?endpoints=embeddings", "")
	if got := itemIDs(v); !reflect.DeepEqual(got, []string{"house-embedder"}) {
		t.Fatalf("listed for embeddings: %v", got)
	}
	for _, tc := range []struct {
		model  string
		listed bool
	}{
		{"house-embedder", true},
		{"gpt-4o-mini", false},
		{"claude-embedder", false},
	} {
		t.Run(tc.model, func(t *testing.T) {
			before := oaCalls.Load()
			resp, err := oc.Embeddings.New(context.Background(), openai.EmbeddingNewParams{
				Model: tc.model, Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hello there")},
			})
			if tc.listed {
				if err != nil || len(resp.Data) != 1 || oaCalls.Load() != before+1 {
					t.Fatalf("served: %v %v", resp, err)
				}
				return
			}
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "unsupported_model_or_endpoint" || apiErr.Param != "model" {
				t.Fatalf("a model not listed for embeddings: %v", err)
			}
			if oaCalls.Load() != before {
				t.Fatal("the upstream was sent a request the model does not serve")
			}
		})
	}
}

// TestModelsMeLeavesOutModelsWithoutCredential: a provider whose api_key names an unset
// environment variable cannot answer, so GET /gateway/models/me leaves out the models that
// have no other route and names them with the reason; GET /gateway/models lists them all.
func TestModelsMeLeavesOutModelsWithoutCredential(t *testing.T) {
	up := newScripted(t, func(int) behaviour { return chatOK("should not be asked", 1, 1) })
	env := startGateway(t, unsetKeyProvider(t, "nokey", up.URL)+providerBlock("keyed", up.URL)+
		pricedModel("dark", pricedRoute("nokey", "x"))+
		pricedModel("half", pricedRoute("nokey", "x")+pricedRoute("keyed", "x")), "")
	_, key := env.workspace(5 * usd)
	me := env.expect(200, http.MethodGet, key, "/gateway/models/me", "")
	want := []any{map[string]any{"id": "dark", "reason": "credentials_not_configured"}}
	if got := itemIDs(me); !reflect.DeepEqual(got, []string{"half"}) || !reflect.DeepEqual(me["unavailable_models"], want) {
		t.Fatalf("models/me %v, unavailable %v", got, me["unavailable_models"])
	}
	if got := itemIDs(env.expect(200, http.MethodGet, key, "/gateway/models", "")); !reflect.DeepEqual(got, []string{"dark", "half"}) {
		t.Fatalf("configured models %v", got)
	}
	if n := up.calls.Load(); n != 0 {
		t.Fatalf("the upstream was called %d times", n)
	}
}

// unsetKeyProvider is the Caddyfile block of an OpenAI provider at baseURL whose api_key
// names an environment variable that is unset.
func unsetKeyProvider(t *testing.T, name, baseURL string) string {
	t.Setenv("GW_TEST_UNSET_PROVIDER_KEY", "")
	return fmt.Sprintf(`
		provider %s {
			type openai
			base_url %s/v1
			api_key {env.GW_TEST_UNSET_PROVIDER_KEY}
		}`, name, baseURL)
}
