package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
)

// Sentinel causes, set as UpstreamError.Err of the failures that have no transport error,
// so that callers can match them with errors.Is.
var (
	// ErrStreamTruncated: the stream ended before its terminal event. The chat stream does
	// not return it: a chat body that ends cleanly without [DONE] is complete.
	ErrStreamTruncated = errors.New("upstream stream ended without [DONE]")
	// ErrMalformedFrame: a stream frame was not the expected JSON, or was larger than the
	// SSE reader's limit. The chat stream skips the former (SkippedFrames).
	ErrMalformedFrame = upstreamhttp.ErrMalformedFrame
	// ErrMalformedResponse: a 2xx response body was not the expected JSON.
	ErrMalformedResponse = upstreamhttp.ErrMalformedResponse
	// ErrIdleTimeout: no byte arrived on the stream within Config.StreamIdleTimeout.
	ErrIdleTimeout = upstreamhttp.ErrIdleTimeout
	// ErrStreamError: the upstream sent an error frame in the stream.
	ErrStreamError = errors.New("upstream error in stream")
	// ErrAttemptTimeout: the attempt took longer than Config.Timeout.
	ErrAttemptTimeout = upstreamhttp.ErrAttemptTimeout
)

// ParseError turns a non-2xx answer into an *UpstreamError: the OpenAI error shape
// {"error":{"message","type","param","code"}} and the shapes of compatible servers
// ({"error":"text"}, top-level {"message","type","code"} of vLLM and Mistral, Mistral's
// validation errors {"message":{"detail":[...]}}, {"detail":...} of FastAPI servers, plain
// text) are read; the category comes from the status, refined by the body (translation
// map §3.12). keyConfigured tells whether the adapter sent a key: a 401 without one means
// credentials are not configured.
//
// The body must not contain the caller's credentials; the adapter redacts its key first.
func ParseError(provider string, status int, h http.Header, body []byte, keyConfigured bool) *providers.UpstreamError {
	e := &providers.UpstreamError{Provider: provider, Status: status, Payload: providers.Preview(body)}
	fillFromBody(e, body)
	e.RetryAfter = upstreamhttp.RetryAfter(h, time.Now())
	e.Category, e.Retryable = classify(status, e.Code, e.Type, e.Message, keyConfigured)
	return e
}

// errorFields is every place compatible servers put their error.
type errorFields struct {
	Error   json.RawMessage `json:"error"`
	Message looseString     `json:"message"`
	Type    looseString     `json:"type"`
	Param   looseString     `json:"param"`
	Code    looseString     `json:"code"`
	Detail  json.RawMessage `json:"detail"`
}

func fillFromBody(e *providers.UpstreamError, body []byte) {
	body = bytes.TrimSpace(body)
	var f errorFields
	if len(body) == 0 || body[0] != '{' || json.Unmarshal(body, &f) != nil {
		// Plain text is a useful message; an HTML error page is not.
		if len(body) > 0 && body[0] != '<' {
			e.Message = upstreamhttp.Truncate(string(body), 256)
		}
		return
	}
	inner := bytes.TrimSpace(f.Error)
	switch {
	case len(inner) > 0 && inner[0] == '{':
		var in errorFields
		if json.Unmarshal(inner, &in) == nil {
			f.Message, f.Type, f.Param, f.Code = in.Message, in.Type, in.Param, in.Code
		}
	case len(inner) > 0 && inner[0] == '"':
		var s string
		if json.Unmarshal(inner, &s) == nil {
			f.Message = looseString(s)
		}
	}
	e.Message, e.Type, e.Param, e.Code = string(f.Message), string(f.Type), string(f.Param), string(f.Code)
	if e.Message == "" && len(f.Detail) > 0 {
		e.Message = detailMessage(f.Detail)
	}
	// Mistral wraps FastAPI's validation errors in its own: {"message":{"detail":[...]}}.
	if strings.HasPrefix(e.Message, "{") {
		var in struct {
			Detail json.RawMessage `json:"detail"`
		}
		if json.Unmarshal([]byte(e.Message), &in) == nil && len(in.Detail) > 0 {
			e.Message = detailMessage(in.Detail)
		}
	}
	e.Message = upstreamhttp.Truncate(e.Message, upstreamhttp.MaxMessage)
}

// detailMessage reads FastAPI's detail: a string, or a list of {loc, msg, type}.
func detailMessage(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var list []struct {
		Msg string `json:"msg"`
	}
	if json.Unmarshal(raw, &list) == nil && len(list) > 0 && list[0].Msg != "" {
		return list[0].Msg
	}
	return upstreamhttp.Truncate(string(raw), 256)
}

// looseString reads a string, a number or a boolean as its text, and null as "".
type looseString string

func (s *looseString) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var v string
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		*s = looseString(v)
		return nil
	}
	if string(b) == "null" {
		*s = ""
		return nil
	}
	*s = looseString(b)
	return nil
}

// classify gives the category of an error response from its status, refined by the code,
// type and message of its body.
func classify(status int, code, typ, msg string, keyConfigured bool) (providers.Category, bool) {
	if status < 400 {
		// A redirect or other non-error status from an API is a broken upstream, not the
		// caller's fault.
		return providers.CategoryServerError, false
	}
	cat, retry := providers.ClassifyStatus(status)
	code, typ, msg = strings.ToLower(code), strings.ToLower(typ), strings.ToLower(msg)
	switch status {
	case http.StatusUnauthorized:
		if !keyConfigured {
			return providers.CategoryCredentialsNotConfigured, false
		}
		if strings.Contains(msg, "member of an organization") {
			return providers.CategoryAccessMissing, false
		}
	case http.StatusForbidden:
		if isRegionError(code, typ, msg) {
			return providers.CategoryRegionRestriction, false
		}
		if strings.Contains(msg, "does not have access to model") || code == "model_not_found" {
			return providers.CategoryAccessMissing, false
		}
	case http.StatusTooManyRequests, http.StatusPaymentRequired:
		if isQuotaError(code, typ) {
			return providers.CategoryAccessMissing, false
		}
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		if code == "model_not_found" || strings.Contains(msg, "not a chat model") ||
			strings.Contains(msg, "only supported in v1/responses") {
			return providers.CategoryModelUnavailable, false
		}
	}
	return cat, retry
}

func isRegionError(code, typ, msg string) bool {
	return code == "unsupported_country_region_territory" || typ == "unsupported_country_region_territory" ||
		strings.Contains(msg, "country") || strings.Contains(msg, "region") || strings.Contains(msg, "territory")
}

func isQuotaError(code, typ string) bool {
	switch code {
	case "insufficient_quota", "credit_balance_exhausted", "billing_hard_limit_reached":
		return true
	}
	return typ == "insufficient_quota"
}

// streamError turns the error object of an in-stream error frame into an *UpstreamError.
// The stream has no status of its own: a numeric code is taken as one, otherwise the
// category comes from the code and type.
func streamError(provider string, frame []byte) *providers.UpstreamError {
	e := &providers.UpstreamError{Provider: provider, Payload: providers.Preview(frame)}
	fillFromBody(e, frame)
	if e.Message == "" {
		e.Message = ErrStreamError.Error()
	}
	// Err carries the message because Error prints Err when there is no status.
	e.Err = fmt.Errorf("%w: %s", ErrStreamError, e.Message)
	if n, err := strconv.Atoi(e.Code); err == nil && n >= 400 && n <= 599 {
		e.Status = n
		e.Category, e.Retryable = classify(n, e.Code, e.Type, e.Message, true)
		return e
	}
	e.Category, e.Retryable = classifyCode(e.Code, e.Type)
	return e
}

// classifyCode maps error codes and types (OpenAI's, and Anthropic's names that some
// compatible servers reuse) to a category when there is no status.
func classifyCode(code, typ string) (providers.Category, bool) {
	code, typ = strings.ToLower(code), strings.ToLower(typ)
	switch {
	case isQuotaError(code, typ):
		return providers.CategoryAccessMissing, false
	case code == "rate_limit_exceeded" || code == "slow_down" || typ == "rate_limit_error" || typ == "rate_limit_exceeded":
		return providers.CategoryRateLimited, true
	case code == "model_not_found" || typ == "not_found_error":
		return providers.CategoryModelUnavailable, false
	case code == "invalid_api_key" || typ == "authentication_error":
		return providers.CategoryCredentialsInvalid, false
	case code == "context_length_exceeded" || code == "invalid_prompt" || typ == "invalid_request_error":
		return providers.CategoryInvalidRequest, false
	}
	return providers.CategoryServerError, true
}
