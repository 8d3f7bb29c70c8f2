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
