package openai

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/sse"
)

// The official Go SDK is the strictest judge of what the chat surface writes: these tests
// run it against a minimal surface built from this package's converters.

var sdkAnswer = &providers.Response{
	Model:        "gpt-4o",
	Text:         "It is a cat.",
	ToolCalls:    []providers.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}, {ID: "call_2", Name: "get_time", Arguments: `{}`}},
	FinishReason: providers.FinishToolCalls,
	Usage:        providers.Usage{Input: 10, CacheRead: 5, CacheWrite: 2, Output: 7, Reasoning: 3},
}

// chatSurface decodes the request, hands it to got, and answers sdkAnswer in the format asked;
// with failMidStream it sends an in-stream error after the first chunk.
func chatSurface(t *testing.T, got chan<- *providers.Request, failMidStream bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, err := DecodeChatRequest(body)
		if err != nil {
			t.Errorf("decoding the SDK's request: %v\n%s", err, body)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		got <- req
		if !req.Stream {
			b, err := EncodeChatResponse(sdkAnswer, "gen_1", 1700000000)
			if err != nil {
				t.Error(err)
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(b)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		enc := NewChunkEncoder("gen_1", sdkAnswer.Model, 1700000000)
		var events []providers.Event
		for _, word := range strings.SplitAfter(sdkAnswer.Text, " ") {
			events = append(events, providers.Event{Type: providers.EventText, Text: word})
		}
		for i, tc := range sdkAnswer.ToolCalls {
			// Arguments in two pieces, the id and name with the first only.
			half := len(tc.Arguments) / 2
			events = append(events,
				providers.Event{Type: providers.EventToolCall, Index: i, ToolCall: providers.ToolCall{ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments[:half]}},
				providers.Event{Type: providers.EventToolCall, Index: i, ToolCall: providers.ToolCall{Arguments: tc.Arguments[half:]}})
		}
		events = append(events,
			providers.Event{Type: providers.EventFinish, FinishReason: sdkAnswer.FinishReason},
			providers.Event{Type: providers.EventUsage, Usage: sdkAnswer.Usage})
		for i, ev := range events {
			if failMidStream && i == 1 {
				code := "server_error"
				b, _ := json.Marshal(map[string]ErrorBody{"error": {Message: "upstream failed", Type: "server_error", Code: &code}})
				_ = sse.WriteData(w, b)
				return
			}
			if b, ok := enc.Encode(ev); ok {
				_ = sse.WriteData(w, b)
			}
		}
		_ = sse.WriteData(w, []byte("[DONE]"))
	}
}

func sdkClient(t *testing.T, h http.Handler) openai.Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("gateway-key"), option.WithMaxRetries(0))
}

func sdkParams() openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model: "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.DeveloperMessage("Be brief."),
			openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
				openai.TextContentPart("What is this?"),
				openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "data:image/png;base64,aGVsbG8="}),
			}),
		},
		Tools: []openai.ChatCompletionToolUnionParam{
			openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
				Name:       "get_weather",
				Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
			}),
		},
		MaxCompletionTokens: openai.Int(50),
		Temperature:         openai.Float(0.2),
	}
}

func checkSDKRequest(t *testing.T, req *providers.Request, stream bool) {
	t.Helper()
	if req.Model != "gpt-4o" || req.System != "Be brief." || len(req.Messages) != 1 || len(req.Messages[0].Content) != 2 ||
		string(req.Messages[0].Content[1].Data) != "hello" || len(req.Tools) != 1 || *req.MaxTokens != 50 || req.Stream != stream {
		t.Fatalf("decoded request %+v", req)
	}
}

func TestSDKChat(t *testing.T) {
	got := make(chan *providers.Request, 1)
	client := sdkClient(t, chatSurface(t, got, false))
	resp, err := client.Chat.Completions.New(context.Background(), sdkParams())
	if err != nil {
		t.Fatal(err)
	}
	checkSDKRequest(t, <-got, false)
	msg := resp.Choices[0].Message
	if resp.ID != "gen_1" || resp.Object != "chat.completion" || msg.Content != sdkAnswer.Text || resp.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("response %+v", resp)
	}
	if len(msg.ToolCalls) != 2 || msg.ToolCalls[0].Function.Arguments != `{"city":"Paris"}` || msg.ToolCalls[1].ID != "call_2" {
		t.Fatalf("tool calls %+v", msg.ToolCalls)
	}
	u := resp.Usage
	if u.PromptTokens != 17 || u.CompletionTokens != 10 || u.TotalTokens != 27 || u.PromptTokensDetails.CachedTokens != 5 ||
		u.PromptTokensDetails.CacheWriteTokens != 2 || u.CompletionTokensDetails.ReasoningTokens != 3 {
		t.Fatalf("usage %+v", u)
	}
}

func TestSDKChatStream(t *testing.T) {
	got := make(chan *providers.Request, 1)
	client := sdkClient(t, chatSurface(t, got, false))
	params := sdkParams()
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(context.Background(), params)
	defer stream.Close()
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		if !acc.AddChunk(stream.Current()) {
			t.Fatalf("the accumulator rejected chunk %s", stream.Current().RawJSON())
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	checkSDKRequest(t, <-got, true)
	if len(acc.Choices) != 1 {
		t.Fatalf("choices %+v", acc.Choices)
	}
	msg := acc.Choices[0].Message
	if msg.Content != sdkAnswer.Text || acc.Choices[0].FinishReason != "tool_calls" || msg.Role != "assistant" {
		t.Fatalf("message %+v finish %q", msg, acc.Choices[0].FinishReason)
	}
	if len(msg.ToolCalls) != 2 || msg.ToolCalls[0].ID != "call_1" || msg.ToolCalls[0].Function.Name != "get_weather" ||
		msg.ToolCalls[0].Function.Arguments != `{"city":"Paris"}` || msg.ToolCalls[1].Function.Name != "get_time" || msg.ToolCalls[1].Function.Arguments != "{}" {
		t.Fatalf("tool calls %+v", msg.ToolCalls)
	}
	if acc.Usage.PromptTokens != 17 || acc.Usage.CompletionTokens != 10 || acc.Usage.PromptTokensDetails.CachedTokens != 5 {
		t.Fatalf("usage %+v", acc.Usage)
	}
}

func TestSDKStreamError(t *testing.T) {
	got := make(chan *providers.Request, 1)
	client := sdkClient(t, chatSurface(t, got, true))
	stream := client.Chat.Completions.NewStreaming(context.Background(), sdkParams())
	defer stream.Close()
	n := 0
	for stream.Next() {
		n++
	}
	<-got
	if n != 1 || stream.Err() == nil || !strings.Contains(stream.Err().Error(), "upstream failed") {
		t.Fatalf("%d chunks, err %v", n, stream.Err())
	}
}

// The adapter itself against a server that answers what the SDK's surface above answers.
func TestProviderAgainstChatSurface(t *testing.T) {
	got := make(chan *providers.Request, 2)
	srv := httptest.NewServer(chatSurface(t, got, false))
	defer srv.Close()
	p, err := New(Config{BaseURL: srv.URL + "/v1"})
	if err != nil {
		t.Fatal(err)
	}
	req := &providers.Request{Model: "gpt-4o", Messages: []providers.Message{
		{Role: providers.RoleUser, Content: []providers.Part{{Type: providers.PartText, Text: "hi"}}},
	}}
	resp, err := p.Chat(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	<-got
	if resp.Text != sdkAnswer.Text || resp.Usage != sdkAnswer.Usage || len(resp.ToolCalls) != 2 {
		t.Fatalf("response %+v", resp)
	}
	s, err := p.ChatStream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	events, err := collect(t, s)
	if err != nil {
		t.Fatal(err)
	}
	<-got
	var text strings.Builder
	for _, e := range events {
		text.WriteString(e.Text)
	}
	last := events[len(events)-1]
	if text.String() != sdkAnswer.Text || last.Usage != sdkAnswer.Usage || len(accumulate(events)) != 2 {
		t.Fatalf("events %+v", events)
	}
}
