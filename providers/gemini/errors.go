package gemini

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
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
	// ErrStreamTruncated: the stream ended before a finish reason or a block. The stream no
	// longer returns it: a body that ends cleanly without a finish reason is complete, and
	// one that breaks off fails with its transport error.
	ErrStreamTruncated = errors.New("stream ended before it was complete")
	// ErrMalformedFrame: a stream event was larger than the SSE reader's limit. Frames that
	// are not a GenerateContentResponse are skipped (SkippedFrames).
	ErrMalformedFrame = upstreamhttp.ErrMalformedFrame
	// ErrMalformedResponse: a 2xx response body was not a GenerateContentResponse.
	ErrMalformedResponse = upstreamhttp.ErrMalformedResponse
	// ErrIdleTimeout: no event arrived on the stream within Config.StreamIdleTimeout.
	ErrIdleTimeout = upstreamhttp.ErrIdleTimeout
	// ErrAttemptTimeout: the attempt took longer than Config.Timeout.
	ErrAttemptTimeout = upstreamhttp.ErrAttemptTimeout
	// ErrUnusableAnswer: the model ended with a finish reason that leaves no usable answer
	// (MALFORMED_FUNCTION_CALL, UNEXPECTED_TOOL_CALL, TOO_MANY_TOOL_CALLS...); another
	// attempt may do better.
	ErrUnusableAnswer = errors.New("the model ended without a usable answer")
	// ErrUnsupportedRequest: the request holds something Gemini cannot take (an http image
	// URL) though another provider might; it is reported before any call, as an
	// *UpstreamError of category invalid_request with Status 0, on which the gateway tries
	// the model's next route.
	ErrUnsupportedRequest = errors.New("request not supported by Gemini")
)

// canonicalStatus maps google.rpc.Code names to the HTTP status Google pairs them with, for
// errors that come without an HTTP status (inside a stream).
var canonicalStatus = map[string]int{
	"INVALID_ARGUMENT": 400, "FAILED_PRECONDITION": 400, "OUT_OF_RANGE": 400,
	"UNAUTHENTICATED": 401, "PERMISSION_DENIED": 403, "NOT_FOUND": 404,
	"ABORTED": 409, "ALREADY_EXISTS": 409, "RESOURCE_EXHAUSTED": 429, "CANCELLED": 499,
	"UNKNOWN": 500, "INTERNAL": 500, "DATA_LOSS": 500, "UNIMPLEMENTED": 501,
	"UNAVAILABLE": 503, "DEADLINE_EXCEEDED": 504,
}

// ParseError turns a non-2xx answer into an *UpstreamError. Google's envelope
// {"error":{"code","message","status","details"}} (also wrapped in an array, as
// streamGenerateContent without alt=sse sends it) gives Code (the canonical status, such as
// INVALID_ARGUMENT, also in Type) and Message; the category comes from the HTTP status,
// refined by the body (translation map §3.12):
//
//   - 400 with ErrorInfo reason API_KEY_INVALID: credentials invalid;
//   - 400 FAILED_PRECONDITION about the location or the free tier: region restriction;
//   - 400 "...exceeds the maximum number of tokens...": invalid request, Code
//     context_length_exceeded; any other 400: invalid request;
//   - 401, 403 PERMISSION_DENIED: credentials invalid, or not configured when the adapter
//     sent no key (or Google says "unregistered callers"); 403 for a disabled API: access
//     missing;
//   - 404: model unavailable;
//   - 429 RESOURCE_EXHAUSTED: rate limited, retryable, RetryAfter from RetryInfo.retryDelay
//     or Retry-After; but access missing when it is a quota or billing matter (a "limit: 0"
//     quota, a per-day quota, billing trouble, or "exceeded your current quota" with no
//     retry delay);
//   - 500 INTERNAL, 503 UNAVAILABLE, 504 DEADLINE_EXCEEDED and other 5xx: server error,
//     retryable.
//
// The body must not contain the caller's credentials; the adapter redacts its key first.
func ParseError(provider string, status int, h http.Header, body []byte, keyConfigured bool) *providers.UpstreamError {
	e := &providers.UpstreamError{Provider: provider, Status: status, Payload: providers.Preview(body)}
	info := readErrorBody(body)
	e.Code, e.Type, e.Message = info.status, info.status, info.message
	e.RetryAfter = info.retryDelay
	if !info.hasRetryDelay {
		e.RetryAfter = upstreamhttp.RetryAfterHeader(h, time.Now())
	}
	var code string
	e.Category, e.Retryable, code = classify(status, info, keyConfigured)
	if code != "" {
		e.Code = code
	}
	return e
}

// errorInfo is what the classification reads from an error body.
type errorInfo struct {
	code          int
	status        string
	message       string
	reasons       []string
	quotaIDs      []string
	retryDelay    time.Duration
	hasRetryDelay bool
}

func readErrorBody(body []byte) errorInfo {
	var info errorInfo
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '[' {
		var list []json.RawMessage
		if json.Unmarshal(body, &list) == nil && len(list) > 0 {
			body = bytes.TrimSpace(list[0])
		}
	}
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	if len(body) == 0 || body[0] != '{' || json.Unmarshal(body, &env) != nil || len(env.Error) == 0 {
		// Plain text is a useful message; an HTML error page is not.
		if len(body) > 0 && body[0] != '<' && body[0] != '{' {
			info.message = upstreamhttp.Truncate(string(body), 256)
		}
		return info
	}
	raw := bytes.TrimSpace(env.Error)
	if len(raw) > 0 && raw[0] == '"' {
		_ = json.Unmarshal(raw, &info.message)
		info.message = upstreamhttp.Truncate(info.message, upstreamhttp.MaxMessage)
		return info
	}
	var st ErrorStatus
	if json.Unmarshal(raw, &st) != nil {
		// A field of an unexpected type: read what can be read.
		var loose struct {
			Message string `json:"message"`
			Status  string `json:"status"`
		}
		_ = json.Unmarshal(raw, &loose)
		st.Message, st.Status = loose.Message, loose.Status
	}
	info.code = int(st.Code)
	info.status = upstreamhttp.Truncate(st.Status, 64)
	info.message = upstreamhttp.Truncate(st.Message, upstreamhttp.MaxMessage)
	for _, d := range st.Details {
		var det ErrorDetail
		if json.Unmarshal(d, &det) != nil {
			continue
		}
		if det.Reason != "" {
			info.reasons = append(info.reasons, det.Reason)
		}
		for _, v := range det.Violations {
			info.quotaIDs = append(info.quotaIDs, v.QuotaID)
		}
		if d, ok := parseRetryDelay(det.RetryDelay); ok {
			info.retryDelay, info.hasRetryDelay = d, true
		}
	}
	return info
}

func (i errorInfo) hasReason(r string) bool {
	for _, have := range i.reasons {
		if have == r {
			return true
		}
	}
	return false
}

// classify gives the category and retryability of an error, and a code that replaces the
// canonical status when the error is better known by it.
func classify(status int, info errorInfo, keyConfigured bool) (providers.Category, bool, string) {
	if status < 400 {
		// A redirect or other non-error status from an API is a broken upstream, not the
		// caller's fault.
		return providers.CategoryServerError, false, ""
	}
	msg := strings.ToLower(info.message)
	if info.hasReason("API_KEY_INVALID") || info.hasReason("API_KEY_EXPIRED") || strings.Contains(msg, "api key not valid") || strings.Contains(msg, "api key expired") {
		return providers.CategoryCredentialsInvalid, false, ""
	}
	if isLocationError(msg) {
		return providers.CategoryRegionRestriction, false, ""
	}
	switch status {
	case http.StatusBadRequest:
		if info.status == "FAILED_PRECONDITION" && strings.Contains(msg, "free tier") {
			return providers.CategoryRegionRestriction, false, ""
		}
		if strings.Contains(msg, "exceeds the maximum number of tokens") ||
			strings.Contains(msg, "input token count") && strings.Contains(msg, "exceeds") {
			return providers.CategoryInvalidRequest, false, "context_length_exceeded"
		}
		return providers.CategoryInvalidRequest, false, ""
	case http.StatusUnauthorized, http.StatusForbidden:
		if !keyConfigured || strings.Contains(msg, "unregistered callers") {
			return providers.CategoryCredentialsNotConfigured, false, ""
		}
		if info.hasReason("SERVICE_DISABLED") || strings.Contains(msg, "has not been used in project") ||
			strings.Contains(msg, "it is disabled") {
			return providers.CategoryAccessMissing, false, ""
		}
		return providers.CategoryCredentialsInvalid, false, ""
	case http.StatusNotFound:
		return providers.CategoryModelUnavailable, false, ""
	case http.StatusTooManyRequests:
		if isQuotaExhausted(info, msg) {
			return providers.CategoryAccessMissing, false, ""
		}
		return providers.CategoryRateLimited, true, ""
	case 499:
		// CANCELLED by Google, not by us: the caller's own cancellation never reaches here.
		return providers.CategoryServerError, true, ""
	}
	cat, retry := providers.ClassifyStatus(status)
	return cat, retry, ""
}

func isLocationError(msg string) bool {
	return strings.Contains(msg, "user location is not supported") ||
		strings.Contains(msg, "not available in your country") ||
		strings.Contains(msg, "location is not supported")
}

// isQuotaExhausted tells a 429 that waiting a little will not fix: no quota at all on this
// key for the model ("limit: 0"), a per-day quota, billing trouble, or Google's "exceeded
// your current quota" without a retry delay. The per-minute limits of the free tier also
// say "check your plan and billing details", but come with a retry delay.
func isQuotaExhausted(info errorInfo, msg string) bool {
	if strings.Contains(msg, "limit: 0") {
		return true
	}
	for _, id := range info.quotaIDs {
		if strings.Contains(strings.ToLower(id), "perday") {
			return true
		}
	}
	if strings.Contains(msg, "billing") && !strings.Contains(msg, "plan and billing details") {
		return true
	}
	return !info.hasRetryDelay && strings.Contains(msg, "exceeded your current quota")
}

// parseRetryDelay reads a google.protobuf.Duration in JSON form ("7s", "0.5s", "34.1234s").
func parseRetryDelay(s string) (time.Duration, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, false
	}
	secs, ok := strings.CutSuffix(s, "s")
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(secs, 64)
	if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return min(time.Duration(min(f, upstreamhttp.MaxRetryWait.Seconds())*float64(time.Second)), upstreamhttp.MaxRetryWait), true
}

// streamError turns an error frame of a stream (or an error object in a 200 body) into an
// *UpstreamError: the status is its code, or the one its canonical status stands for.
func streamError(provider string, frame []byte) *providers.UpstreamError {
	info := readErrorBody(frame)
	status := info.code
	if status < 400 || status > 599 {
		status = canonicalStatus[info.status]
	}
	if status == 0 {
		status = http.StatusInternalServerError
	}
	e := ParseError(provider, status, nil, frame, true)
	if info.code < 400 || info.code > 599 {
		e.Status = 0 // no status was reported; the one above only classified
	}
	if e.Message == "" {
		e.Message = "upstream reported an error in the stream"
	}
	return e
}

// finishFailure is the error of an answer that ended with a finish reason that leaves it
// unusable.
func finishFailure(provider, reason, message string) *providers.UpstreamError {
	msg := "the model ended with " + reason
	if message != "" {
		msg += ": " + upstreamhttp.Truncate(message, upstreamhttp.MaxMessage)
	}
	return &providers.UpstreamError{
		Provider:  provider,
		Code:      reason,
		Message:   msg,
		Category:  providers.CategoryServerError,
		Retryable: true,
		Err:       fmt.Errorf("%w: %s", ErrUnusableAnswer, reason),
	}
}

// requestError is the refusal of a request the adapter cannot encode: an invalid request
// with Status 0, since no call was made. One Gemini alone cannot take (ErrUnsupportedRequest)
// is marked Unsupported: the gateway tries the model's next route, and answers this refusal
// when none takes it.
func requestError(provider string, err error) *providers.UpstreamError {
	return &providers.UpstreamError{
		Provider:    provider,
		Category:    providers.CategoryInvalidRequest,
		Message:     upstreamhttp.Truncate(err.Error(), upstreamhttp.MaxMessage),
		Err:         err,
		Unsupported: errors.Is(err, ErrUnsupportedRequest),
	}
}
