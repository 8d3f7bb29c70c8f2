package module

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
)

// providerErrorBodies are each provider's real error shapes by status.
var providerErrorBodies = map[string]map[int]string{
	"openai": {
		400: `{"error":{"message":"This model's maximum context length is 8 tokens","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
		401: `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
		403: `{"error":{"message":"You are not allowed to use this model","type":"invalid_request_error","param":null,"code":null}}`,
		404: `{"error":{"message":"The model does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}`,
		429: `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`,
		500: `{"error":{"message":"The server had an error","type":"server_error","param":null,"code":null}}`,
		529: `{"error":{"message":"Overloaded","type":"server_error","param":null,"code":null}}`,
	},
	"anthropic": {
		400: `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 300000 tokens > 200000 maximum"},"request_id":"req_1"}`,
		401: `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"},"request_id":"req_1"}`,
		403: `{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission"},"request_id":"req_1"}`,
		404: `{"type":"error","error":{"type":"not_found_error","message":"model: nope"},"request_id":"req_1"}`,
		429: `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"},"request_id":"req_1"}`,
		500: `{"type":"error","error":{"type":"api_error","message":"Internal server error"},"request_id":"req_1"}`,
		529: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_1"}`,
	},
	"gemini": {
		400: `{"error":{"code":400,"message":"The input token count (300000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}`,
		401: `{"error":{"code":401,"message":"Request had invalid authentication credentials.","status":"UNAUTHENTICATED"}}`,
		403: `{"error":{"code":403,"message":"Permission denied on resource project","status":"PERMISSION_DENIED"}}`,
		404: `{"error":{"code":404,"message":"models/nope is not found for API version v1beta","status":"NOT_FOUND"}}`,
		429: `{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"7s"}]}}`,
		500: `{"error":{"code":500,"message":"An internal error has occurred.","status":"INTERNAL"}}`,
		529: `{"error":{"code":529,"message":"Overloaded.","status":"UNAVAILABLE"}}`,
	},
}

// want is what the client sees for an upstream status, on every surface.
var upstreamErrorOutcome = map[int]struct {
	status   int
	code     string
	category string
}{
	400: {400, "context_length_exceeded", ""},
	401: {502, "upstream_error", "credentials_invalid_or_forbidden"},
	403: {502, "upstream_error", "credentials_invalid_or_forbidden"},
	404: {502, "upstream_error", "model_unavailable_for_endpoint"},
	429: {429, "rate_limited", "rate_limited"},
	500: {502, "upstream_error", "server_error"},
	529: {502, "upstream_error", "server_error"},
}

func TestUpstreamErrorsOnEverySurface(t *testing.T) {
	statuses := []int{400, 401, 403, 404, 429, 500, 529}
	var cfg string
	for _, kind := range []string{"openai", "anthropic", "gemini"} {
		for _, st := range statuses {
			body := providerErrorBodies[kind][st]
			status := st
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if status == 429 {
					w.Header().Set("Retry-After", "7")
				}
				w.WriteHeader(status)
				fmt.Fprint(w, body)
			}))
			t.Cleanup(srv.Close)
			name := fmt.Sprintf("%s%d", kind, st)
			base := srv.URL
			switch kind {
			case "openai":
				base += "/v1"
			case "gemini":
				base += "/v1beta"
			}
			cfg += fmt.Sprintf(`
		provider %s {
			type %s
			base_url %s
			api_key upstream-secret-%s
			retries 0
			circuit_breaker off
		}`, name, kind, base, name) + pricedModel("m-"+name, pricedRoute(name, "up"))
		}
	}
	env := startGateway(t, cfg, "")
	_, key := env.workspace(10 * usd)
	oc := env.openai(key)
	ac := anthropic.NewClient(aoption.WithBaseURL(env.baseURL+"/"), aoption.WithAPIKey(key), aoption.WithMaxRetries(0), aoption.WithHTTPClient(testClient))
	ctx := context.Background()

	for _, kind := range []string{"openai", "anthropic", "gemini"} {
		for _, st := range statuses {
			want := upstreamErrorOutcome[st]
			model := fmt.Sprintf("m-%s%d", kind, st)
			t.Run(fmt.Sprintf("%s/%d", kind, st), func(t *testing.T) {
				// Raw body: status, code and category.
				status, _, body := env.post(key, "/chat/completions", `{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`)
				var v struct {
					Error struct {
						Code string `json:"code"`
					} `json:"error"`
					Diag struct {
						Category string `json:"category"`
					} `json:"provider_failure_diagnostics"`
					UpstreamError map[string]any `json:"upstream_error"`
				}
				_ = json.Unmarshal(body, &v)
				if status != want.status || v.Error.Code != want.code || v.Diag.Category != want.category || v.UpstreamError["message"] == nil {
					t.Fatalf("got %d %q %q, want %+v: %s", status, v.Error.Code, v.Diag.Category, want, body)
				}
				// The OpenAI SDK types it.
				_, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
				var oerr *openai.Error
				if !errors.As(err, &oerr) || oerr.StatusCode != want.status || oerr.Code != want.code {
					t.Fatalf("openai-go: %v", err)
				}
				// The Anthropic SDK types it on /messages, streamed or not.
				_, err = ac.Messages.New(ctx, anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 16, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
				var aerr *anthropic.Error
				if !errors.As(err, &aerr) || aerr.StatusCode != want.status {
					t.Fatalf("anthropic-sdk-go: %v", err)
				}
				wantType := map[int]string{400: "invalid_request_error", 429: "rate_limit_error", 502: "api_error"}[want.status]
				if string(aerr.Type()) != wantType {
					t.Fatalf("anthropic error type %q, want %q", aerr.Type(), wantType)
				}
				stream := ac.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 16, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
				for stream.Next() {
				}
				if !errors.As(stream.Err(), &aerr) || aerr.StatusCode != want.status {
					t.Fatalf("anthropic stream: %v", stream.Err())
				}
			})
		}
	}
}
