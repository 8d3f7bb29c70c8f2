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
	n, apiErr := countInputs(in, maxModerationInputs)
	switch {
	case apiErr != nil:
		return "", nil, false, apiErr
	case n == 0:
		return "", nil, false, invalid
	}
	inputs = make([]providers.ModerationInput, 0, n)
	_ = rawjson.EachElement(in, func(item []byte) bool {
		if s, ok := rawjson.String(item); ok {
			inputs = append(inputs, providers.ModerationInput{Text: s})
			return true
		}
		var part struct {
			Type     string  `json:"type"`
			Text     *string `json:"text"`
			ImageURL *struct {
				URL string `json:"url"`
			} `json:"image_url"`
		}
		if json.Unmarshal(item, &part) != nil {
			apiErr = invalid
			return false
		}
		switch {
		case part.Type == "text" && part.Text != nil:
			inputs = append(inputs, providers.ModerationInput{Text: *part.Text})
		case part.Type == "image_url" && part.ImageURL != nil && part.ImageURL.URL != "":
			inputs = append(inputs, providers.ModerationInput{ImageURL: part.ImageURL.URL})
		default:
			apiErr = invalid
			return false
		}
		return true
	})
	if apiErr != nil {
		return "", nil, false, apiErr
	}
	return model, inputs, meta, nil
}

// maxModerationInputs bounds the inputs of one moderation request as embeddings' are: an
// answer holds a result of every category per input, a thousand times the input's size.
const maxModerationInputs = 2048

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
	// Each input is a check, billed as one request (capability.meters): a route's price per
	// request is not dodged by sending many inputs at once. Moderation reports no usage.
	checks := pricing.Usage{Requests: int64(len(inputs))}
	return g.serveMedia(w, r, caller, &moderationsEndpoint, &mediaRequest{
		model: model, promptBytes: len(body), meta: meta, metered: &checks,
		worst: func(rt Route) (int64, error) {
			_, total, err := rt.Price.Cost(checks)
			return total, err
		},
		attempt: func(c *call, ar *http.Request, rt Route) error {
			if fw, ok := forwarderFor(rt, providers.FormatOpenAIModerations); ok {
				up, err := upstreamBody(body, rt.UpstreamModel)
				if err != nil {
					return fmt.Errorf("rewriting the request: %w", err)
				}
				return c.forward(w, ar, rt, fw, up, false, moderationsWire, nil)
			}
			return c.moderateNeutral(w, ar, rt, inputs)
		},
	})
}

// moderationsEndpoint: the checks are counted before the call, so their worst case is exact.
var moderationsEndpoint = mediaEndpoint{cp: &moderationsCapability, capAtHold: always}

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
