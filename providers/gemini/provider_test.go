package gemini

import (
	"context"
	"errors"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// A released answer's buffer is overwritten: a decoded answer still referring to it fails
// the package's tests.
func init() { upstreamhttp.ScribbleReleased = true }

func TestNew(t *testing.T) {
	cases := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "defaults", cfg: Config{APIKey: "k"}},
		{name: "relative base URL", cfg: Config{BaseURL: "/v1beta"}, wantErr: "absolute"},
		{name: "key in the base URL", cfg: Config{BaseURL: "https://x.test/v1beta?key=abc"}, wantErr: "no query"},
		{name: "negative timeout", cfg: Config{Timeout: -time.Second}, wantErr: "negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.cfg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Name() != "gemini" || p.base != DefaultBaseURL || p.idle != DefaultStreamIdleTimeout {
				t.Errorf("defaults not applied: name %q base %q idle %v", p.Name(), p.base, p.idle)
			}
		})
	}
}

func TestRequestWire(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, ":streamGenerateContent") {
			writeSSE(w, `{"candidates":[{"content":{"parts":[{"text":"ok"}],"role":"model"},"finishReason":"STOP"}]}`)
			return
		}
		writeJSON(w, 200, `{"candidates":[{"content":{"parts":[{"text":"ok"}],"role":"model"},"finishReason":"STOP"}]}`)
	})
	p := f.provider(t, func(c *Config) { c.Headers = map[string]string{"X-Goog-User-Project": "proj-1"} })
	req := simpleRequest()
	req.Model = "models/gemini-2.5-flash"
	if _, err := p.Chat(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	st, err := p.ChatStream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := collect(t, st); err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	want, _ := EncodeRequest(req)
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	for i, tc := range []struct{ path, query string }{
		{"/v1beta/models/gemini-2.5-flash:generateContent", ""},
		{"/v1beta/models/gemini-2.5-flash:streamGenerateContent", "alt=sse"},
	} {
		r := reqs[i]
		if r.Method != http.MethodPost || r.Path != tc.path || r.RawQuery != tc.query {
			t.Errorf("request %d: %s %s?%s, want POST %s?%s", i, r.Method, r.Path, r.RawQuery, tc.path, tc.query)
		}
		if got := r.Header.Get("X-Goog-Api-Key"); got != testKey {
			t.Errorf("request %d: x-goog-api-key = %q", i, got)
		}
		if strings.Contains(r.RawQuery, "key=") || strings.Contains(r.Path, testKey) {
			t.Errorf("request %d: the key is in the URL: %s?%s", i, r.Path, r.RawQuery)
		}
		if r.Header.Get("Content-Type") != "application/json" || r.Header.Get("X-Goog-User-Project") != "proj-1" {
			t.Errorf("request %d: headers %v", i, r.Header)
		}
		jsonEqual(t, r.Body, string(want))
	}
}

func TestRequestRejectedBeforeSending(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 500, `{}`) })
	p := f.provider(t)
	cases := []struct {
		name string
		req  *providers.Request
		cat  providers.Category
	}{
		{"model id with a path", &providers.Request{Model: "../../files/x", Messages: []providers.Message{user("x")}}, providers.CategoryModelUnavailable},
		{"model id with a method", &providers.Request{Model: "gemini:countTokens?", Messages: []providers.Message{user("x")}}, providers.CategoryModelUnavailable},
		{"http image URL", &providers.Request{Model: "gemini-2.5-flash", Messages: []providers.Message{{Role: providers.RoleUser,
			Content: []providers.Part{{Type: providers.PartImage, ImageURL: "http://insecure.test/a.png"}}}}}, providers.CategoryInvalidRequest},
		{"orphan tool result", &providers.Request{Model: "gemini-2.5-flash", Messages: []providers.Message{user("x"), toolResult("zz", "r")}}, providers.CategoryInvalidRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.Chat(context.Background(), tc.req)
			ue := asUpstream(t, err)
			if ue.Category != tc.cat || ue.Status != 0 || ue.Retryable {
				t.Errorf("got %+v, want category %s, status 0, not retryable", ue, tc.cat)
			}
			if _, err := p.ChatStream(context.Background(), tc.req); err == nil {
				t.Error("ChatStream accepted it")
			}
		})
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d requests reached the upstream", n)
	}
}

func TestChat(t *testing.T) {
	cases := []struct {
		name string
		body string
		want providers.Response
	}{
		{
			name: "text, thoughts and usage",
			body: `{"candidates":[{"content":{"parts":[{"text":"**Planning**\nThe user greets.","thought":true},{"text":"Hello!","thoughtSignature":"Q2lnbmF0dXJl"}],"role":"model"},
				"finishReason":"STOP","index":0}],
				"usageMetadata":{"promptTokenCount":12,"candidatesTokenCount":3,"totalTokenCount":40,"thoughtsTokenCount":25,"promptTokensDetails":[{"modality":"TEXT","tokenCount":12}]},
				"modelVersion":"gemini-2.5-flash","responseId":"eXamPlE-id"}`,
			want: providers.Response{ID: "eXamPlE-id", Model: "gemini-2.5-flash", Reasoning: "**Planning**\nThe user greets.",
				ReasoningSignature: providers.Tag(providers.SigGemini, "Q2lnbmF0dXJl"), Text: "Hello!", FinishReason: providers.FinishStop,
				Usage: providers.Usage{Input: 12, Output: 3, Reasoning: 25}},
		},
		{
			name: "safety block",
			body: `{"promptFeedback":{"blockReason":"SAFETY","safetyRatings":[{"category":"HARM_CATEGORY_DANGEROUS_CONTENT","probability":"HIGH"}]},
				"usageMetadata":{"promptTokenCount":9,"totalTokenCount":9},"modelVersion":"gemini-2.5-flash"}`,
			want: providers.Response{Model: "gemini-2.5-flash", FinishReason: providers.FinishContentFilter, Usage: providers.Usage{Input: 9}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, tc.body) })
			got, err := f.provider(t).Chat(context.Background(), simpleRequest())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", *got, tc.want)
			}
		})
	}
}

func TestChatToolNamesRestored(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, `{"candidates":[{"content":{"parts":[{"functionCall":{"name":"my_tool","args":{"q":"x"}}}],"role":"model"},"finishReason":"STOP"}]}`)
	})
	req := simpleRequest()
	req.Tools = []providers.Tool{{Name: "my tool"}}
	got, err := f.provider(t).Chat(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.ToolCalls) != 1 || got.ToolCalls[0].Name != "my tool" || got.FinishReason != providers.FinishToolCalls {
		t.Errorf("got %+v", got)
	}
}

func TestChatUnusableAnswers(t *testing.T) {
	cases := []struct {
		name, body, wantMsg string
		cat                 providers.Category
		retry               bool
	}{
		{"malformed function call", `{"candidates":[{"finishReason":"MALFORMED_FUNCTION_CALL","finishMessage":"Malformed function call: default_api.f(","index":0}]}`,
			"MALFORMED_FUNCTION_CALL", providers.CategoryServerError, true},
		{"error object with 200", `{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}`,
			"overloaded", providers.CategoryServerError, true},
		{"not JSON", `<html>oops</html>`, "malformed upstream response", providers.CategoryServerError, true},
		{"no candidates", `{"usageMetadata":{"promptTokenCount":1}}`, "malformed upstream response", providers.CategoryServerError, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, tc.body) })
			_, err := f.provider(t).Chat(context.Background(), simpleRequest())
			ue := asUpstream(t, err)
			if ue.Category != tc.cat || ue.Retryable != tc.retry || !strings.Contains(ue.Message, tc.wantMsg) {
				t.Errorf("got %+v", ue)
			}
		})
	}
}

// Gemini's real error bodies (translation map §1.D, §3.12).
const (
	errAPIKeyInvalid = `{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT",
		"details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com",
		"metadata":{"service":"generativelanguage.googleapis.com"}},{"@type":"type.googleapis.com/google.rpc.LocalizedMessage","locale":"en-US",
		"message":"API key not valid. Please pass a valid API key."}]}}`
	errLocation  = `{"error":{"code":400,"message":"User location is not supported for the API use.","status":"FAILED_PRECONDITION"}}`
	errFreeTier  = `{"error":{"code":400,"message":"Gemini API free tier is not available in your country. Please enable billing on your project in Google AI Studio.","status":"FAILED_PRECONDITION"}}`
	errTooLong   = `{"error":{"code":400,"message":"The input token count (1294023) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}`
	errBadSchema = `{"error":{"code":400,"message":"Invalid JSON payload received. Unknown name \"additionalProperties\" at 'tools[0].function_declarations[0].parameters': Cannot find field.","status":"INVALID_ARGUMENT",
		"details":[{"@type":"type.googleapis.com/google.rpc.BadRequest","fieldViolations":[{"field":"tools[0].function_declarations[0].parameters","description":"Invalid JSON payload received. Unknown name \"additionalProperties\""}]}]}}`
	errUnregistered = `{"error":{"code":403,"message":"Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.","status":"PERMISSION_DENIED"}}`
	errBlockedKey   = `{"error":{"code":403,"message":"Requests to this API generativelanguage.googleapis.com method google.ai.generativelanguage.v1beta.GenerativeService.GenerateContent are blocked.","status":"PERMISSION_DENIED",
		"details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_SERVICE_BLOCKED","domain":"googleapis.com"}]}}`
	errDisabled = `{"error":{"code":403,"message":"Generative Language API has not been used in project 123456 before or it is disabled. Enable it by visiting https://console.developers.google.com/apis/api/generativelanguage.googleapis.com/overview?project=123456 then retry.","status":"PERMISSION_DENIED",
		"details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"SERVICE_DISABLED","domain":"googleapis.com"}]}}`
	errNotFound  = `{"error":{"code":404,"message":"models/gemini-9-ultra is not found for API version v1beta, or is not supported for generateContent. Call ListModels to see the list of available models and their supported methods.","status":"NOT_FOUND"}}`
	errPerMinute = `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.","status":"RESOURCE_EXHAUSTED",
		"details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests",
		"quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier","quotaDimensions":{"location":"global","model":"gemini-2.0-flash"},"quotaValue":"15"}]},
		{"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Learn more about Gemini API quotas","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]},
		{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"7s"}]}}`
	errExhausted = `{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}`
	errQuota     = `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.","status":"RESOURCE_EXHAUSTED"}}`
	errLimitZero = `{"error":{"code":429,"message":"You exceeded your current quota. Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 0, model: gemini-2.5-pro","status":"RESOURCE_EXHAUSTED",
		"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"29.5s"}]}}`
	errPerDay = `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.","status":"RESOURCE_EXHAUSTED",
		"details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]},
		{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"3600s"}]}}`
	errInternal    = `{"error":{"code":500,"message":"An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting","status":"INTERNAL"}}`
	errOverloaded  = `{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}`
	errDeadline    = `{"error":{"code":504,"message":"Deadline expired before operation could complete.","status":"DEADLINE_EXCEEDED"}}`
	errEchoesKey   = `{"error":{"code":400,"message":"API key not valid: ` + testKey + `","status":"INVALID_ARGUMENT"}}`
	errArrayFormat = `[{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}]`
)

func TestChatErrors(t *testing.T) {
	cases := []struct {
		name       string
		status     int
		body       string
		header     map[string]string
		noKey      bool
		cat        providers.Category
		code       string
		retry      bool
		retryAfter time.Duration
	}{
		{name: "API key invalid", status: 400, body: errAPIKeyInvalid, cat: providers.CategoryCredentialsInvalid, code: "INVALID_ARGUMENT"},
		{name: "user location", status: 400, body: errLocation, cat: providers.CategoryRegionRestriction, code: "FAILED_PRECONDITION"},
		{name: "free tier country", status: 400, body: errFreeTier, cat: providers.CategoryRegionRestriction, code: "FAILED_PRECONDITION"},
		{name: "context length", status: 400, body: errTooLong, cat: providers.CategoryInvalidRequest, code: "context_length_exceeded"},
		{name: "other invalid argument", status: 400, body: errBadSchema, cat: providers.CategoryInvalidRequest, code: "INVALID_ARGUMENT"},
		{name: "no key configured", status: 403, body: errUnregistered, noKey: true, cat: providers.CategoryCredentialsNotConfigured, code: "PERMISSION_DENIED"},
		{name: "key blocked", status: 403, body: errBlockedKey, cat: providers.CategoryCredentialsInvalid, code: "PERMISSION_DENIED"},
		{name: "api disabled", status: 403, body: errDisabled, cat: providers.CategoryAccessMissing, code: "PERMISSION_DENIED"},
		{name: "not found", status: 404, body: errNotFound, cat: providers.CategoryModelUnavailable, code: "NOT_FOUND"},
		{name: "per-minute limit", status: 429, body: errPerMinute, cat: providers.CategoryRateLimited, code: "RESOURCE_EXHAUSTED", retry: true, retryAfter: 7 * time.Second},
		{name: "exhausted with Retry-After", status: 429, body: errExhausted, header: map[string]string{"Retry-After": "3"},
			cat: providers.CategoryRateLimited, code: "RESOURCE_EXHAUSTED", retry: true, retryAfter: 3 * time.Second},
		{name: "quota without retry info", status: 429, body: errQuota, cat: providers.CategoryAccessMissing, code: "RESOURCE_EXHAUSTED"},
		{name: "limit zero", status: 429, body: errLimitZero, cat: providers.CategoryAccessMissing, code: "RESOURCE_EXHAUSTED", retryAfter: 29500 * time.Millisecond},
		{name: "per-day quota", status: 429, body: errPerDay, cat: providers.CategoryAccessMissing, code: "RESOURCE_EXHAUSTED", retryAfter: time.Hour},
		{name: "array-wrapped error", status: 429, body: errArrayFormat, cat: providers.CategoryRateLimited, code: "RESOURCE_EXHAUSTED", retry: true},
		{name: "internal", status: 500, body: errInternal, cat: providers.CategoryServerError, code: "INTERNAL", retry: true},
		{name: "unavailable", status: 503, body: errOverloaded, cat: providers.CategoryServerError, code: "UNAVAILABLE", retry: true},
		{name: "deadline exceeded", status: 504, body: errDeadline, cat: providers.CategoryServerError, code: "DEADLINE_EXCEEDED", retry: true},
		{name: "proxy HTML page", status: 502, body: `<html><body>Bad Gateway</body></html>`, cat: providers.CategoryServerError, retry: true},
		{name: "key echoed back is redacted", status: 400, body: errEchoesKey, cat: providers.CategoryCredentialsInvalid, code: "INVALID_ARGUMENT"},
		{name: "redirect", status: 302, body: ``, header: map[string]string{"Location": "https://elsewhere.test/"}, cat: providers.CategoryServerError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				writeJSON(w, tc.status, tc.body)
			})
			p := f.provider(t, func(c *Config) {
				if tc.noKey {
					c.APIKey = ""
				}
			})
			for _, stream := range []bool{false, true} {
				var err error
				if stream {
					_, err = p.ChatStream(context.Background(), simpleRequest())
				} else {
					_, err = p.Chat(context.Background(), simpleRequest())
				}
				ue := asUpstream(t, err)
				if ue.Status != tc.status || ue.Category != tc.cat || ue.Code != tc.code || ue.Retryable != tc.retry || ue.RetryAfter != tc.retryAfter {
					t.Errorf("stream=%v: got status %d category %s code %q retryable %v retry after %v, want %d %s %q %v %v (message %q)",
						stream, ue.Status, ue.Category, ue.Code, ue.Retryable, ue.RetryAfter, tc.status, tc.cat, tc.code, tc.retry, tc.retryAfter, ue.Message)
				}
				if ue.Provider != "gemini" || ue.Fallbackable() != (tc.cat != providers.CategoryInvalidRequest) {
					t.Errorf("provider %q, fallbackable %v", ue.Provider, ue.Fallbackable())
				}
				noKeyIn(t, err)
			}
			if tc.noKey {
				if h := f.requests()[0].Header.Get("X-Goog-Api-Key"); h != "" {
					t.Errorf("a key was sent: %q", h)
				}
			}
		})
	}
}

func TestConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	p, err := New(Config{BaseURL: "http://" + addr + "/v1beta", APIKey: testKey, Transport: &http.Transport{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, stream := range []bool{false, true} {
		if stream {
			_, err = p.ChatStream(context.Background(), simpleRequest())
		} else {
			_, err = p.Chat(context.Background(), simpleRequest())
		}
		ue := asUpstream(t, err)
		if ue.Status != 0 || ue.Category != providers.CategoryServerError || !ue.Retryable || ue.Err == nil {
			t.Errorf("stream=%v: got %+v", stream, ue)
		}
		var opErr *net.OpError
		if !errors.As(err, &opErr) {
			t.Errorf("the dial error is not wrapped: %v", err)
		}
		noKeyIn(t, err)
	}
}

func TestAttemptTimeout(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	p := f.provider(t, func(c *Config) { c.Timeout = 50 * time.Millisecond })
	_, err := p.Chat(context.Background(), simpleRequest())
	ue := asUpstream(t, err)
	if !ue.Timeout || !ue.Retryable || ue.Category != providers.CategoryServerError || !errors.Is(err, ErrAttemptTimeout) {
		t.Errorf("got %+v", ue)
	}
}

func TestChatContextCancel(t *testing.T) {
	checkGoroutines(t)
	arrived, gone := make(chan struct{}), make(chan struct{})
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done()
		close(gone)
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel()
	}()
	_, err := f.provider(t).Chat(ctx, simpleRequest())
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if _, ok := providers.AsUpstreamError(err); ok {
		t.Errorf("the caller's cancellation is an *UpstreamError: %v", err)
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream never saw the cancellation")
	}
}
