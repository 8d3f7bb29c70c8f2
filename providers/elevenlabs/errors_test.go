package elevenlabs

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// TestElevenLabsErrorClassification: ElevenLabs' error answers, as it sends them, become the
// neutral categories, on both endpoints; the key the body quotes never shows.
func TestElevenLabsErrorClassification(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		header     http.Header
		body       string
		category   providers.Category
		retryable  bool
		retryAfter time.Duration
		code       string
		message    string
	}{
		{name: "invalid key", status: 401,
			body:     `{"detail":{"status":"invalid_api_key","message":"Invalid API key: ` + testKey + `"}}`,
			category: providers.CategoryCredentialsInvalid, code: "invalid_api_key", message: "Invalid API key: [redacted]"},
		{name: "quota exceeded", status: 401,
			body:     `{"detail":{"status":"quota_exceeded","message":"This request exceeds your quota of 10000. You have 0 credits remaining, while 91 credits are required for this request."}}`,
			category: providers.CategoryAccessMissing, code: "quota_exceeded", message: "This request exceeds your quota"},
		{name: "missing permission", status: 401,
			body:     `{"detail":{"status":"missing_permissions","message":"The API key you used is missing the permission speech_to_text to execute this operation."}}`,
			category: providers.CategoryAccessMissing, code: "missing_permissions"},
		{name: "rate limited", status: 429, header: http.Header{"Retry-After": {"3"}},
			body:     `{"detail":{"status":"too_many_concurrent_requests","message":"Too many concurrent requests. Your current subscription is associated with a maximum of 2 concurrent requests."}}`,
			category: providers.CategoryRateLimited, retryable: true, retryAfter: 3 * time.Second, code: "too_many_concurrent_requests"},
		{name: "busy", status: 429,
			body:     `{"detail":{"status":"system_busy","message":"We are experiencing heavy traffic, please try again."}}`,
			category: providers.CategoryRateLimited, retryable: true, code: "system_busy"},
		{name: "server error", status: 500, body: `{"detail":"Internal Server Error"}`,
			category: providers.CategoryServerError, retryable: true, message: "Internal Server Error"},
		{name: "html gateway error", status: 502, body: `<html><body>502 Bad Gateway</body></html>`,
			category: providers.CategoryServerError, retryable: true},
		{name: "validation", status: 422,
			body:     `{"detail":[{"loc":["body","model_id"],"msg":"Field required","type":"missing"}]}`,
			category: providers.CategoryInvalidRequest, code: "missing", message: "model_id: Field required"},
		{name: "bad request", status: 400,
			body:     `{"detail":{"status":"invalid_parameters","message":"speed must be between 0.7 and 1.2"}}`,
			category: providers.CategoryInvalidRequest, code: "invalid_parameters", message: "speed must be between 0.7 and 1.2"},
		{name: "unknown voice", status: 400,
			body:     `{"detail":{"status":"voice_not_found","message":"A voice with the voice_id alloy was not found."}}`,
			category: providers.CategoryModelUnavailable, code: "voice_not_found"},
		{name: "not found", status: 404, body: `{"detail":"Not Found"}`, category: providers.CategoryModelUnavailable},
		{name: "plain text", status: 503, body: `upstream connect error`,
			category: providers.CategoryServerError, retryable: true, message: "upstream connect error"},
	}
	calls := map[string]func(*Provider) error{
		"speech": func(p *Provider) error {
			_, err := p.Synthesize(context.Background(), &providers.SpeechRequest{Model: "m", Input: "hi", Voice: "v"})
			return err
		},
		"transcription": func(p *Provider) error {
			_, err := p.Transcribe(context.Background(), &providers.TranscriptionRequest{Model: "scribe_v1", File: strings.NewReader("RIFF"), Size: 4})
			return err
		},
	}
	for _, tc := range tests {
		for endpoint, call := range calls {
			t.Run(tc.name+"/"+endpoint, func(t *testing.T) {
				f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
					for k, v := range tc.header {
						w.Header()[k] = v
					}
					w.WriteHeader(tc.status)
					_, _ = w.Write([]byte(tc.body))
				})
				err := call(f.provider(t))
				ue, ok := providers.AsUpstreamError(err)
				if !ok {
					t.Fatalf("got %#v", err)
				}
				if ue.Status != tc.status || ue.Category != tc.category || ue.Retryable != tc.retryable ||
					ue.RetryAfter != tc.retryAfter || ue.Code != tc.code || ue.Provider != "el" {
					t.Fatalf("got %+v", ue)
				}
				if !strings.Contains(ue.Message, tc.message) {
					t.Errorf("message %q, want %q in it", ue.Message, tc.message)
				}
				for what, s := range map[string]string{"error": err.Error(), "payload": ue.Payload, "message": ue.Message} {
					if strings.Contains(s, testKey) {
						t.Errorf("the key shows in the %s: %s", what, s)
					}
				}
			})
		}
	}
}

// TestElevenLabsCredentials: the key is sent as xi-api-key; a configured key that resolved empty
// refuses every call at once; a 401 to a call without a key means no key is configured.
func TestElevenLabsCredentials(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		writeError(w, 401, `{"detail":{"status":"needs_authorization","message":"Neither authorization header nor xi-api-key received."}}`)
	})
	speak := func(p *Provider) error {
		_, err := p.Synthesize(context.Background(), &providers.SpeechRequest{Model: "m", Input: "hi", Voice: "v"})
		return err
	}

	err := speak(f.provider(t, func(c *Config) { c.APIKey, c.RequireKey = "", true }))
	if ue, ok := providers.AsUpstreamError(err); !ok || ue.Category != providers.CategoryCredentialsNotConfigured || f.requests.Load() != 0 {
		t.Fatalf("empty required key: %v, %d requests", err, f.requests.Load())
	}
	err = speak(f.provider(t, func(c *Config) { c.APIKey = "" }))
	if ue, ok := providers.AsUpstreamError(err); !ok || ue.Category != providers.CategoryCredentialsNotConfigured || ue.Status != 401 {
		t.Fatalf("no key: %v", err)
	}
	err = speak(f.provider(t, func(c *Config) { c.APIKey, c.Headers = "", map[string]string{"xi-api-key": testKey} }))
	if ue, ok := providers.AsUpstreamError(err); !ok || ue.Category != providers.CategoryCredentialsInvalid {
		t.Fatalf("key in a header: %v", err)
	}
}

// TestElevenLabsParseErrorShapes: every error body shape gives what it holds, and odd ones nothing
// misleading.
func TestElevenLabsParseErrorShapes(t *testing.T) {
	for _, tc := range []struct {
		body, code, message, param string
	}{
		{body: `{"detail":{"status":"quota_exceeded","message":"over"}}`, code: "quota_exceeded", message: "over"},
		{body: `{"detail":"Not Found"}`, message: "Not Found"},
		{body: `{"detail":[{"loc":["body","text"],"msg":"Field required","type":"missing"}]}`, code: "missing", message: "text: Field required", param: "text"},
		{body: `{"detail":[{"loc":["query"],"msg":"bad","type":"value_error"}]}`, code: "value_error", message: "bad"},
		{body: `{"detail":[]}`},
		{body: `{"detail":{"status":7}}`},
		{body: `{"error":"something"}`},
		{body: `<!doctype html><p>oops</p>`},
		{body: `oops`, message: "oops"},
		{body: ``},
	} {
		e := ParseError("el", 400, nil, []byte(tc.body), true)
		if e.Code != tc.code || e.Message != tc.message || e.Param != tc.param || e.Payload != tc.body {
			t.Errorf("%s: got code %q message %q param %q payload %q", tc.body, e.Code, e.Message, e.Param, e.Payload)
		}
	}
	if e := ParseError("el", 302, nil, nil, true); e.Category != providers.CategoryServerError || e.Retryable {
		t.Errorf("redirect: %+v", e)
	}
	if e := ParseError("el", 402, nil, nil, true); e.Category != providers.CategoryAccessMissing {
		t.Errorf("402: %+v", e)
	}
}
