package openai

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
)

func TestParseError(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		header     http.Header
		body       string
		noKey      bool
		category   providers.Category
		retryable  bool
		code, typ  string
		message    string
		param      string
		retryAfter time.Duration
	}{
		{
			name: "context length", status: 400,
			body:     `{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
			category: providers.CategoryInvalidRequest, code: "context_length_exceeded", typ: "invalid_request_error",
			message: "This model's maximum context length is 128000 tokens.", param: "messages",
		},
		{
			name: "not a chat model", status: 400,
			body:     `{"error":{"message":"This is not a chat model and thus not supported in the v1/chat/completions endpoint.","type":"invalid_request_error","param":"model","code":null}}`,
			category: providers.CategoryModelUnavailable, typ: "invalid_request_error", param: "model",
			message: "This is not a chat model and thus not supported in the v1/chat/completions endpoint.",
		},
		{
			name: "invalid key", status: 401,
			body:     `{"error":{"message":"Incorrect API key provided: sk-abc***xyz.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
			category: providers.CategoryCredentialsInvalid, code: "invalid_api_key", typ: "invalid_request_error",
			message: "Incorrect API key provided: sk-abc***xyz.",
		},
		{
			name: "no key configured", status: 401, noKey: true,
			body:     `{"error":{"message":"You didn't provide an API key.","type":"invalid_request_error","param":null,"code":null}}`,
			category: providers.CategoryCredentialsNotConfigured, typ: "invalid_request_error", message: "You didn't provide an API key.",
		},
		{
			name: "no organization", status: 401,
			body:     `{"error":{"message":"You must be a member of an organization to use the API.","type":"invalid_request_error","code":"no_organization"}}`,
			category: providers.CategoryAccessMissing, code: "no_organization", typ: "invalid_request_error",
			message: "You must be a member of an organization to use the API.",
		},
		{
			name: "region", status: 403,
			body:     `{"error":{"code":"unsupported_country_region_territory","message":"Country, region, or territory not supported","param":null,"type":"request_forbidden"}}`,
			category: providers.CategoryRegionRestriction, code: "unsupported_country_region_territory", typ: "request_forbidden",
			message: "Country, region, or territory not supported",
		},
		{
			name: "project without the model", status: 403,
			body:     `{"error":{"message":"Project proj_1 does not have access to model gpt-5","type":"invalid_request_error","code":"model_not_found"}}`,
			category: providers.CategoryAccessMissing, code: "model_not_found", typ: "invalid_request_error",
			message: "Project proj_1 does not have access to model gpt-5",
		},
		{
			name: "forbidden", status: 403, body: `{"error":{"message":"forbidden"}}`,
			category: providers.CategoryCredentialsInvalid, message: "forbidden",
		},
		{
			name: "model not found", status: 404,
			body:     `{"error":{"message":"The model gpt-9 does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}`,
			category: providers.CategoryModelUnavailable, code: "model_not_found", typ: "invalid_request_error",
			message: "The model gpt-9 does not exist or you do not have access to it.",
		},
		{
			name: "ollama string error", status: 404, body: `{"error":"model \"llama9\" not found, try pulling it first"}`,
			category: providers.CategoryModelUnavailable, message: `model "llama9" not found, try pulling it first`,
		},
		{
			name: "rate limit with retry-after seconds", status: 429, header: http.Header{"Retry-After": {"7"}},
			body:     `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`,
			category: providers.CategoryRateLimited, retryable: true, code: "rate_limit_exceeded", typ: "requests",
			message: "Rate limit reached", retryAfter: 7 * time.Second,
		},
		{
			name: "rate limit with retry-after-ms", status: 429, header: http.Header{"Retry-After": {"7"}, "Retry-After-Ms": {"1500"}},
			body:     `{"error":{"message":"slow down","code":"slow_down"}}`,
			category: providers.CategoryRateLimited, retryable: true, code: "slow_down", message: "slow down",
			retryAfter: 1500 * time.Millisecond,
		},
		{
			name: "quota", status: 429,
			body:     `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`,
			category: providers.CategoryAccessMissing, code: "insufficient_quota", typ: "insufficient_quota",
			message: "You exceeded your current quota",
		},
		{
			name: "credit exhausted", status: 429, body: `{"error":{"message":"no credit","code":"credit_balance_exhausted"}}`,
			category: providers.CategoryAccessMissing, code: "credit_balance_exhausted", message: "no credit",
		},
		{
			name: "server error", status: 500,
			body:     `{"error":{"message":"The server had an error","type":"server_error","param":null,"code":null}}`,
			category: providers.CategoryServerError, retryable: true, typ: "server_error", message: "The server had an error",
		},
		{
			name: "overloaded html", status: 503, body: "<html><body>503 Service Unavailable</body></html>",
			category: providers.CategoryServerError, retryable: true,
		},
		{
			name: "plain text", status: 502, body: "upstream connect error",
			category: providers.CategoryServerError, retryable: true, message: "upstream connect error",
		},
		{
			name: "vllm top-level", status: 400,
			body:     `{"object":"error","message":"max_tokens is too large","type":"BadRequestError","param":null,"code":400}`,
			category: providers.CategoryInvalidRequest, code: "400", typ: "BadRequestError", message: "max_tokens is too large",
		},
		{
			name: "fastapi detail", status: 422, body: `{"detail":[{"loc":["body","messages"],"msg":"field required","type":"missing"}]}`,
			category: providers.CategoryInvalidRequest, message: "field required",
		},
		{
			name: "mistral validation", status: 422,
			body:     `{"object":"error","message":{"detail":[{"type":"extra_forbidden","loc":["body","store"],"msg":"Extra inputs are not permitted","input":false}]},"type":"invalid_request_error","param":null,"code":null}`,
			category: providers.CategoryInvalidRequest, typ: "invalid_request_error", message: "Extra inputs are not permitted",
		},
		{
			name: "detail string", status: 401, body: `{"detail":"Invalid token"}`,
			category: providers.CategoryCredentialsInvalid, message: "Invalid token",
		},
		{
			name: "empty body", status: 500, category: providers.CategoryServerError, retryable: true,
		},
		{
			name: "redirect", status: 302, category: providers.CategoryServerError,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := ParseError("openai", tc.status, tc.header, []byte(tc.body), !tc.noKey)
			if e.Provider != "openai" || e.Status != tc.status {
				t.Fatalf("provider %q status %d", e.Provider, e.Status)
			}
			if e.Category != tc.category || e.Retryable != tc.retryable {
				t.Fatalf("category %s retryable %v, want %s %v", e.Category, e.Retryable, tc.category, tc.retryable)
			}
			if e.Code != tc.code || e.Type != tc.typ || e.Message != tc.message || e.Param != tc.param {
				t.Fatalf("code %q type %q message %q param %q", e.Code, e.Type, e.Message, e.Param)
			}
			if e.RetryAfter != tc.retryAfter {
				t.Fatalf("retry after %v, want %v", e.RetryAfter, tc.retryAfter)
			}
			if e.Payload != providers.Preview([]byte(tc.body)) {
				t.Fatalf("payload %q", e.Payload)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name   string
		header http.Header
		want   time.Duration
	}{
		{"none", nil, 0},
		{"seconds", http.Header{"Retry-After": {"20"}}, 20 * time.Second},
		{"fractional seconds", http.Header{"Retry-After": {"0.5"}}, 500 * time.Millisecond},
		{"http date", http.Header{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, 90 * time.Second},
		{"date in the past", http.Header{"Retry-After": {now.Add(-time.Hour).Format(http.TimeFormat)}}, 0},
		{"milliseconds win", http.Header{"Retry-After": {"20"}, "Retry-After-Ms": {"250"}}, 250 * time.Millisecond},
		{"bad milliseconds fall back", http.Header{"Retry-After": {"3"}, "Retry-After-Ms": {"soon"}}, 3 * time.Second},
		{"garbage", http.Header{"Retry-After": {"later"}}, 0},
		{"negative", http.Header{"Retry-After": {"-4"}}, 0},
		{"capped", http.Header{"Retry-After": {"1e30"}}, 24 * time.Hour},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := upstreamhttp.RetryAfter(tc.header, now); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestStreamErrorClassification(t *testing.T) {
	tests := []struct {
		frame     string
		status    int
		category  providers.Category
		retryable bool
	}{
		{`{"error":{"message":"overloaded","type":"server_error"}}`, 0, providers.CategoryServerError, true},
		{`{"error":{"message":"slow","code":"rate_limit_exceeded"}}`, 0, providers.CategoryRateLimited, true},
		{`{"error":{"message":"quota","type":"insufficient_quota","code":"insufficient_quota"}}`, 0, providers.CategoryAccessMissing, false},
		{`{"error":{"message":"too long","code":"context_length_exceeded"}}`, 0, providers.CategoryInvalidRequest, false},
		{`{"error":{"message":"Provider returned error","code":429}}`, 429, providers.CategoryRateLimited, true},
		{`{"error":{"message":"boom","code":502}}`, 502, providers.CategoryServerError, true},
		{`{"error":"something broke"}`, 0, providers.CategoryServerError, true},
	}
	for _, tc := range tests {
		t.Run(tc.frame, func(t *testing.T) {
			e := streamError("p", []byte(tc.frame))
			if e.Status != tc.status || e.Category != tc.category || e.Retryable != tc.retryable {
				t.Fatalf("status %d category %s retryable %v", e.Status, e.Category, e.Retryable)
			}
			if e.Message == "" || strings.Contains(e.Error(), "status 0") {
				t.Fatalf("message %q, error %q", e.Message, e.Error())
			}
		})
	}
}
