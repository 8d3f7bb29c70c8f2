package gemini

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// embedRequest is one element of batchEmbedContents' requests.
type embedRequest struct {
	Model                string  `json:"model"`
	Content              Content `json:"content"`
	OutputDimensionality *int64  `json:"outputDimensionality,omitempty"`
}

// batchEmbedResponse is batchEmbedContents' answer: one embedding per request, in order.
type batchEmbedResponse struct {
	Embeddings []struct {
		Values json.RawMessage `json:"values"`
	} `json:"embeddings"`
}

// Embed sends the texts to batchEmbedContents, one request per input. Gemini reports no
// token usage for embeddings, so the texts' tokens are counted with countTokens, which the
// gateway bills; when the count fails the usage is left unknown and the gateway estimates it.
func (p *Provider) Embed(ctx context.Context, req *providers.EmbeddingRequest) (*providers.EmbeddingResponse, error) {
	if len(req.Tokens) > 0 {
		return nil, &providers.UpstreamError{Provider: p.name, Category: providers.CategoryInvalidRequest,
			Message: "Gemini embeddings take text inputs, not token arrays"}
	}
	model, err := modelPath(req.Model)
	if err != nil {
		return nil, &providers.UpstreamError{Provider: p.name, Category: providers.CategoryModelUnavailable, Message: err.Error(), Err: err}
	}
	reqs := make([]embedRequest, len(req.Inputs))
	contents := make([]Content, len(req.Inputs))
	for i, text := range req.Inputs {
		contents[i] = Content{Parts: []Part{{Text: text}}}
		reqs[i] = embedRequest{Model: model, Content: contents[i], OutputDimensionality: req.Dimensions}
	}
	body, err := json.Marshal(struct {
		Requests []embedRequest `json:"requests"`
	}{reqs})
	if err != nil {
		return nil, requestError(p.name, fmt.Errorf("encoding request: %w", err))
	}
	ans, err := p.up.CallAnswer(ctx, p.base+"/"+model+":batchEmbedContents", body)
	if err != nil {
		return nil, err
	}
	var r batchEmbedResponse
	if err := json.Unmarshal(ans.Body, &r); err != nil {
		return nil, p.up.Malformed(ans.Status, ans.Body, err)
	}
	if len(r.Embeddings) != len(req.Inputs) {
		return nil, p.up.Malformed(ans.Status, ans.Body, fmt.Errorf("%d embeddings for %d inputs", len(r.Embeddings), len(req.Inputs)))
	}
	out := &providers.EmbeddingResponse{Vectors: make([]json.RawMessage, len(r.Embeddings))}
	for i, e := range r.Embeddings {
		v := bytes.TrimSpace(e.Values)
		if len(v) == 0 || v[0] != '[' {
			return nil, p.up.Malformed(ans.Status, ans.Body, fmt.Errorf("embedding %d has no values", i))
		}
		out.Vectors[i] = append(json.RawMessage(nil), v...)
	}
	ans.Release()
	if n, err := p.countTokens(ctx, model, contents); err == nil {
		out.Usage, out.UsageKnown = providers.Usage{Input: n}, true
	}
	return out, nil
}

// countTokens asks the model how many tokens contents are.
func (p *Provider) countTokens(ctx context.Context, model string, contents []Content) (int64, error) {
	body, err := json.Marshal(struct {
		Contents []Content `json:"contents"`
	}{contents})
	if err != nil {
		return 0, err
	}
	ans, err := p.up.CallAnswer(ctx, p.base+"/"+model+":countTokens", body)
	if err != nil {
		return 0, err
	}
	defer ans.Release()
	var r struct {
		TotalTokens *int64 `json:"totalTokens"`
	}
	if err := json.Unmarshal(ans.Body, &r); err != nil || r.TotalTokens == nil || *r.TotalTokens < 0 {
		return 0, fmt.Errorf("countTokens answered %q", ans.Body)
	}
	return *r.TotalTokens, nil
}

var _ providers.Embedder = (*Provider)(nil)
