package providers

import (
	"context"
	"encoding/json"
)

// A capability is what an endpoint family needs of a route's adapter. Each has one named
// interface here, which an adapter that has the capability implements (with an interface
// guard); routing drops the routes whose adapter lacks the capability of the endpoint asked.
// An adapter may instead accept the endpoint's own wire format as a Forwarder, which then
// serves the endpoint byte for byte. ChatProvider is the text capability. Speech,
// transcription, images, OCR, video, files and batches come next, each with its interface
// beside these.

// The wire formats of the non-text endpoints an adapter may forward as they are.
const (
	FormatOpenAIEmbeddings  WireFormat = "openai_embeddings"
	FormatOpenAIModerations WireFormat = "openai_moderations"
)

// Embedder computes embeddings from the neutral model.
type Embedder interface {
	Embed(ctx context.Context, req *EmbeddingRequest) (*EmbeddingResponse, error)
}

// EmbeddingRequest is the neutral embeddings request: texts, or token arrays for upstreams
// that take them.
type EmbeddingRequest struct {
	// Model is the upstream model id.
	Model  string
	Inputs []string
	// Tokens holds pre-tokenized inputs, which only OpenAI-wire upstreams accept; an adapter
	// without them refuses the request as invalid.
	Tokens [][]int64
	// Dimensions asks for shorter vectors; nil means the model's own size.
	Dimensions *int64
	User       string
}

// EmbeddingResponse holds one vector per input, in input order, each the upstream's JSON
// array of numbers as it came (so that a float answer is the upstream's to the digit).
type EmbeddingResponse struct {
	Vectors []json.RawMessage
	// Usage counts the input tokens billed; UsageKnown is false when the upstream reports
	// none and the adapter could not count them either.
	Usage      Usage
	UsageKnown bool
}

// Moderator classifies content against a moderation policy from the neutral model.
type Moderator interface {
	Moderate(ctx context.Context, req *ModerationRequest) (*ModerationResponse, error)
}

// ModerationRequest is the neutral moderation request: one result is expected per input.
type ModerationRequest struct {
	// Model is the upstream model id.
	Model  string
	Inputs []ModerationInput
}

// ModerationInput is a text or an image to classify.
type ModerationInput struct {
	Text     string
	ImageURL string
}

// ModerationResponse is one result per input.
type ModerationResponse struct {
	ID      string
	Results []ModerationResult
}

// ModerationResult is the verdict on one input, with OpenAI's category names
// ("harassment", "self-harm/intent"...).
type ModerationResult struct {
	Flagged                   bool                `json:"flagged"`
	Categories                map[string]bool     `json:"categories"`
	CategoryScores            map[string]float64  `json:"category_scores"`
	CategoryAppliedInputTypes map[string][]string `json:"category_applied_input_types"`
}

// ModerationCategories are OpenAI's moderation categories, the keys every result carries.
var ModerationCategories = []string{
	"harassment", "harassment/threatening", "hate", "hate/threatening", "illicit", "illicit/violent",
	"self-harm", "self-harm/instructions", "self-harm/intent", "sexual", "sexual/minors",
	"violence", "violence/graphic",
}
