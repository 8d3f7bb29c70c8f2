package module

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
)

// lastUserText is the text of the last message of a chat or Messages request, its content a
// string or an array of text parts.
func lastUserText(body []byte) string {
	var req struct {
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(body, &req) != nil || len(req.Messages) == 0 {
		return ""
	}
	raw := req.Messages[len(req.Messages)-1].Content
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// echoPieces cuts text into four pieces, the way the echo upstreams stream it back.
func echoPieces(text string) []string {
	n := max(len(text)/4, 1)
	var pieces []string
	for len(text) > n {
		pieces = append(pieces, text[:n])
		text = text[n:]
	}
	return append(pieces, text)
}

// newEchoUpstream streams the last user message back, in four pieces a millisecond apart so
// that concurrent streams interleave, in the OpenAI chat wire format (/v1/chat/completions)
// or in Anthropic's (/v1/messages). Streams only.
func newEchoUpstream(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		text := lastUserText(body)
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		send := func(name string, data any) {
			b, _ := json.Marshal(data)
			if name != "" {
				fmt.Fprintf(w, "event: %s\n", name)
			}
			fmt.Fprintf(w, "data: %s\n\n", b)
			fl.Flush()
		}
		switch r.URL.Path {
		case "/v1/chat/completions":
			chunk := func(delta map[string]any, finish any) map[string]any {
				return map[string]any{"id": "chatcmpl-echo", "object": "chat.completion.chunk", "created": 1, "model": "echo",
					"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
			}
			send("", chunk(map[string]any{"role": "assistant", "content": ""}, nil))
			for _, p := range echoPieces(text) {
				time.Sleep(time.Millisecond)
				send("", chunk(map[string]any{"content": p}, nil))
			}
			send("", chunk(map[string]any{}, "stop"))
			send("", map[string]any{"id": "chatcmpl-echo", "object": "chat.completion.chunk", "created": 1, "model": "echo", "choices": []any{},
				"usage": map[string]any{"prompt_tokens": 10, "completion_tokens": len(text), "total_tokens": 10 + len(text)}})
			fmt.Fprint(w, "data: [DONE]\n\n")
		case "/v1/messages":
			send("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_echo", "type": "message", "role": "assistant",
				"model": "echo", "content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": map[string]any{"input_tokens": 10, "output_tokens": 1}}})
			send("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
			for _, p := range echoPieces(text) {
				time.Sleep(time.Millisecond)
				send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": p}})
			}
			send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
			send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil},
				"usage": map[string]any{"output_tokens": len(text)}})
			send("message_stop", map[string]any{"type": "message_stop"})
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestConcurrentStreamsKeepTheirOwnAnswers: streams served at the same time, through each
// surface, passed through and translated, each get exactly their own answer and usage. The stream
// encoders and the buffers their last frames are decorated in go back to pools when a
// stream ends and serve the next one: a buffer handed on too early, or kept by two streams,
// shows here as one client reading another's text. The prompts differ in length, some with
// quotes and new lines to escape, one in six longer than the 16 KiB a pooled buffer keeps.
func TestConcurrentStreamsKeepTheirOwnAnswers(t *testing.T) {
	up := newEchoUpstream(t)
	env := startGateway(t, providerBlock("oa", up.URL)+fmt.Sprintf(`
		provider an {
			type anthropic
			base_url %s
			api_key sk-ant-upstream-secret
		}`, up.URL)+pricedModel("echo-oa", pricedRoute("oa", "echo"))+pricedModel("echo-an", pricedRoute("an", "echo")), "")
	_, key := env.workspace(100 * usd)
	oc := env.openai(key)
	ac := anthropic.NewClient(aoption.WithBaseURL(env.baseURL+"/"), aoption.WithAPIKey(key), aoption.WithMaxRetries(0), aoption.WithHTTPClient(testClient))
	ctx := context.Background()

	chat := func(model, prompt string) (string, int64, error) {
		stream := oc.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		var text strings.Builder
		var output int64
		for stream.Next() {
			ch := stream.Current()
			for _, c := range ch.Choices {
				text.WriteString(c.Delta.Content)
			}
			if ch.Usage.CompletionTokens > 0 {
				output = ch.Usage.CompletionTokens
			}
		}
		return text.String(), output, stream.Err()
	}
	messages := func(model, prompt string) (string, int64, error) {
		stream := ac.Messages.NewStreaming(ctx, anthropic.MessageNewParams{
			Model: anthropic.Model(model), MaxTokens: 64,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))},
		})
		var msg anthropic.Message
		for stream.Next() {
			if err := msg.Accumulate(stream.Current()); err != nil {
				return "", 0, err
			}
		}
		if err := stream.Err(); err != nil {
			return "", 0, err
		}
		var text strings.Builder
		for _, b := range msg.Content {
			text.WriteString(b.Text)
		}
		return text.String(), msg.Usage.OutputTokens, nil
	}
	ways := []struct {
		name string
		call func(prompt string) (string, int64, error)
	}{
		{"chat passthrough", func(p string) (string, int64, error) { return chat("echo-oa", p) }},
		{"chat to Anthropic-wire", func(p string) (string, int64, error) { return chat("echo-an", p) }},
		{"messages to OpenAI-wire", func(p string) (string, int64, error) { return messages("echo-oa", p) }},
		{"messages passthrough", func(p string) (string, int64, error) { return messages("echo-an", p) }},
	}

	const workers, each = 8, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				way := ways[(w+i)%len(ways)]
				prompt := fmt.Sprintf("worker %d, request %d: %s", w, i, strings.Repeat(fmt.Sprintf("<%d.%d \"q\"\n>", w, i), 1+(w*each+i)%40))
				if (w+i)%6 == 0 {
					prompt += strings.Repeat("long ", 4000) // past what a pooled buffer keeps
				}
				text, output, err := way.call(prompt)
				switch {
				case err != nil:
					errs <- fmt.Errorf("%s, worker %d, request %d: %v", way.name, w, i, err)
				case text != prompt:
					errs <- fmt.Errorf("%s, worker %d, request %d: got %.80q..., want %.80q...", way.name, w, i, text, prompt)
				case output != int64(len(prompt)):
					errs <- fmt.Errorf("%s, worker %d, request %d: %d output tokens reported, want %d", way.name, w, i, output, len(prompt))
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
