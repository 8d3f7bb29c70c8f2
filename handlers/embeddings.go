package handlers

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/openai"
)

var embeddingsCapability = capability{
	endpoint: "/embeddings", format: providers.FormatOpenAIEmbeddings, meters: []string{pricing.DimInput, pricing.DimRequest},
	neutral: func(p providers.Provider) bool { _, ok := p.(providers.Embedder); return ok },
}

// maxEmbeddingInputs is OpenAI's limit on the inputs of one request.
const maxEmbeddingInputs = 2048

// embeddingsRequest is a POST /embeddings body as the gateway reads it.
type embeddingsRequest struct {
	model  string
	inputs []string
	tokens [][]int64
	// base64 is the encoding the client asked for ("base64"); floats otherwise.
	base64     bool
	dimensions *int64
	user       string
	meta       bool
}

// parseEmbeddings validates an OpenAI embeddings request: input as a string, an array of
// strings, an array of token ids or an array of token arrays.
func parseEmbeddings(body []byte) (*embeddingsRequest, *APIError) {
	var raw struct {
		Model          *string         `json:"model"`
		Input          json.RawMessage `json:"input"`
		EncodingFormat *string         `json:"encoding_format"`
		Dimensions     *int64          `json:"dimensions"`
		User           *string         `json:"user"`
		Meta           *bool           `json:"meta"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, badField(CodeInvalidJSON, "", "the request body must be a JSON object with the documented field types: "+err.Error())
	}
	if raw.Model == nil || *raw.Model == "" {
		return nil, badField(CodeModelRequired, "model", "model is required")
	}
	req := &embeddingsRequest{model: *raw.Model, dimensions: raw.Dimensions}
	if raw.User != nil {
		req.user = *raw.User
	}
	if raw.Meta != nil {
		req.meta = *raw.Meta
	}
	if raw.EncodingFormat != nil {
		switch *raw.EncodingFormat {
		case "float":
		case "base64":
			req.base64 = true
		default:
			return nil, badField(CodeValidation, "encoding_format", `encoding_format must be "float" or "base64"`)
		}
	}
	if raw.Dimensions != nil && *raw.Dimensions <= 0 {
		return nil, badField(CodeValidation, "dimensions", "dimensions must be a positive integer")
	}
	in := bytes.TrimSpace(raw.Input)
	invalidInput := badField(CodeValidation, "input", "input must be a non-empty string, an array of non-empty strings, an array of token ids or an array of token id arrays")
	switch {
	case len(in) == 0 || rawjson.IsNull(in):
		return nil, badField(CodeValidation, "input", "input is required")
	case in[0] == '"':
		var s string
		if json.Unmarshal(in, &s) != nil || s == "" {
			return nil, invalidInput
		}
		req.inputs = []string{s}
	case in[0] == '[':
		n, apiErr := countInputs(in, maxEmbeddingInputs)
		switch {
		case apiErr != nil:
			return nil, apiErr
		case n == 0:
			return nil, invalidInput
		}
		first, _ := rawjson.First(in)
		switch first[0] {
		case '"':
			if json.Unmarshal(in, &req.inputs) != nil {
				return nil, invalidInput
			}
			for _, s := range req.inputs {
				if s == "" {
					return nil, invalidInput
				}
			}
		case '[':
			if json.Unmarshal(in, &req.tokens) != nil {
				return nil, invalidInput
			}
			for _, t := range req.tokens {
				if len(t) == 0 {
					return nil, invalidInput
				}
			}
		default:
			var one []int64
			if json.Unmarshal(in, &one) != nil {
				return nil, invalidInput
			}
			req.tokens = [][]int64{one}
		}
	default:
		return nil, invalidInput
	}
	return req, nil
}

// countInputs counts the elements of an input array, stopping one past most: an array of
// any length is refused without decoding it. The count is 0 for a value that is no array.
func countInputs(in []byte, most int) (int, *APIError) {
	n := 0
	if rawjson.EachElement(in, func([]byte) bool { n++; return n <= most }) != nil {
		return 0, nil
	}
	if n > most {
		return 0, badField(CodeValidation, "input", fmt.Sprintf("input has more than %d items; at most %d are allowed in one request", most, most))
	}
	return n, nil
}

func badField(code, param, msg string) *APIError {
	e := newError(http.StatusBadRequest, code, msg)
	e.Param = param
	return e
}

// embeddings serves POST /embeddings.
func (g *Gateway) embeddings(w http.ResponseWriter, r *http.Request, caller *Caller) error {
	body, apiErr := g.readBody(w, r)
	if apiErr != nil {
		return apiErr
	}
	req, apiErr := parseEmbeddings(body)
	if apiErr != nil {
		return apiErr
	}
	return g.serveMedia(w, r, caller, &embeddingsEndpoint, &mediaRequest{
		model: req.model, promptBytes: len(body), prompt: body, meta: req.meta,
		// The whole body's bytes as tokens is more than the inputs can be.
		worst: func(rt Route) (int64, error) {
			return pricing.WorstCase(rt.Price, estimateTokens(len(body)), 0), nil
		},
		attempt: func(c *call, ar *http.Request, rt Route) error {
			if fw, ok := forwarderFor(rt, providers.FormatOpenAIEmbeddings); ok {
				up, err := upstreamBody(body, rt.UpstreamModel)
				if err != nil {
					return fmt.Errorf("rewriting the request: %w", err)
				}
				wf := embeddingsWire
				wf.adapt = func(answer []byte) ([]byte, error) { return encodeEmbeddings(answer, req.base64) }
				return c.forward(w, ar, rt, fw, up, false, wf, nil)
			}
			return c.embedNeutral(w, ar, rt, req)
		},
	})
}

// embeddingsEndpoint: an embedding is billed by the tokens its upstream reports, not by a
// metered usage, so there is nothing to cap (the worst case, the body's bytes as tokens,
// bounds them anyway).
var embeddingsEndpoint = mediaEndpoint{cp: &embeddingsCapability}

var embeddingsWire = wireFormat{format: providers.FormatOpenAIEmbeddings, parseUsage: openai.ParseChatUsage, appendUsage: appendPromptUsage, finish: noFinish}

func noFinish([]byte) string { return "" }

// appendPromptUsage is the usage of an answer whose tokens are all input: prompt_tokens and
// total_tokens, as OpenAI's embeddings answer has it.
func appendPromptUsage(b []byte, u providers.Usage) []byte {
	b = append(b, `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, u.PromptTokens(), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, u.Total(), 10)
	return append(b, '}')
}

// embedNeutral serves the request through an adapter's Embedder and answers in OpenAI's
// shape, each vector encoded as the client asked.
func (c *call) embedNeutral(w http.ResponseWriter, r *http.Request, rt Route, req *embeddingsRequest) error {
	em, ok := rt.Provider.(providers.Embedder)
	if !ok {
		return &providers.UpstreamError{Provider: rt.ProviderName, Category: providers.CategoryModelUnavailable, Message: "the provider cannot serve embeddings"}
	}
	began := c.g.Now()
	resp, err := em.Embed(r.Context(), &providers.EmbeddingRequest{
		Model: rt.UpstreamModel, Inputs: req.inputs, Tokens: req.tokens, Dimensions: req.dimensions, User: req.user,
	})
	var b []byte
	if err == nil {
		// An answer the client cannot be given fails the attempt like any other.
		b, err = c.appendEmbeddingData(append(make([]byte, 0, 256), `{"object":"list","data":`...), rt, resp.Vectors, req.base64)
	}
	if err := c.neutralDone(rt, began, err); err != nil {
		return err
	}
	if resp.UsageKnown {
		c.reportTokens(resp.Usage)
	}
	c.estimateUsage()
	b = append(b, `,"model":`...)
	b = rawjson.AppendStringLikeMarshal(b, rt.UpstreamModel)
	b = append(b, `,"usage":`...)
	b = append(appendPromptUsage(b, c.tokens()), '}')
	return c.answerComplete(w, r, b, appendPromptUsage)
}

// appendEmbeddingData appends OpenAI's data array of vectors, each encoded as asked.
func (c *call) appendEmbeddingData(b []byte, rt Route, vectors []json.RawMessage, asBase64 bool) ([]byte, error) {
	b = append(b, '[')
	for i, v := range vectors {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"object":"embedding","index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `,"embedding":`...)
		var err error
		if b, err = appendVector(b, v, asBase64); err != nil {
			return nil, c.providerFault(rt, "the provider answered an invalid embedding: "+err.Error(), v)
		}
		b = append(b, '}')
	}
	return append(b, ']'), nil
}

// appendVector appends vector (a JSON array of numbers, or a base64 string of little-endian
// float32) encoded as asked: base64 of little-endian float32, which is what the official SDKs
// ask for by default and decode without looking, or the numbers.
func appendVector(b []byte, vector json.RawMessage, asBase64 bool) ([]byte, error) {
	vector = bytes.TrimSpace(vector)
	if len(vector) == 0 {
		return nil, fmt.Errorf("empty embedding")
	}
	isString := vector[0] == '"'
	switch {
	case asBase64 && isString, !asBase64 && !isString:
		if !rawjson.Valid(vector) {
			return nil, fmt.Errorf("embedding is not valid JSON")
		}
		return append(b, vector...), nil
	case asBase64:
		var nums []float64
		if err := json.Unmarshal(vector, &nums); err != nil {
			return nil, err
		}
		raw := make([]byte, 4*len(nums))
		for i, x := range nums {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(float32(x)))
		}
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, raw)
		return append(b, '"'), nil
	default:
		var s string
		if err := json.Unmarshal(vector, &s); err != nil {
			return nil, err
		}
		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(raw)%4 != 0 {
			return nil, fmt.Errorf("embedding is not base64 of float32 values")
		}
		b = append(b, '[')
		for i := 0; i < len(raw); i += 4 {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendFloat(b, float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[i:]))), 'g', -1, 32)
		}
		return append(b, ']'), nil
	}
}

// encodeEmbeddings makes every embedding of an OpenAI-wire answer the encoding the client
// asked for. Compatible servers that ignore encoding_format answer floats to a base64
// request; the official SDKs would read those as base64 and get garbage. An answer already
// in the right encoding is returned as it came.
func encodeEmbeddings(answer []byte, asBase64 bool) ([]byte, error) {
	var resp map[string]json.RawMessage
	if err := json.Unmarshal(answer, &resp); err != nil {
		return nil, fmt.Errorf("the provider's embeddings answer is not a JSON object: %w", err)
	}
	var data []map[string]json.RawMessage
	if err := json.Unmarshal(resp["data"], &data); err != nil {
		return nil, fmt.Errorf("the provider's embeddings answer has no data array: %w", err)
	}
	changed := false
	for _, item := range data {
		v := bytes.TrimSpace(item["embedding"])
		if len(v) == 0 {
			return nil, fmt.Errorf("the provider's embeddings answer has an item without an embedding")
		}
		if (v[0] == '"') == asBase64 {
			continue
		}
		enc, err := appendVector(nil, v, asBase64)
		if err != nil {
			return nil, fmt.Errorf("the provider's embedding: %w", err)
		}
		item["embedding"], changed = enc, true
	}
	if !changed {
		return answer, nil
	}
	d, err := json.Marshal(data)
	if err != nil {
		return nil, err
	}
	resp["data"] = d
	return json.Marshal(resp)
}
