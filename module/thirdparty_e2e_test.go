package module

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestThirdPartyProviderEndToEnd: a provider type registered from another package (Echo,
// model_gateway.providers.echo, in thirdparty_test.go) is configured from a Caddyfile with
// an option of its own beside the gateway's, and answers through the in-process Caddy,
// metered and recorded like any other.
func TestThirdPartyProviderEndToEnd(t *testing.T) {
	env := startGateway(t, `
		provider p {
			type echo
			greeting hi
			retries 0
		}`+pricedModel("echo-1", pricedRoute("p", "echo-upstream")), "")
	wsID, key := env.workspace(5 * usd)
	client := env.openai(key)
	ctx := context.Background()
	// "ping pong" is 2 input tokens, "hi: ping pong" 3 output tokens, at 1 and 2 USD/M.
	const want = 2*1000 + 3*2000

	t.Run("non-streamed", func(t *testing.T) {
		var httpResp *http.Response
		resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "echo-1",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("ping pong")},
		}, option.WithResponseInto(&httpResp))
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Choices[0].Message.Content; got != "hi: ping pong" {
			t.Fatalf("content %q", got)
		}
		if resp.Usage.PromptTokens != 2 || resp.Usage.CompletionTokens != 3 {
			t.Fatalf("usage %+v", resp.Usage)
		}
		gen := env.generation(wsID, httpResp.Header.Get("X-Generation-Id"))
		if gen.Provider != "p" || gen.CostNanos != want || gen.Status != 200 {
			t.Fatalf("generation %+v", gen)
		}
	})

	t.Run("streamed", func(t *testing.T) {
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:         "echo-1",
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("ping pong")},
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		acc := openai.ChatCompletionAccumulator{}
		var last openai.ChatCompletionChunk
		for stream.Next() {
			last = stream.Current()
			acc.AddChunk(last)
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if got := acc.Choices[0].Message.Content; got != "hi: ping pong" {
			t.Fatalf("content %q", got)
		}
		if got := last.Usage.JSON.ExtraFields["cost_nanos"].Raw(); got != fmt.Sprint(want) {
			t.Fatalf("last chunk: %s", last.RawJSON())
		}
	})
}
