package module

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// The official SDKs read a response's request id from x-request-id (OpenAI's) and
// request-id (Anthropic's, into its errors' RequestID): the gateway sends the generation id
// there as well as in X-Generation-Id, on answers and errors, streamed or not, so that what
// a client logs of a failed call finds the generation record.
func TestSDKRequestIDIsTheGenerationID(t *testing.T) {
	up := newFakeOpenAI(t, func(w http.ResponseWriter, r *http.Request, req map[string]any) {
		if req["model"] == "up-bad" {
			upstreamError(http.StatusBadRequest, "invalid_request_error", "context_length_exceeded", "too long", nil)(w, r, req)
			return
		}
		chatOK("Hello there", 5, 2)(w, r, req)
	})
	env := startGateway(t, providerBlock("up", up.URL)+pricedModel("good", pricedRoute("up", "up-good"))+
		pricedModel("bad", pricedRoute("up", "up-bad")), "")
	wsID, key := env.workspace(10 * usd)
	oc := env.openai(key)
	ac := anthropic.NewClient(aoption.WithBaseURL(env.baseURL+"/"), aoption.WithAPIKey(key), aoption.WithMaxRetries(0), aoption.WithHTTPClient(testClient))
	ctx := context.Background()
	chatParams := func(model string) openai.ChatCompletionNewParams {
		return openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
	}
	messageParams := func(model string) anthropic.MessageNewParams {
		return anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 16, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}
	}
	// requestID checks that the response names one generation in all three headers and
	// that it was recorded, and returns its id.
	requestID := func(t *testing.T, h http.Header) string {
		t.Helper()
		id := h.Get("X-Generation-Id")
		if !strings.HasPrefix(id, "gen") || h.Get("x-request-id") != id || h.Get("request-id") != id {
			t.Fatalf("X-Generation-Id %q, x-request-id %q, request-id %q: want one generation id", id, h.Get("x-request-id"), h.Get("request-id"))
		}
		env.generation(wsID, id)
		return id
	}

	t.Run("openai error", func(t *testing.T) {
		_, err := oc.Chat.Completions.New(ctx, chatParams("bad"))
		var oerr *openai.Error
		if !errors.As(err, &oerr) || oerr.StatusCode != http.StatusBadRequest {
			t.Fatalf("openai-go: %v", err)
		}
		requestID(t, oerr.Response.Header)
	})
	t.Run("openai stream error", func(t *testing.T) {
		stream := oc.Chat.Completions.NewStreaming(ctx, chatParams("bad"))
		for stream.Next() {
		}
		var oerr *openai.Error
		if !errors.As(stream.Err(), &oerr) {
			t.Fatalf("openai-go: %v", stream.Err())
		}
		requestID(t, oerr.Response.Header)
	})
	t.Run("openai answer", func(t *testing.T) {
		var resp *http.Response
		if _, err := oc.Chat.Completions.New(ctx, chatParams("good"), option.WithResponseInto(&resp)); err != nil {
			t.Fatal(err)
		}
		requestID(t, resp.Header)
	})
	t.Run("openai stream", func(t *testing.T) {
		var resp *http.Response
		stream := oc.Chat.Completions.NewStreaming(ctx, chatParams("good"), option.WithResponseInto(&resp))
		for stream.Next() {
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		requestID(t, resp.Header)
	})
	t.Run("anthropic error", func(t *testing.T) {
		_, err := ac.Messages.New(ctx, messageParams("bad"))
		var aerr *anthropic.Error
		if !errors.As(err, &aerr) || aerr.StatusCode != http.StatusBadRequest {
			t.Fatalf("anthropic-sdk-go: %v", err)
		}
		if id := requestID(t, aerr.Response.Header); aerr.RequestID != id || !strings.Contains(aerr.Error(), id) {
			t.Fatalf("anthropic-sdk-go error's request id %q, want %s: %v", aerr.RequestID, id, aerr)
		}
	})
	t.Run("anthropic stream error", func(t *testing.T) {
		stream := ac.Messages.NewStreaming(ctx, messageParams("bad"))
		for stream.Next() {
		}
		var aerr *anthropic.Error
		if !errors.As(stream.Err(), &aerr) {
			t.Fatalf("anthropic-sdk-go: %v", stream.Err())
		}
		if id := requestID(t, aerr.Response.Header); aerr.RequestID != id {
			t.Fatalf("anthropic-sdk-go error's request id %q, want %s", aerr.RequestID, id)
		}
	})
	t.Run("anthropic stream", func(t *testing.T) {
		var resp *http.Response
		stream := ac.Messages.NewStreaming(ctx, messageParams("good"), aoption.WithResponseInto(&resp))
		for stream.Next() {
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		requestID(t, resp.Header)
	})
}
