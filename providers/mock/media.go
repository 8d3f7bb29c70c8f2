package mock

import (
	"context"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// EmbeddingDimensions is the size of the mock's vectors unless a request asks for fewer.
const EmbeddingDimensions = 8

// Embed answers a deterministic unit vector per input, derived from its text (or tokens), and
// four characters (or one token) a token of usage, after the latency.
func (p *Provider) Embed(ctx context.Context, req *providers.EmbeddingRequest) (*providers.EmbeddingResponse, error) {
	if err := p.delay(ctx); err != nil {
		return nil, err
	}
	dims := EmbeddingDimensions
	if req.Dimensions != nil && *req.Dimensions > 0 && *req.Dimensions < int64(dims) {
		dims = int(*req.Dimensions)
	}
	out := &providers.EmbeddingResponse{UsageKnown: true}
	vector := func(seed uint64) json.RawMessage {
		v := make([]float64, dims)
		var norm float64
		for i := range v {
			v[i] = float64(int64(splitmix(&seed)%2001)-1000) / 1000
			norm += v[i] * v[i]
		}
		b := []byte{'['}
		for i, x := range v {
			if i > 0 {
				b = append(b, ',')
			}
			if norm > 0 {
				x /= math.Sqrt(norm)
			}
			// float32 precision, as an embedding model answers.
			b = strconv.AppendFloat(b, float64(float32(x)), 'g', -1, 32)
		}
		return append(b, ']')
	}
	for _, text := range req.Inputs {
		out.Vectors = append(out.Vectors, vector(hash(text)))
		out.Usage.Input += int64(max(1, ceilDiv(utf8.RuneCountInString(text), 4)))
	}
	for _, tokens := range req.Tokens {
		var b strings.Builder
		for _, t := range tokens {
			b.WriteString(strconv.FormatInt(t, 10) + " ")
		}
		out.Vectors = append(out.Vectors, vector(hash(b.String())))
		out.Usage.Input += int64(max(1, len(tokens)))
	}
	return out, nil
}

// moderationTrigger flags an input that contains it, in the categories named after it.
const moderationTrigger = "mock:flag"

// Moderate flags an input whose text contains "mock:flag" (in "violence" and, with
// "mock:flag:<category>", in that category too) and nothing else, after the latency.
func (p *Provider) Moderate(ctx context.Context, req *providers.ModerationRequest) (*providers.ModerationResponse, error) {
	if err := p.delay(ctx); err != nil {
		return nil, err
	}
	out := &providers.ModerationResponse{ID: "modr-mock"}
	for _, in := range req.Inputs {
		r := providers.ModerationResult{
			Categories:                map[string]bool{},
			CategoryScores:            map[string]float64{},
			CategoryAppliedInputTypes: map[string][]string{},
		}
		kind := "text"
		if in.ImageURL != "" {
			kind = "image"
		}
		flagged := map[string]bool{}
		if i := strings.Index(in.Text, moderationTrigger); i >= 0 {
			flagged["violence"] = true
			if cat, ok := strings.CutPrefix(in.Text[i+len(moderationTrigger):], ":"); ok {
				flagged[strings.Fields(cat + " ")[0]] = true
			}
		}
		for _, c := range providers.ModerationCategories {
			r.Categories[c] = flagged[c]
			r.CategoryScores[c] = 0.0001
			r.CategoryAppliedInputTypes[c] = []string{}
			if flagged[c] {
				r.Flagged = true
				r.CategoryScores[c] = 0.98
				r.CategoryAppliedInputTypes[c] = []string{kind}
			}
		}
		out.Results = append(out.Results, r)
	}
	return out, nil
}

// delay waits for the configured latency unless ctx ends first.
func (p *Provider) delay(ctx context.Context) error {
	if p.cfg.Latency <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(p.cfg.Latency)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Interface guards.
var (
	_ providers.Embedder  = (*Provider)(nil)
	_ providers.Moderator = (*Provider)(nil)
)
