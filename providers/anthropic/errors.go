package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
)

// Sentinel causes, set as UpstreamError.Err of the failures that have no transport error,
// so that callers can match them with errors.Is.
var (
	// ErrStreamTruncated: the stream ended before message_stop. The stream no longer
	// returns it: a body that ends cleanly without message_stop is complete, and one that
	// breaks off fails with its transport error.
	ErrStreamTruncated = errors.New("upstream stream ended before message_stop")
	// ErrMalformedFrame: a stream event was larger than the SSE reader's limit. Events that
	// are not the expected JSON are skipped (SkippedFrames).
	ErrMalformedFrame = errors.New("malformed stream event")
	// ErrMalformedResponse: a 2xx response body was not a message.
	ErrMalformedResponse = upstreamhttp.ErrMalformedResponse
	// ErrIdleTimeout: no byte arrived on the stream within Config.StreamIdleTimeout.
	ErrIdleTimeout = upstreamhttp.ErrIdleTimeout
	// ErrAttemptTimeout: the attempt took longer than Config.Timeout.
	ErrAttemptTimeout = upstreamhttp.ErrAttemptTimeout
)

// CodeContextLengthExceeded is the Code given to a 400 whose message says the prompt does
// not fit the model's context, the code OpenAI uses for the same failure.
const CodeContextLengthExceeded = "context_length_exceeded"

// typeStatus is the status the API answers each error type with (translation map §3.12);
// an in-stream error, which has no status of its own, is classified as if it had it.
var typeStatus = map[string]int{
	"invalid_request_error": http.StatusBadRequest,
	"authentication_error":  http.StatusUnauthorized,
	"billing_error":         http.StatusPaymentRequired,
	"permission_error":      http.StatusForbidden,
	"not_found_error":       http.StatusNotFound,
	"request_too_large":     http.StatusRequestEntityTooLarge,
	"rate_limit_error":      http.StatusTooManyRequests,
	"api_error":             http.StatusInternalServerError,
	"timeout_error":         http.StatusGatewayTimeout,
	"overloaded_error":      529,
}

// ParseError turns a non-2xx answer into an *UpstreamError. The body is Anthropic's
// {"type":"error","error":{"type","message"},"request_id"}: Type and Code are error.type,
// Message is error.message; a body in another shape (the plain text or HTML of a proxy)
// keeps a plain-text message only. The category comes from the status, refined by the body
// (translation map §3.12):
//
//   - 401: credentials invalid, or not configured when keyConfigured is false.
//   - 403: credentials invalid (region restriction when the message names a region).
//   - 402 and 400 spend-limit or credit messages: access missing.
//   - 404: model unavailable.
//   - 429: rate limited and retryable, with RetryAfter from retry-after(-ms); but a 429
//     without retry-after whose message speaks of a spend limit or cap (or whose
//     details.error_code is enforced_spend_limit_reached) is access missing.
//   - 400 and 413: invalid request; "prompt is too long" and its kin get Code
//     context_length_exceeded.
//   - 408, 5xx (500 api_error, 504 timeout_error, 529 overloaded_error): server error,
//     retryable.
//
// The body must not contain the adapter's credentials; the adapter redacts its key first.
func ParseError(provider string, status int, h http.Header, body []byte, keyConfigured bool) *providers.UpstreamError {
	e := &providers.UpstreamError{Provider: provider, Status: status, Payload: providers.Preview(body)}
	errorCode := fillFromBody(e, body)
	e.RetryAfter = upstreamhttp.RetryAfter(h, time.Now())
	hasRetryAfter := h.Get("Retry-After") != "" || h.Get("Retry-After-Ms") != ""
	e.Category, e.Retryable = classify(status, e, errorCode, hasRetryAfter, keyConfigured)
	return e
}

// fillFromBody reads the error body into e and returns details.error_code.
func fillFromBody(e *providers.UpstreamError, body []byte) string {
	body = bytes.TrimSpace(body)
	var r ErrorResponse
	if len(body) == 0 || body[0] != '{' || json.Unmarshal(body, &r) != nil {
		// Plain text is a useful message; an HTML error page is not.
		if len(body) > 0 && body[0] != '<' {
			e.Message = truncate(string(body), 256)
		}
		return ""
	}
	e.Type, e.Code = r.Error.Type, r.Error.Type
	e.Message = truncate(r.Error.Message, upstreamhttp.MaxMessage)
	if r.Error.Details != nil {
		return r.Error.Details.ErrorCode
	}
	return ""
}

// classify gives the category of an error answer from its status, refined by the body
// read into e; it may set e.Code and e.Timeout.
func classify(status int, e *providers.UpstreamError, errorCode string, hasRetryAfter, keyConfigured bool) (providers.Category, bool) {
	if status == http.StatusRequestTimeout || status == http.StatusGatewayTimeout || e.Type == "timeout_error" {
		e.Timeout = true
	}
	if status < 400 {
		// A redirect or other non-error status from an API is a broken upstream, not the
		// caller's fault.
		return providers.CategoryServerError, false
	}
	msg := strings.ToLower(e.Message)
	switch status {
	case http.StatusUnauthorized:
		if !keyConfigured {
			return providers.CategoryCredentialsNotConfigured, false
		}
		return providers.CategoryCredentialsInvalid, false
	case http.StatusForbidden:
		if strings.Contains(msg, "region") || strings.Contains(msg, "country") || strings.Contains(msg, "territor") {
			return providers.CategoryRegionRestriction, false
		}
		return providers.CategoryCredentialsInvalid, false
	case http.StatusPaymentRequired:
		return providers.CategoryAccessMissing, false
	case http.StatusNotFound:
		return providers.CategoryModelUnavailable, false
	case http.StatusTooManyRequests:
		if errorCode == "enforced_spend_limit_reached" || (!hasRetryAfter && isSpendLimit(msg)) {
			return providers.CategoryAccessMissing, false
		}
		return providers.CategoryRateLimited, true
	case http.StatusBadRequest:
		if isSpendLimit(msg) || strings.Contains(msg, "credit balance") {
			return providers.CategoryAccessMissing, false
		}
		if isContextLength(msg) {
			e.Code = CodeContextLengthExceeded
		}
		return providers.CategoryInvalidRequest, false
	case http.StatusRequestEntityTooLarge:
		if e.Code == "" {
			e.Code = "request_too_large"
		}
		return providers.CategoryInvalidRequest, false
	}
	return providers.ClassifyStatus(status)
}

// isSpendLimit tells whether an error message speaks of a spend limit or cap rather than a
// per-minute rate limit.
func isSpendLimit(msg string) bool {
	return strings.Contains(msg, "spend") || strings.Contains(msg, "usage limit") ||
		strings.Contains(msg, "limit cap") || strings.Contains(msg, "billing")
}

// isContextLength tells whether a 400's message says the input does not fit the context.
func isContextLength(msg string) bool {
	return strings.Contains(msg, "prompt is too long") || strings.Contains(msg, "exceed context limit") ||
		strings.Contains(msg, "context window") || strings.Contains(msg, "too many tokens")
}

// streamError turns the data of an in-stream error event into an *UpstreamError. The event
// has no status of its own: it is classified with the status the API gives its error type
// (overloaded_error is a 529 server error, rate_limit_error a 429...), which is set as Status;
// an unknown type is a retryable server error.
func streamError(provider string, data []byte) *providers.UpstreamError {
	e := &providers.UpstreamError{Provider: provider, Payload: providers.Preview(data)}
	fillFromBody(e, data)
	if e.Message == "" {
		e.Message = "upstream reported an error in the stream"
	}
	status, ok := typeStatus[e.Type]
	if !ok {
		e.Category, e.Retryable = providers.CategoryServerError, true
		return e
	}
	e.Status = status
	e.Category, e.Retryable = classify(status, e, "", false, true)
	return e
}

// truncate keeps at most n bytes of s. Unlike upstreamhttp.Truncate, it may split a
// character.
func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
