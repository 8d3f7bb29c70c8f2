package elevenlabs

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
	// ErrUnsupportedRequest: the request asks for something ElevenLabs cannot do (an aac or
	// flac speech, a translation); it is refused before any call, as an *UpstreamError of
	// category invalid_request.
	ErrUnsupportedRequest = errors.New("request not supported by ElevenLabs")
	// ErrMalformedResponse: a 2xx transcription body was not the expected JSON.
	ErrMalformedResponse = upstreamhttp.ErrMalformedResponse
	// ErrIdleTimeout: no audio arrived within Config.StreamIdleTimeout.
	ErrIdleTimeout = upstreamhttp.ErrIdleTimeout
	// ErrAttemptTimeout: the attempt took longer than Config.Timeout.
	ErrAttemptTimeout = upstreamhttp.ErrAttemptTimeout
)

// ParseError turns a non-2xx answer into an *UpstreamError. ElevenLabs' shapes
// {"detail":{"status","message"}} (Code is the status, such as quota_exceeded),
// {"detail":"text"}, FastAPI's validation list {"detail":[{"loc","msg","type"}]} and plain
// text are read; the category comes from the HTTP status, refined by the body:
//
//   - 401 and 403: credentials invalid, or not configured when the adapter sent no key; but
//     access missing for an exhausted quota (quota_exceeded, which ElevenLabs answers with
//     401), a key without the endpoint's permission (missing_permissions) or an account
//     held for unusual activity (detected_unusual_activity);
//   - 402: access missing;
//   - 404, and voice_not_found or model_not_found whatever the status: model unavailable,
//     since another route (another account's voices) may have it;
//   - 429 (too_many_concurrent_requests, system_busy): rate limited, retryable, RetryAfter
//     from Retry-After;
//   - 5xx: server error, retryable;
//   - 400, 422 and other 4xx: invalid request.
//
// The body must not contain the caller's credentials; the adapter redacts its key first.
func ParseError(provider string, status int, h http.Header, body []byte, keyConfigured bool) *providers.UpstreamError {
	e := &providers.UpstreamError{Provider: provider, Status: status, Payload: providers.Preview(body)}
	e.Code, e.Message, e.Param = readErrorBody(body)
	e.Type = e.Code
	e.RetryAfter = upstreamhttp.RetryAfter(h, time.Now())
	e.Category, e.Retryable = classify(status, e.Code, e.Message, keyConfigured)
	return e
}

// errorDetail is ElevenLabs' detail object.
type errorDetail struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

// validationIssue is one entry of FastAPI's validation list.
type validationIssue struct {
	Loc  []any  `json:"loc"`
	Msg  string `json:"msg"`
	Type string `json:"type"`
}

// readErrorBody reads the code, message and offending parameter of an error body.
func readErrorBody(body []byte) (code, message, param string) {
	body = bytes.TrimSpace(body)
	var env struct {
		Detail json.RawMessage `json:"detail"`
	}
	if len(body) == 0 || body[0] != '{' || json.Unmarshal(body, &env) != nil || len(env.Detail) == 0 {
		// Plain text is a useful message; an HTML error page or unknown JSON is not.
		if len(body) > 0 && body[0] != '<' && body[0] != '{' {
			message = upstreamhttp.Truncate(string(body), 256)
		}
		return "", message, ""
	}
	raw := bytes.TrimSpace(env.Detail)
	switch raw[0] {
	case '"':
		_ = json.Unmarshal(raw, &message)
	case '{':
		var d errorDetail
		if json.Unmarshal(raw, &d) == nil {
			code, message = d.Status, d.Message
		}
	case '[':
		var list []validationIssue
		if json.Unmarshal(raw, &list) == nil && len(list) > 0 {
			code, message = list[0].Type, list[0].Msg
			// loc is ["body", "field"]: the field is the parameter at fault.
			if n := len(list[0].Loc); n > 1 {
				if s, ok := list[0].Loc[n-1].(string); ok {
					param = s
				}
			}
			if param != "" && message != "" {
				message = param + ": " + message
			}
		}
	}
	return upstreamhttp.Truncate(code, 64), upstreamhttp.Truncate(message, upstreamhttp.MaxMessage), upstreamhttp.Truncate(param, 64)
}

// classify gives the category and retryability of an error answer.
func classify(status int, code, msg string, keyConfigured bool) (providers.Category, bool) {
	if status < 400 {
		// A redirect or other non-error status from an API is a broken upstream, not the
		// caller's fault.
		return providers.CategoryServerError, false
	}
	code, msg = strings.ToLower(code), strings.ToLower(msg)
	switch {
	case code == "quota_exceeded" || strings.Contains(msg, "exceeds your quota"),
		code == "missing_permissions", code == "detected_unusual_activity", code == "payment_required":
		return providers.CategoryAccessMissing, false
	case code == "voice_not_found" || code == "model_not_found":
		return providers.CategoryModelUnavailable, false
	}
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden:
		if !keyConfigured {
			return providers.CategoryCredentialsNotConfigured, false
		}
		return providers.CategoryCredentialsInvalid, false
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return providers.CategoryInvalidRequest, false
	}
	return providers.ClassifyStatus(status)
}

// unsupported is the refusal, before any call, of a request ElevenLabs cannot serve.
func unsupported(provider, param, msg string) *providers.UpstreamError {
	return providers.Unsupported(provider, param, msg, ErrUnsupportedRequest)
}
