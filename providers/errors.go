package providers

import (
	"errors"
	"fmt"
	"time"
)

// Category classifies an upstream failure, with the spec's provider_failure_diagnostics values.
type Category string

// Failure categories of the spec.
const (
	CategoryCredentialsNotConfigured Category = "credentials_not_configured"
	CategoryCredentialsInvalid       Category = "credentials_invalid_or_forbidden"
	CategoryAccessMissing            Category = "provider_access_missing"
	CategoryRegionRestriction        Category = "region_or_project_restriction"
	CategoryModelUnavailable         Category = "model_unavailable_for_endpoint"
	CategoryRateLimited              Category = "rate_limited"
	CategoryServerError              Category = "server_error"
	// CategoryInvalidRequest is the caller's own fault (a 400 of the upstream): no fallback helps.
	CategoryInvalidRequest Category = "invalid_request"
	// CategoryNotFound is a job, or a job's content, that the upstream does not have (a
	// 404 on a job's status, content or deletion; a variant it does not make): a 404 to the
	// client, not a failure of the provider, so never one of its diagnostics.
	CategoryNotFound Category = "not_found"
)

// UpstreamError is every failure of an upstream call: a non-2xx answer, a connection error,
// a timeout, or an error reported inside a stream. Callers match it with errors.As.
type UpstreamError struct {
	Provider string
	// Status is the upstream HTTP status, 0 when no response arrived.
	Status int
	// Code, Type, Message and Param are read from the upstream error body when it has them.
	Code    string
	Type    string
	Message string
	Param   string
	// Category is the neutral classification.
	Category Category
	// Retryable tells whether another attempt (on this or another route) may succeed.
	Retryable bool
	// RetryAfter is the upstream's Retry-After, zero when absent.
	RetryAfter time.Duration
	// Payload is a short preview of the upstream body, never containing our credentials.
	Payload string
	// Timeout is set when the failure was a timeout.
	Timeout bool
	// Unsupported is set on an adapter's refusal, before any call, of what its upstream
	// cannot do (a speech format it does not make): another route's upstream may, and is
	// tried; the refusal answers when none does.
	Unsupported bool
	// Err is the underlying transport error, if any.
	Err error
}

func (e *UpstreamError) Error() string {
	switch {
	case e.Status == 0 && e.Err != nil:
		return fmt.Sprintf("provider %s: %v", e.Provider, e.Err)
	case e.Message != "":
		return fmt.Sprintf("provider %s: status %d: %s", e.Provider, e.Status, e.Message)
	default:
		return fmt.Sprintf("provider %s: status %d", e.Provider, e.Status)
	}
}

func (e *UpstreamError) Unwrap() error { return e.Err }

// Unsupported is an adapter's refusal, before any call, of what its upstream cannot do (a
// format it does not make): an invalid request with no status, code unsupported_value, and
// marked Unsupported so that the gateway tries the model's next route. param names the
// request field at fault; cause, the adapter's sentinel, is wrapped for errors.Is.
func Unsupported(provider, param, msg string, cause error) *UpstreamError {
	return &UpstreamError{
		Provider:    provider,
		Category:    CategoryInvalidRequest,
		Code:        "unsupported_value",
		Param:       param,
		Message:     msg,
		Err:         fmt.Errorf("%w: %s", cause, msg),
		Unsupported: true,
	}
}

// AsUpstreamError returns err as an *UpstreamError when it is one.
func AsUpstreamError(err error) (*UpstreamError, bool) {
	var ue *UpstreamError
	ok := errors.As(err, &ue)
	return ue, ok
}

// ClassifyStatus gives the category and retryability of an HTTP status when the body says
// nothing more precise. Adapters refine it from their error bodies.
func ClassifyStatus(status int) (Category, bool) {
	switch {
	case status == 401:
		return CategoryCredentialsInvalid, false
	case status == 402:
		return CategoryAccessMissing, false
	case status == 403:
		return CategoryCredentialsInvalid, false
	case status == 404:
		return CategoryModelUnavailable, false
	case status == 408:
		return CategoryServerError, true
	case status == 429:
		return CategoryRateLimited, true
	case status >= 500:
		return CategoryServerError, true
	default:
		return CategoryInvalidRequest, false
	}
}

// Fallbackable tells whether another route may succeed where this failure happened:
// everything but the caller's own invalid request.
func (e *UpstreamError) Fallbackable() bool {
	return e.Category != CategoryInvalidRequest
}

// PreviewLimit is the number of bytes of an upstream body kept in Payload.
const PreviewLimit = 512

// Preview trims an upstream body to PreviewLimit bytes for diagnostics.
func Preview(b []byte) string {
	if len(b) > PreviewLimit {
		b = b[:PreviewLimit]
	}
	return string(b)
}
