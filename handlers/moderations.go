package handlers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/openai"
)

var moderationsCapability = capability{
	endpoint: "/moderations", format: providers.FormatOpenAIModerations, meters: []string{pricing.DimRequest},
	neutral: func(p providers.Provider) bool { _, ok := p.(providers.Moderator); return ok },
}

// DefaultModerationModel is the model of a moderation request that names none, as OpenAI's.
const DefaultModerationModel = "omni-moderation-latest"

// parseModerations validates an OpenAI moderation request: input as a string, an array of
// strings, or an array of text and image_url parts.
func parseModerations(body []byte) (model string, inputs []providers.ModerationInput, meta bool, apiErr *APIError) {
	var raw struct {
		Model *string         `json:"model"`
		Input json.RawMessage `json:"input"`
		Meta  *bool           `json:"meta"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return "", nil, false, badField(CodeInvalidJSON, "", "the request body must be a JSON object with the documented field types: "+err.Error())
	}
	model = DefaultModerationModel
	if raw.Model != nil && *raw.Model != "" {
		model = *raw.Model
	}
	meta = raw.Meta != nil && *raw.Meta
	invalid := badField(CodeValidation, "input", `input must be a non-empty string, an array of strings, or an array of {"type":"text","text"} and {"type":"image_url","image_url":{"url"}} parts`)
	in := bytes.TrimSpace(raw.Input)
	switch {
	case len(in) == 0 || rawjson.IsNull(in):
		return "", nil, false, badField(CodeValidation, "input", "input is required")
	case in[0] == '"':
		var s string
		if json.Unmarshal(in, &s) != nil || s == "" {
			return "", nil, false, invalid
		}
		return model, []providers.ModerationInput{{Text: s}}, meta, nil
	case in[0] != '[':
		return "", nil, false, invalid
	}
	var items []json.RawMessage
	if json.Unmarshal(in, &items) != nil || len(items) == 0 {
		return "", nil, false, invalid
	}
	for _, item := range items {
		var s string
		if json.Unmarshal(item, &s) == nil {
			inputs = append(inputs, providers.ModerationInput{Text: s})
			continue
		}
		var part struct {
			Type     string  `json:"type"`
			Text     *string `json:"text"`
			ImageURL *struct {
				URL string `json:"url"`
			} `json:"image_url"`
		}
		if json.Unmarshal(item, &part) != nil {
			return "", nil, false, invalid
		}
		switch {
		case part.Type == "text" && part.Text != nil:
			inputs = append(inputs, providers.ModerationInput{Text: *part.Text})
		case part.Type == "image_url" && part.ImageURL != nil && part.ImageURL.URL != "":
			inputs = append(inputs, providers.ModerationInput{ImageURL: part.ImageURL.URL})
		default:
			return "", nil, false, invalid
		}
	}
	return model, inputs, meta, nil
}

// moderations serves POST /moderations (and the earlier POST /moderation).
func (g *Gateway) moderations(w http.ResponseWriter, r *http.Request, caller *Caller) error {
	body, apiErr := g.readBody(w, r)
	if apiErr != nil {
		return apiErr
	}
	model, inputs, meta, apiErr := parseModerations(body)
	if apiErr != nil {
		return apiErr
	}
	c, apiErr := g.begin(w, r, caller, &moderationsCapability, model, len(body), meta, func(rt Route) (int64, error) {
		return pricing.WorstCase(rt.Price, estimateTokens(len(body)), 0), nil
	})
	if apiErr != nil {
		return apiErr
	}
	defer func() { _ = c.settle(r.Context()) }()
	// Moderation reports no usage: it is billed per request (capability.meters), or free.
	c.usageKnown = true
	return c.tryRoutes(r, false, nil, func(ar *http.Request, rt Route) error {
		if fw, ok := forwarderFor(rt, providers.FormatOpenAIModerations); ok {
			up, err := upstreamBody(body, rt.UpstreamModel)
			if err != nil {
				return fmt.Errorf("rewriting the request: %w", err)
			}
			return c.forward(w, ar, rt, fw, up, false, moderationsWire, nil)
		}
		return c.moderateNeutral(w, ar, rt, inputs)
	})
}

// moderationsWire: a moderation answer carries no usage; the gateway adds one with its cost.
var moderationsWire = wireFormat{format: providers.FormatOpenAIModerations, parseUsage: openai.ParseChatUsage, appendUsage: appendPromptUsage, finish: noFinish}

// moderateNeutral serves the request through an adapter's Moderator, answered in OpenAI's shape.
func (c *call) moderateNeutral(w http.ResponseWriter, r *http.Request, rt Route, inputs []providers.ModerationInput) error {
	md, ok := rt.Provider.(providers.Moderator)
	if !ok {
		return &providers.UpstreamError{Provider: rt.ProviderName, Category: providers.CategoryModelUnavailable, Message: "the provider cannot serve moderations"}
	}
	began := c.g.Now()
	resp, err := md.Moderate(r.Context(), &providers.ModerationRequest{Model: rt.UpstreamModel, Inputs: inputs})
	if err == nil && len(resp.Results) != len(inputs) {
		// An answer the client cannot be given fails the attempt like any other.
		err = c.providerFault(rt, fmt.Sprintf("the provider answered %d moderation results for %d inputs", len(resp.Results), len(inputs)), nil)
	}
	if err := c.neutralDone(rt, began, err); err != nil {
		return err
	}
	b, err := json.Marshal(struct {
		ID      string                       `json:"id"`
		Model   string                       `json:"model"`
		Results []providers.ModerationResult `json:"results"`
	}{resp.ID, rt.UpstreamModel, resp.Results})
	if err != nil {
		return err
	}
	return c.answerComplete(w, r, b, appendPromptUsage)
}
