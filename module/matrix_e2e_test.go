package module

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// matrixUpstream is one upstream kind of the translation matrix with what it reports.
type matrixUpstream struct {
	model      string // public model routed to it
	text       string
	input      int64 // neutral counters
	cacheRead  int64
	output     int64
	exactUsage bool
}

func (u matrixUpstream) cost() int64 {
	return u.input*1000 + u.cacheRead*500 + u.output*2000
}

// startMatrix configures one priced model per upstream kind: openai (chat wire), anthropic,
// gemini and the mock.
func startMatrix(t *testing.T) (*gatewayEnv, map[string]matrixUpstream, map[string]*fakeUpstream) {
	oa := newFakeOpenAI(t, chatWithTools("Hello from openai", 12, 6))
	an := newFakeAnthropic(t)
	ge := newFakeGemini(t)
	rs := newFakeResponses(t)
	route := func(p string) string {
		return fmt.Sprintf(`
			route %s up-model {
				input 1.00
				cached_input 0.50
				output 2.00
			}`, p)
	}
	cfg := providerBlock("oa", oa.URL) + fmt.Sprintf(`
		provider an {
			type anthropic
			base_url %s
			api_key sk-ant-upstream-secret
		}
		provider ge {
			type gemini
			base_url %s/v1beta
			api_key gemini-upstream-secret
		}
		provider rs {
			type openai
			api responses
			base_url %s/v1
			api_key sk-responses-secret
		}
		provider mk {
			type mock
			chunks 3
		}`, an.URL, ge.URL, rs.URL) + pricedModel("m-responses", route("rs")) +
		pricedModel("m-openai", route("oa")) + pricedModel("m-anthropic", route("an")) +
		pricedModel("m-gemini", route("ge")) + pricedModel("m-mock", route("mk"))
	env := startGateway(t, cfg, "")
	ups := map[string]matrixUpstream{
		"openai":    {"m-openai", "Hello from openai", 12, 0, 6, true},
		"anthropic": {"m-anthropic", "Hello from anthropic", 12, 3, 6, true},
		"gemini":    {"m-gemini", "Hello from gemini", 12, 3, 6, true},
		"mock":      {"m-mock", "", 0, 0, 0, false},
		"responses": {"m-responses", "Hello from responses", 12, 3, 6, true},
	}
	return env, ups, map[string]*fakeUpstream{"anthropic": an, "gemini": ge, "responses": rs}
}

func TestTranslationMatrix(t *testing.T) {
	env, ups, _ := startMatrix(t)
	wsID, key := env.workspace(10 * usd)
	ctx := context.Background()
	oc := env.openai(key)
	ac := anthropic.NewClient(aoption.WithBaseURL(env.baseURL+"/"), aoption.WithAPIKey(key), aoption.WithMaxRetries(0), aoption.WithHTTPClient(testClient))

	for _, kind := range []string{"openai", "responses", "anthropic", "gemini", "mock"} {
		up := ups[kind]
		checkCost := func(t *testing.T, genID string, costRaw string) {
			t.Helper()
			gen := env.generation(wsID, genID)
			if up.exactUsage {
				if gen.CostNanos != up.cost() || gen.InputTokens != up.input || gen.CacheReadTokens != up.cacheRead || gen.OutputTokens != up.output {
					t.Fatalf("generation %+v, want cost %d", gen, up.cost())
				}
			}
			if costRaw != fmt.Sprint(gen.CostNanos) {
				t.Fatalf("cost_nanos shown %s, recorded %d", costRaw, gen.CostNanos)
			}
		}
		checkText := func(t *testing.T, got string) {
			t.Helper()
			if up.text != "" && got != up.text || got == "" {
				t.Fatalf("text %q, want %q", got, up.text)
			}
		}

		t.Run("chat/"+kind, func(t *testing.T) {
			var httpResp *http.Response
			resp, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model: up.model, Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("Hello")},
			}, option.WithResponseInto(&httpResp))
			if err != nil {
				t.Fatal(err)
			}
			checkText(t, resp.Choices[0].Message.Content)
			if up.exactUsage && (resp.Usage.PromptTokens != up.input+up.cacheRead || resp.Usage.CompletionTokens != up.output || resp.Usage.PromptTokensDetails.CachedTokens != up.cacheRead) {
				t.Fatalf("usage %s", resp.Usage.RawJSON())
			}
			if resp.Choices[0].FinishReason != "stop" {
				t.Fatalf("finish %q", resp.Choices[0].FinishReason)
			}
			checkCost(t, httpResp.Header.Get("X-Generation-Id"), resp.Usage.JSON.ExtraFields["cost_nanos"].Raw())
		})

		t.Run("chat-stream/"+kind, func(t *testing.T) {
			var httpResp *http.Response
			stream := oc.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
				Model: up.model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")},
				StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
			}, option.WithResponseInto(&httpResp))
			acc := openai.ChatCompletionAccumulator{}
			var last openai.ChatCompletionChunk
			for stream.Next() {
				last = stream.Current()
				if !acc.AddChunk(last) {
					t.Fatalf("accumulator refused %s", last.RawJSON())
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			checkText(t, acc.Choices[0].Message.Content)
			if acc.Choices[0].FinishReason != "stop" || (up.exactUsage && acc.Usage.TotalTokens != up.input+up.cacheRead+up.output) {
				t.Fatalf("finish %q usage %+v", acc.Choices[0].FinishReason, acc.Usage)
			}
			checkCost(t, httpResp.Header.Get("X-Generation-Id"), last.Usage.JSON.ExtraFields["cost_nanos"].Raw())
		})

		t.Run("messages/"+kind, func(t *testing.T) {
			var httpResp *http.Response
			msg, err := ac.Messages.New(ctx, anthropic.MessageNewParams{
				Model: anthropic.Model(up.model), MaxTokens: 256,
				System:   []anthropic.TextBlockParam{{Text: "Be brief."}},
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello"))},
			}, aoption.WithResponseInto(&httpResp))
			if err != nil {
				t.Fatal(err)
			}
			if len(msg.Content) != 1 || msg.Content[0].Type != "text" {
				t.Fatalf("content %s", msg.RawJSON())
			}
			checkText(t, msg.Content[0].Text)
			if msg.StopReason != anthropic.StopReasonEndTurn {
				t.Fatalf("stop reason %q", msg.StopReason)
			}
			if up.exactUsage && (msg.Usage.InputTokens != up.input || msg.Usage.CacheReadInputTokens != up.cacheRead || msg.Usage.OutputTokens != up.output) {
				t.Fatalf("usage %s", msg.Usage.RawJSON())
			}
			checkCost(t, httpResp.Header.Get("X-Generation-Id"), msg.Usage.JSON.ExtraFields["cost_nanos"].Raw())
		})

		t.Run("messages-stream/"+kind, func(t *testing.T) {
			var httpResp *http.Response
			stream := ac.Messages.NewStreaming(ctx, anthropic.MessageNewParams{
				Model: anthropic.Model(up.model), MaxTokens: 256,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello"))},
			}, aoption.WithResponseInto(&httpResp))
			acc := anthropic.Message{}
			costRaw := ""
			for stream.Next() {
				ev := stream.Current()
				if err := acc.Accumulate(ev); err != nil {
					t.Fatalf("accumulate %s: %v", ev.RawJSON(), err)
				}
				if ev.Type == "message_delta" {
					costRaw = ev.Usage.JSON.ExtraFields["cost_nanos"].Raw()
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if len(acc.Content) != 1 {
				t.Fatalf("content %+v", acc.Content)
			}
			checkText(t, acc.Content[0].Text)
			if acc.StopReason != anthropic.StopReasonEndTurn || (up.exactUsage && (acc.Usage.OutputTokens != up.output || acc.Usage.InputTokens != up.input)) {
				t.Fatalf("stop %q usage %s", acc.StopReason, acc.Usage.RawJSON())
			}
			checkCost(t, httpResp.Header.Get("X-Generation-Id"), costRaw)
		})

		t.Run("responses/"+kind, func(t *testing.T) {
			var httpResp *http.Response
			resp, err := oc.Responses.New(ctx, responses.ResponseNewParams{
				Model: up.model, Instructions: openai.String("Be brief."),
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello")},
			}, option.WithResponseInto(&httpResp))
			if err != nil {
				t.Fatal(err)
			}
			checkText(t, resp.OutputText())
			if resp.Status != "completed" || (up.exactUsage && (resp.Usage.InputTokens != up.input+up.cacheRead || resp.Usage.OutputTokens != up.output || resp.Usage.InputTokensDetails.CachedTokens != up.cacheRead)) {
				t.Fatalf("status %q usage %s", resp.Status, resp.Usage.RawJSON())
			}
			checkCost(t, httpResp.Header.Get("X-Generation-Id"), resp.Usage.JSON.ExtraFields["cost_nanos"].Raw())
		})

		t.Run("responses-stream/"+kind, func(t *testing.T) {
			var httpResp *http.Response
			stream := oc.Responses.NewStreaming(ctx, responses.ResponseNewParams{
				Model: up.model, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello")},
			}, option.WithResponseInto(&httpResp))
			var types []string
			var text strings.Builder
			var final responses.Response
			lastSeq := int64(-1)
			for stream.Next() {
				ev := stream.Current()
				types = append(types, ev.Type)
				if ev.SequenceNumber <= lastSeq {
					t.Fatalf("sequence_number %d after %d", ev.SequenceNumber, lastSeq)
				}
				lastSeq = ev.SequenceNumber
				switch ev.Type {
				case "response.output_text.delta":
					text.WriteString(ev.Delta)
				case "response.completed":
					final = ev.Response
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if len(types) < 4 || types[0] != "response.created" || types[len(types)-1] != "response.completed" {
				t.Fatalf("event order %v", types)
			}
			checkText(t, text.String())
			if final.OutputText() != text.String() || (up.exactUsage && final.Usage.OutputTokens != up.output) {
				t.Fatalf("final response %s", final.RawJSON())
			}
			checkCost(t, httpResp.Header.Get("X-Generation-Id"), final.Usage.JSON.ExtraFields["cost_nanos"].Raw())
		})

		if kind == "mock" {
			continue
		}

		t.Run("responses-tools/"+kind, func(t *testing.T) {
			resp, err := oc.Responses.New(ctx, responses.ResponseNewParams{
				Model: up.model,
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Weather in Paris and Rome?")},
				Tools: []responses.ToolUnionParam{responses.ToolParamOfFunction("get_weather", map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}, false)},
			})
			if err != nil {
				t.Fatal(err)
			}
			var calls []responses.ResponseFunctionToolCall
			for _, item := range resp.Output {
				if item.Type == "function_call" {
					calls = append(calls, item.AsFunctionCall())
				}
			}
			if len(calls) != 2 {
				t.Fatalf("function calls %s", resp.RawJSON())
			}
			for i, city := range []string{"Paris", "Rome"} {
				var args map[string]string
				if err := json.Unmarshal([]byte(calls[i].Arguments), &args); err != nil || args["city"] != city || calls[i].CallID == "" || calls[i].Name != "get_weather" {
					t.Fatalf("call %d: %s", i, calls[i].RawJSON())
				}
			}
		})
		t.Run("chat-tools/"+kind, func(t *testing.T) {
			resp, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model:    up.model,
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Paris and Rome?")},
				Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
					Name: "get_weather", Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}},
				})},
			})
			if err != nil {
				t.Fatal(err)
			}
			calls := resp.Choices[0].Message.ToolCalls
			if len(calls) != 2 || resp.Choices[0].FinishReason != "tool_calls" {
				t.Fatalf("tool calls %s", resp.RawJSON())
			}
			for i, city := range []string{"Paris", "Rome"} {
				var args map[string]string
				if err := json.Unmarshal([]byte(calls[i].Function.Arguments), &args); err != nil || args["city"] != city || calls[i].Function.Name != "get_weather" || calls[i].ID == "" {
					t.Fatalf("call %d: %+v", i, calls[i])
				}
			}
			// The next turn sends both results back; every upstream must accept the history.
			params := openai.ChatCompletionNewParams{
				Model: up.model,
				Messages: []openai.ChatCompletionMessageParamUnion{
					openai.UserMessage("Weather in Paris and Rome?"),
					resp.Choices[0].Message.ToParam(),
					openai.ToolMessage(`{"temp":21}`, calls[0].ID),
					openai.ToolMessage(`{"temp":25}`, calls[1].ID),
				},
			}
			if _, err := oc.Chat.Completions.New(ctx, params); err != nil {
				t.Fatal(err)
			}
		})

		t.Run("messages-tools/"+kind, func(t *testing.T) {
			tool := anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{Name: "get_weather",
				InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}, Required: []string{"city"}}}}
			params := anthropic.MessageNewParams{
				Model: anthropic.Model(up.model), MaxTokens: 256, Tools: []anthropic.ToolUnionParam{tool},
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Weather in Paris and Rome?"))},
			}
			msg, err := ac.Messages.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			var uses []anthropic.ToolUseBlock
			for _, b := range msg.Content {
				if b.Type == "tool_use" {
					uses = append(uses, b.AsToolUse())
				}
			}
			if len(uses) != 2 || msg.StopReason != anthropic.StopReasonToolUse {
				t.Fatalf("tool uses %s", msg.RawJSON())
			}
			for i, city := range []string{"Paris", "Rome"} {
				var in map[string]string
				if err := json.Unmarshal(uses[i].Input, &in); err != nil || in["city"] != city || uses[i].ID == "" {
					t.Fatalf("tool use %d: %s", i, uses[i].RawJSON())
				}
			}
			params.Messages = append(params.Messages, msg.ToParam(), anthropic.NewUserMessage(
				anthropic.NewToolResultBlock(uses[0].ID, `{"temp":21}`, false),
				anthropic.NewToolResultBlock(uses[1].ID, `{"temp":25}`, false)))
			if _, err := ac.Messages.New(ctx, params); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestImageInputTranslated(t *testing.T) {
	env, ups, fakes := startMatrix(t)
	_, key := env.workspace(10 * usd)
	oc := env.openai(key)
	const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
	for _, kind := range []string{"anthropic", "gemini"} {
		t.Run(kind, func(t *testing.T) {
			_, err := oc.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
				Model: ups[kind].model,
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
					openai.TextContentPart("What is in this image?"),
					openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "data:image/png;base64," + png}),
				})},
			})
			if err != nil {
				t.Fatal(err)
			}
			body, _, _ := fakes[kind].last()
			raw, _ := json.Marshal(body)
			want := map[string]string{"anthropic": `"type":"base64"`, "gemini": `"inlineData"`}[kind]
			if !strings.Contains(string(raw), want) || !strings.Contains(string(raw), png) {
				t.Fatalf("upstream body lacks the image: %s", raw)
			}
		})
	}
}
