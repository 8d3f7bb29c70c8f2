package handlers

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// Error codes of the gateway; the README's "API behaviour" lists them with their statuses.
const (
	CodeUnauthorised        = "unauthorised"
	CodeForbidden           = "forbidden"
	CodeInvalidJSON         = "invalid_json"
	CodeValidation          = "validation_error"
	CodeModelRequired       = "model_required"
	CodeNotFound            = "not_found"
	CodeMethodNotAllowed    = "method_not_allowed"
	CodePayloadTooLarge     = "payload_too_large"
	CodeInsufficientFunds   = "insufficient_funds"
	CodeNotSupported        = "not_supported"
	CodeUnsupportedModel    = "unsupported_model_or_endpoint"
	CodeNotImplemented      = "not_implemented_yet"
	CodeUpstream            = "upstream_error"
	CodeRateLimited         = "rate_limited"
	CodeGateway             = "gateway_error"
	CodeClientClosedRequest = "client_closed_request"
	// CodeRequestTimeout (408) answers a client that sent its request body too slowly.
	CodeRequestTimeout = "request_timeout"
	// CodeStoreUnavailable (503) answers a request the gateway could not serve because its
	// store did not answer within its bound, and GET /health while that is so.
	CodeStoreUnavailable = "store_unavailable"
)

// Surface selects how an error body is dressed so that each official SDK types it right.
type Surface int

// Surfaces.
const (
	// SurfaceOpenAI puts an OpenAI error object under "error" (openai-go reads error.message/type/code).
	SurfaceOpenAI Surface = iota
	// SurfaceAnthropic adds "type":"error" and an Anthropic error object.
	SurfaceAnthropic
)

// APIError is an error answered to the client in the spec's error shape.
type APIError struct {
	Status  int
	Code    string
	Message string
	// Origin is user, gateway or upstream; Type is user or system. Derived from Status when empty.
	Origin string
	Type   string
	Param  string
	// Extra holds the spec's optional diagnostic fields, merged at the top level.
	Extra map[string]any
}

func (e *APIError) Error() string { return e.Code + ": " + e.Message }

func newError(status int, code, message string) *APIError {
	return &APIError{Status: status, Code: code, Message: message}
}

func (e *APIError) errorType() string {
	if e.Type != "" {
		return e.Type
	}
	if e.Status >= 500 {
		return "system"
	}
	return "user"
}

func (e *APIError) origin() string {
	if e.Origin != "" {
		return e.Origin
	}
	if e.Status >= 500 {
		return "gateway"
	}
	return "user"
}

// openAIType maps a status to the "type" an OpenAI error object carries.
func openAIType(status int) string {
	switch {
	case status == 401:
		return "authentication_error"
	case status == 402:
		return "insufficient_quota"
	case status == 403:
		return "permission_error"
	case status == 404:
		return "not_found_error"
	case status == 429:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

// anthropicType maps a status to Anthropic's ErrorType so the Anthropic SDKs type the error.
func anthropicType(status int) string {
	switch {
	case status == 401:
		return "authentication_error"
	case status == 402:
		return "billing_error"
	case status == 403:
		return "permission_error"
	case status == 404:
		return "not_found_error"
	case status == 413:
		return "request_too_large"
	case status == 429:
		return "rate_limit_error"
	case status == 504:
		return "timeout_error"
	case status == 529:
		return "overloaded_error"
	case status >= 500:
		return "api_error"
	default:
		return "invalid_request_error"
	}
}

// body builds the JSON error body.
func (e *APIError) body(s Surface, generationID string) map[string]any {
	b := make(map[string]any, 10+len(e.Extra))
	for k, v := range e.Extra {
		b[k] = v
	}
	var param any
	if e.Param != "" {
		param = e.Param
	}
	errObj := map[string]any{"code": e.Code, "message": e.Message, "param": param}
	switch s {
	case SurfaceAnthropic:
		errObj["type"] = anthropicType(e.Status)
		b["type"] = "error"
	default:
		errObj["type"] = openAIType(e.Status)
	}
	b["ok"] = false
	b["error"] = errObj
	b["message"] = e.Message
	b["status_code"] = e.Status
	b["error_type"] = e.errorType()
	b["error_origin"] = e.origin()
	if generationID != "" {
		b["generation_id"] = generationID
	}
	return b
}

// setGenerationID names the generation in the answer's headers: X-Generation-Id, and the
// headers the official SDKs read as the request id of their responses and errors
// (x-request-id for OpenAI's, request-id for Anthropic's), so that what a client logs finds
// the generation record. Their values are cut from one array, each its own element (a
// header edited in place, as Caddy's header directive does, changes only itself): one
// allocation per request, as a single Set costs.
func setGenerationID(h http.Header, id string) {
	v := &[3]string{id, id, id}
	h["X-Generation-Id"] = v[0:1:1]
	h["X-Request-Id"] = v[1:2:2]
	h["Request-Id"] = v[2:3:3]
}

// writeError answers a request with the error.
func writeError(w http.ResponseWriter, s Surface, e *APIError, generationID string) {
	data, _ := json.Marshal(e.body(s, generationID))
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(data)))
	if e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable {
		if ra, ok := e.Extra["retry_after_seconds"].(int64); ok && ra > 0 {
			h.Set("Retry-After", strconv.FormatInt(ra, 10))
		}
	}
	// The SDKs retry 408, 429 and 5xx by themselves; tell them not to retry what cannot
	// succeed. A body cut for its pace may arrive in time on a second try.
	if e.Status < 500 && e.Status != http.StatusTooManyRequests && e.Status != http.StatusRequestTimeout {
		h.Set("X-Should-Retry", "false")
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(data)
}

// categoryHints explains each failure category to the operator reading the error.
var categoryHints = map[providers.Category]string{
	providers.CategoryCredentialsNotConfigured: "the provider has no API key configured in the gateway",
	providers.CategoryCredentialsInvalid:       "the provider rejected the gateway's credentials; check the configured API key",
	providers.CategoryAccessMissing:            "the provider account lacks quota, billing or access to this model",
	providers.CategoryRegionRestriction:        "the provider refuses requests from this region or project",
	providers.CategoryModelUnavailable:         "the provider does not serve this model on this endpoint; check the route's upstream model id",
	providers.CategoryRateLimited:              "the provider is rate limiting; retry later or add a fallback route",
	providers.CategoryServerError:              "the provider failed or timed out; retry later or add a fallback route",
	providers.CategoryInvalidRequest:           "the provider rejected the request as invalid",
}
