package module

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/modelgateway/caddy-modelgateway/store"
)

const usd = store.NanosPerUSD

func pricedModel(name, routes string) string {
	return fmt.Sprintf(`
		model %s {
%s
		}`, name, routes)
}

func pricedRoute(provider, upstream string) string {
	return fmt.Sprintf(`
			route %s %s {
				input 1.00
				output 2.00
			}`, provider, upstream)
}

func TestChatCompletionsWithOpenAISDK(t *testing.T) {
	up := newFakeOpenAI(t, chatOK("Hello there from upstream", 10, 5))
	env := startGateway(t, providerBlock("primary", up.URL)+pricedModel("gpt-test", pricedRoute("primary", "gpt-4o-mini"))+`
		provider mock {
			type mock
			chunks 4
		}
		model mock-1:free {
			route mock mock-1
		}`, "")
	wsID, key := env.workspace(5 * usd)
	client := env.openai(key)
	ctx := context.Background()

	t.Run("non-streamed", func(t *testing.T) {
		var httpResp *http.Response
		resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "gpt-test",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")},
		}, option.WithResponseInto(&httpResp))
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Choices[0].Message.Content; got != "Hello there from upstream" {
			t.Fatalf("content %q", got)
		}
		genID := httpResp.Header.Get("X-Generation-Id")
		if !strings.HasPrefix(genID, "gen_") || resp.ID != genID {
			t.Fatalf("generation id header %q body %q", genID, resp.ID)
		}
		if resp.Usage.PromptTokens != 10 || resp.Usage.CompletionTokens != 5 {
			t.Fatalf("usage %+v", resp.Usage)
		}
		// 10 input tokens at 1 USD/M + 5 output tokens at 2 USD/M.
		const want = 10*1000 + 5*2000
		if got := resp.Usage.JSON.ExtraFields["cost_nanos"].Raw(); got != fmt.Sprint(want) {
			t.Fatalf("cost_nanos %s", got)
		}
		if got := resp.Usage.JSON.ExtraFields["cost"].Raw(); got != "0.00002" {
			t.Fatalf("cost %s", got)
		}
		if !strings.Contains(resp.RawJSON(), `"unknown_future_field":{"kept":true}`) {
			t.Fatalf("unknown upstream fields were not forwarded: %s", resp.RawJSON())
		}
		// The upstream got its own model id and its own credentials, never the client's key.
		if m := up.lastBody()["model"]; m != "gpt-4o-mini" {
			t.Fatalf("upstream model %v", m)
		}
		if h := up.lastHeader().Get("Authorization"); h != "Bearer sk-upstream-secret-primary" {
			t.Fatalf("upstream auth %q", h)
		}
		gen := env.generation(wsID, genID)
		if gen.CostNanos != want || gen.InputTokens != 10 || gen.OutputTokens != 5 || gen.Provider != "primary" || gen.Status != 200 {
			t.Fatalf("generation %+v", gen)
		}
		if b := env.balance(wsID); b.BalanceNanos != 5*usd-want || b.ReservedNanos != 0 {
			t.Fatalf("balance %+v", b)
		}
	})

	t.Run("streamed with accumulator", func(t *testing.T) {
		before := env.balance(wsID).BalanceNanos
		var httpResp *http.Response
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:         "gpt-test",
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")},
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		}, option.WithResponseInto(&httpResp))
		acc := openai.ChatCompletionAccumulator{}
		n := 0
		var last openai.ChatCompletionChunk
		for stream.Next() {
			last = stream.Current()
			if !acc.AddChunk(last) {
				t.Fatalf("accumulator refused chunk %d: %s", n, last.RawJSON())
			}
			n++
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if got := acc.Choices[0].Message.Content; got != "Hello there from upstream" {
			t.Fatalf("content %q", got)
		}
		if acc.Usage.PromptTokens != 10 || acc.Usage.CompletionTokens != 5 {
			t.Fatalf("usage %+v", acc.Usage)
		}
		if len(last.Choices) != 0 || last.Usage.JSON.ExtraFields["cost_nanos"].Raw() != "20000" {
			t.Fatalf("last chunk: %s", last.RawJSON())
		}
		if acc.Choices[0].FinishReason != "stop" {
			t.Fatalf("finish %q", acc.Choices[0].FinishReason)
		}
		genID := httpResp.Header.Get("X-Generation-Id")
		if acc.ID != genID {
			t.Fatalf("chunk id %q, header %q", acc.ID, genID)
		}
		if so, _ := up.lastBody()["stream_options"].(map[string]any); so["include_usage"] != true {
			t.Fatalf("upstream stream_options %v", up.lastBody()["stream_options"])
		}
		gen := env.generation(wsID, genID)
		if !gen.Streamed || gen.CostNanos != 20000 {
			t.Fatalf("generation %+v", gen)
		}
		if after := env.balance(wsID).BalanceNanos; before-after != 20000 {
			t.Fatalf("charged %d", before-after)
		}
	})

	t.Run("streamed without usage requested still bills", func(t *testing.T) {
		before := env.balance(wsID).BalanceNanos
		status, hdr, body := env.post(key, "/chat/completions", `{"model":"gpt-test","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		if status != 200 {
			t.Fatalf("status %d %s", status, body)
		}
		text := string(body)
		if strings.Contains(text, `"usage":{`) || !strings.HasSuffix(text, "data: [DONE]\n\n") {
			t.Fatalf("stream: %s", text)
		}
		gen := env.generation(wsID, hdr.Get("X-Generation-Id"))
		if gen.CostNanos != 20000 || before-env.balance(wsID).BalanceNanos != 20000 {
			t.Fatalf("generation %+v", gen)
		}
	})

	t.Run("meta on request", func(t *testing.T) {
		status, _, body := env.post(key, "/chat/completions", `{"model":"gpt-test","meta":true,"messages":[{"role":"user","content":"hi"}]}`)
		if status != 200 {
			t.Fatalf("status %d %s", status, body)
		}
		var v struct {
			Meta map[string]any `json:"meta"`
		}
		_ = json.Unmarshal(body, &v)
		if v.Meta["provider"] != "primary" || v.Meta["attempts"] == nil || v.Meta["end_to_end_ms"] == nil {
			t.Fatalf("meta %v", v.Meta)
		}
		if _, ok := up.lastBody()["meta"]; ok {
			t.Fatal("meta was forwarded upstream")
		}
	})

	t.Run("free mock model needs no credit", func(t *testing.T) {
		_, poorKey := env.workspace(0)
		poor := env.openai(poorKey)
		resp, err := poor.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "mock-1:free",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello mock")},
		})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Choices[0].Message.Content == "" || resp.Usage.JSON.ExtraFields["cost_nanos"].Raw() != "0" {
			t.Fatalf("mock answer %s", resp.RawJSON())
		}
		stream := poor.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:         "mock-1:free",
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello mock")},
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		acc := openai.ChatCompletionAccumulator{}
		for stream.Next() {
			if !acc.AddChunk(stream.Current()) {
				t.Fatalf("accumulator refused %s", stream.Current().RawJSON())
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if acc.Choices[0].Message.Content != resp.Choices[0].Message.Content {
			t.Fatalf("streamed %q, not streamed %q", acc.Choices[0].Message.Content, resp.Choices[0].Message.Content)
		}
		if acc.Usage.CompletionTokens == 0 {
			t.Fatalf("no usage on the mock stream")
		}
	})

	t.Run("models list", func(t *testing.T) {
		page, err := client.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, m := range page.Data {
			names = append(names, m.ID)
		}
		if strings.Join(names, ",") != "gpt-test,mock-1:free" {
			t.Fatalf("models %v", names)
		}
	})

	t.Run("key and generation endpoints", func(t *testing.T) {
		status, body := env.get(key, "/key")
		if status != 200 || !strings.Contains(string(body), `"workspace_id":"`+wsID+`"`) {
			t.Fatalf("key: %d %s", status, body)
		}
		status, body = env.get(key, "/health")
		if status != 200 {
			t.Fatalf("health %d", status)
		}
		status, body = env.get(key, "/generations?id=gen_missing")
		if status != 404 {
			t.Fatalf("missing generation: %d %s", status, body)
		}
		_, hdr, _ := env.post(key, "/chat/completions", `{"model":"gpt-test","messages":[{"role":"user","content":"hi"}]}`)
		id := hdr.Get("X-Generation-Id")
		env.generation(wsID, id)
		status, body = env.get(key, "/generations?id="+id)
		if status != 200 || !strings.Contains(string(body), `"cost_nanos":20000`) {
			t.Fatalf("generation: %d %s", status, body)
		}
		// Another workspace never sees it.
		_, otherKey := env.workspace(2 * usd)
		if status, _ := env.get(otherKey, "/generations?id="+id); status != 404 {
			t.Fatalf("other workspace saw the generation: %d", status)
		}
	})
}

func TestChatErrorsAreTypedBySDK(t *testing.T) {
	up := newFakeOpenAI(t, chatOK("ok", 3, 1))
	env := startGateway(t, providerBlock("primary", up.URL)+pricedModel("gpt-test", pricedRoute("primary", "gpt-4o-mini")), "max_body_size 2KB")
	wsID, key := env.workspace(5 * usd)
	_, poorKey := env.workspace(usd / 2)
	mgmtKey := env.key(wsID, store.KeyManagement)
	ctx := context.Background()
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")}

	tests := []struct {
		name   string
		key    string
		params openai.ChatCompletionNewParams
		status int
		code   string
	}{
		{"unknown key", "gateway_v1_sk_aaaaaaaaaaaa_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", openai.ChatCompletionNewParams{Model: "gpt-test", Messages: msgs}, 401, "unauthorised"},
		{"malformed key", "sk-not-ours", openai.ChatCompletionNewParams{Model: "gpt-test", Messages: msgs}, 401, "unauthorised"},
		{"wrong secret", key[:len(key)-4] + "zzzz", openai.ChatCompletionNewParams{Model: "gpt-test", Messages: msgs}, 401, "unauthorised"},
		{"management key", mgmtKey, openai.ChatCompletionNewParams{Model: "gpt-test", Messages: msgs}, 403, "forbidden"},
		{"insufficient funds", poorKey, openai.ChatCompletionNewParams{Model: "gpt-test", Messages: msgs}, 402, "insufficient_funds"},
		{"unknown model", key, openai.ChatCompletionNewParams{Model: "no-such-model", Messages: msgs}, 400, "unsupported_model_or_endpoint"},
		{"too large", key, openai.ChatCompletionNewParams{Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(strings.Repeat("x", 4096))}}, 413, "payload_too_large"},
		{"no messages", key, openai.ChatCompletionNewParams{Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{}}, 400, "validation_error"},
		{"stream with tools", key, openai.ChatCompletionNewParams{Model: "gpt-test", Messages: msgs, Tools: []openai.ChatCompletionToolUnionParam{
			openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "f"})}}, 400, "validation_error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := env.openai(tc.key)
			var err error
			if tc.name == "stream with tools" {
				stream := client.Chat.Completions.NewStreaming(ctx, tc.params)
				for stream.Next() {
				}
				err = stream.Err()
			} else {
				_, err = client.Chat.Completions.New(ctx, tc.params)
			}
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("not an API error: %v", err)
			}
			if apiErr.StatusCode != tc.status || apiErr.Code != tc.code || apiErr.Message == "" {
				t.Fatalf("got %d %q %q, want %d %q", apiErr.StatusCode, apiErr.Code, apiErr.Message, tc.status, tc.code)
			}
			raw := apiErr.DumpResponse(true)
			if strings.Contains(string(raw), "sk-upstream-secret") {
				t.Fatal("an upstream secret leaked into an error")
			}
		})
	}

	t.Run("spec error shape", func(t *testing.T) {
		status, _, body := env.post(key, "/chat/completions", `{"model":"no-such-model","messages":[{"role":"user","content":"x"}]}`)
		var v map[string]any
		if err := json.Unmarshal(body, &v); err != nil || status != 400 {
			t.Fatalf("%d %s", status, body)
		}
		for _, k := range []string{"ok", "error", "message", "status_code", "error_type", "error_origin", "provider_candidate_diagnostics", "routing_diagnostics"} {
			if _, ok := v[k]; !ok {
				t.Fatalf("missing %s in %s", k, body)
			}
		}
		status, _, body = env.post(key, "/chat/completions", `{"model": "gpt-test", "messages": [`)
		if status != 400 || !strings.Contains(string(body), `"invalid_json"`) {
			t.Fatalf("bad json: %d %s", status, body)
		}
		status, _, body = env.post(key, "/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`)
		if status != 400 || !strings.Contains(string(body), `"model_required"`) {
			t.Fatalf("no model: %d %s", status, body)
		}
	})

	if got := up.calls.Load(); got != 0 {
		t.Fatalf("rejected requests reached the upstream %d times", got)
	}
	if b := env.balance(wsID); b.BalanceNanos != 5*usd || b.ReservedNanos != 0 {
		t.Fatalf("failed requests changed the wallet: %+v", b)
	}
}

func TestWalletNeverOverspentUnderConcurrency(t *testing.T) {
	// Each request reserves its worst case: ~60 prompt bytes at 1 USD/M plus 400,000 output
	// tokens at 2 USD/M = 0.80 USD; each actually costs 0.30 USD (100,000 + 100,000 tokens).
	up := newFakeOpenAI(t, func(w http.ResponseWriter, r *http.Request, req map[string]any) {
		time.Sleep(20 * time.Millisecond)
		chatOK("ok", 100_000, 100_000)(w, r, req)
	})
	env := startGateway(t, providerBlock("primary", up.URL)+pricedModel("gpt-test", `
			route primary gpt-4o-mini {
				input 1.00
				output 2.00
				max_output_tokens 400000
			}`), "")
	wsID, key := env.workspace(5 * usd)

	const n = 40
	var wg sync.WaitGroup
	var mu sync.Mutex
	var genIDs []string
	statuses := map[int]int{}
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, hdr, _ := env.post(key, "/chat/completions", `{"model":"gpt-test","messages":[{"role":"user","content":"hi"}]}`)
			mu.Lock()
			defer mu.Unlock()
			statuses[status]++
			if status == 200 {
				genIDs = append(genIDs, hdr.Get("X-Generation-Id"))
			}
		}()
	}
	wg.Wait()
	if statuses[200] == 0 || statuses[402] == 0 || statuses[200]+statuses[402] != n {
		t.Fatalf("statuses %v", statuses)
	}
	var spent int64
	for _, id := range genIDs {
		spent += env.generation(wsID, id).CostNanos
	}
	b := env.balance(wsID)
	if b.BalanceNanos < 0 || b.ReservedNanos != 0 || b.BalanceNanos != 5*usd-spent {
		t.Fatalf("balance %+v, spent %d over %d requests", b, spent, len(genIDs))
	}
	// Spend the rest one request at a time: the wallet stops exactly where the preflight
	// (1.00 USD available) refuses, never below zero.
	for i := 0; ; i++ {
		status, hdr, body := env.post(key, "/chat/completions", `{"model":"gpt-test","messages":[{"role":"user","content":"hi"}]}`)
		if status == 402 {
			break
		}
		if status != 200 || i > 20 {
			t.Fatalf("sequential request %d: %d %s", i, status, body)
		}
		spent += env.generation(wsID, hdr.Get("X-Generation-Id")).CostNanos
	}
	b = env.balance(wsID)
	if b.BalanceNanos != 5*usd-spent || b.Available() >= usd || b.Available() < 0 {
		t.Fatalf("final balance %+v, spent %d", b, spent)
	}
}

func TestFallbackAndDiagnostics(t *testing.T) {
	failing := newFakeOpenAI(t, upstreamError(500, "server_error", "", "boom", nil))
	limited := newFakeOpenAI(t, upstreamError(429, "rate_limit_error", "rate_limit_exceeded", "slow down", map[string]string{"Retry-After": "7"}))
	healthy := newFakeOpenAI(t, chatOK("from the backup", 4, 2))
	env := startGateway(t, providerBlock("broken", failing.URL)+providerBlock("limited", limited.URL)+providerBlock("backup", healthy.URL)+
		pricedModel("gpt-fallback", pricedRoute("broken", "m1")+pricedRoute("limited", "m2")+pricedRoute("backup", "m3"))+
		pricedModel("gpt-doomed", pricedRoute("broken", "m1")+pricedRoute("limited", "m2"))+
		pricedModel("gpt-limited", pricedRoute("limited", "m2")), "")
	wsID, key := env.workspace(5 * usd)
	client := env.openai(key)
	ctx := context.Background()

	t.Run("next route answers", func(t *testing.T) {
		var httpResp *http.Response
		resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "gpt-fallback", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		}, option.WithResponseInto(&httpResp))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Choices[0].Message.Content != "from the backup" {
			t.Fatalf("content %q", resp.Choices[0].Message.Content)
		}
		gen := env.generation(wsID, httpResp.Header.Get("X-Generation-Id"))
		if gen.Provider != "backup" || len(gen.Attempts) != 3 || gen.Attempts[0].Status != 500 || gen.Attempts[1].Status != 429 || gen.CostNanos != 4*1000+2*2000 {
			t.Fatalf("generation %+v", gen)
		}
	})

	t.Run("streamed request falls back too", func(t *testing.T) {
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model: "gpt-fallback", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		})
		acc := openai.ChatCompletionAccumulator{}
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil || acc.Choices[0].Message.Content != "from the backup" {
			t.Fatalf("%v %q", err, acc.Choices[0].Message.Content)
		}
	})

	t.Run("all routes fail", func(t *testing.T) {
		before := env.balance(wsID)
		status, hdr, body := env.post(key, "/chat/completions", `{"model":"gpt-doomed","messages":[{"role":"user","content":"hi"}]}`)
		if status != 502 {
			t.Fatalf("status %d %s", status, body)
		}
		var v struct {
			Error                      map[string]any   `json:"error"`
			GenerationID               string           `json:"generation_id"`
			AttemptCount               int              `json:"attempt_count"`
			FailedProviders            []string         `json:"failed_providers"`
			FailedStatuses             []int            `json:"failed_statuses"`
			FailureSample              []map[string]any `json:"failure_sample"`
			UpstreamError              map[string]any   `json:"upstream_error"`
			ProviderFailureDiagnostics map[string]any   `json:"provider_failure_diagnostics"`
			ErrorOrigin                string           `json:"error_origin"`
		}
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatal(err)
		}
		if v.AttemptCount != 2 || strings.Join(v.FailedProviders, ",") != "broken,limited" || fmt.Sprint(v.FailedStatuses) != "[500 429]" {
			t.Fatalf("diagnostics %s", body)
		}
		if v.FailureSample[0]["upstream_error_message"] != "boom" || v.FailureSample[1]["type"] != "rate_limited" || v.FailureSample[1]["retryable"] != true {
			t.Fatalf("failure sample %v", v.FailureSample)
		}
		if v.UpstreamError["message"] != "slow down" || v.ProviderFailureDiagnostics["category"] != "rate_limited" || v.ProviderFailureDiagnostics["provider"] != "limited" {
			t.Fatalf("upstream error %v / %v", v.UpstreamError, v.ProviderFailureDiagnostics)
		}
		if v.Error["code"] != "upstream_error" || v.ErrorOrigin != "upstream" || v.GenerationID != hdr.Get("X-Generation-Id") {
			t.Fatalf("error %v origin %s", v.Error, v.ErrorOrigin)
		}
		if strings.Contains(string(body), "sk-upstream-secret") {
			t.Fatal("secret leaked")
		}
		gen := env.generation(wsID, v.GenerationID)
		if gen.Status != 502 || gen.CostNanos != 0 || len(gen.Attempts) != 2 {
			t.Fatalf("generation %+v", gen)
		}
		if after := env.balance(wsID); after != before {
			t.Fatalf("failed request changed the wallet: %+v -> %+v", before, after)
		}
	})

	t.Run("only rate limits", func(t *testing.T) {
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "gpt-limited", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Response.Header.Get("Retry-After") != "7" {
			t.Fatalf("%v", err)
		}
	})

	t.Run("caller's invalid request is not retried elsewhere", func(t *testing.T) {
		bad := newFakeOpenAI(t, upstreamError(400, "invalid_request_error", "context_length_exceeded", "This model's maximum context length is 8 tokens", nil))
		env2 := env // same server: reconfigure with a model whose first route refuses as invalid
		_ = env2
		loadCaddyfile(t, gatewayCaddyfile(portOf(env.baseURL), env.dbPath, providerBlock("bad", bad.URL)+providerBlock("backup", healthy.URL)+
			pricedModel("gpt-ctx", pricedRoute("bad", "m")+pricedRoute("backup", "m3")), ""))
		calls := healthy.calls.Load()
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "gpt-ctx", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "maximum context length") {
			t.Fatalf("%v", err)
		}
		if healthy.calls.Load() != calls {
			t.Fatal("an invalid request fell back to another route")
		}
	})
}

func portOf(baseURL string) int {
	var port int
	_, _ = fmt.Sscanf(baseURL[strings.LastIndexByte(baseURL, ':')+1:], "%d", &port)
	return port
}

func TestStreamFailures(t *testing.T) {
	var mu sync.Mutex
	mode := ""
	cancelled := make(chan struct{}, 4)
	up := newFakeOpenAI(t, func(w http.ResponseWriter, r *http.Request, req map[string]any) {
		mu.Lock()
		m := mode
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		chunk := func(content string) {
			fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":null}]}\n\n", content)
			fl.Flush()
		}
		switch m {
		case "drop":
			chunk("partial ")
			chunk("answer ")
			chunk("then ")
			hj, _, _ := w.(http.Hijacker).Hijack()
			_ = hj.Close()
		case "garbage":
			chunk("partial ")
			fmt.Fprint(w, "data: {not json\n\n")
			fl.Flush()
			chunk("answer")
			fmt.Fprint(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
			fmt.Fprint(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5}}\n\ndata: [DONE]\n\n")
		case "unterminated":
			chunk("partial ")
			chunk("answer")
		case "slow":
			for i := 0; i < 200; i++ {
				chunk(fmt.Sprintf("word%d ", i))
				select {
				case <-r.Context().Done():
					cancelled <- struct{}{}
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		case "stall":
			chunk("partial ")
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		}
	})
	env := startGateway(t, providerBlock("primary", up.URL)+pricedModel("gpt-test", pricedRoute("primary", "m")), "")
	wsID, key := env.workspace(5 * usd)
	client := env.openai(key)
	setMode := func(m string) { mu.Lock(); mode = m; mu.Unlock() }
	before := runtime.NumGoroutine()

	for _, m := range []string{"garbage", "unterminated"} {
		t.Run("upstream "+m+" still completes", func(t *testing.T) {
			setMode(m)
			status, hdr, body := env.post(key, "/chat/completions", `{"model":"gpt-test","stream":true,"meta":true,"messages":[{"role":"user","content":"hi"}]}`)
			text := string(body)
			if status != 200 || !strings.HasSuffix(text, "data: [DONE]\n\n") || strings.Contains(text, `"error"`) {
				t.Fatalf("stream: %s", text)
			}
			if m == "garbage" && !strings.Contains(text, `"skipped_frames":1`) {
				t.Fatalf("skipped frame not reported: %s", text)
			}
			gen := env.generation(wsID, hdr.Get("X-Generation-Id"))
			if gen.Status != 200 || gen.OutputTokens == 0 || gen.CostNanos == 0 {
				t.Fatalf("generation %+v", gen)
			}
		})
	}

	for _, m := range []string{"drop", "stall"} {
		t.Run("upstream "+m+" mid-stream", func(t *testing.T) {
			setMode(m)
			var httpResp *http.Response
			stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
				Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
			}, option.WithResponseInto(&httpResp))
			var text strings.Builder
			for stream.Next() {
				for _, ch := range stream.Current().Choices {
					text.WriteString(ch.Delta.Content)
				}
			}
			// openai-go raises the in-band error frame as the stream's error.
			if err := stream.Err(); err == nil || !strings.Contains(err.Error(), "the answer was interrupted") {
				t.Fatalf("stream error: %v (text %q)", err, text.String())
			}
			if !strings.HasPrefix(text.String(), "partial ") {
				t.Fatalf("partial output lost: %q", text.String())
			}
			gen := env.generation(wsID, httpResp.Header.Get("X-Generation-Id"))
			if gen.ErrorCode != "upstream_error" || gen.ErrorOrigin != "upstream" || gen.OutputTokens == 0 || gen.CostNanos == 0 {
				t.Fatalf("partial usage not settled: %+v", gen)
			}
			if b := env.balance(wsID); b.ReservedNanos != 0 {
				t.Fatalf("reservation left: %+v", b)
			}
		})
	}

	t.Run("raw frames: error frame and no [DONE]", func(t *testing.T) {
		setMode("drop")
		status, _, body := env.post(key, "/chat/completions", `{"model":"gpt-test","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		text := string(body)
		if status != 200 || strings.Contains(text, "[DONE]") || !strings.Contains(text, `data: {"error":{`) {
			t.Fatalf("stream: %s", text)
		}
	})

	t.Run("client disconnects", func(t *testing.T) {
		setMode("slow")
		ctx, cancel := context.WithCancel(context.Background())
		var httpResp *http.Response
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		}, option.WithResponseInto(&httpResp))
		for i := 0; i < 3 && stream.Next(); i++ {
		}
		cancel()
		_ = stream.Close()
		select {
		case <-cancelled:
		case <-time.After(5 * time.Second):
			t.Fatal("the upstream request was not cancelled")
		}
		gen := env.generation(wsID, httpResp.Header.Get("X-Generation-Id"))
		deadline := time.Now().Add(5 * time.Second)
		for !gen.Cancelled && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			gen = env.generation(wsID, gen.ID)
		}
		if !gen.Cancelled || gen.OutputTokens == 0 || gen.CostNanos == 0 {
			t.Fatalf("generation %+v", gen)
		}
		if b := env.balance(wsID); b.ReservedNanos != 0 {
			t.Fatalf("reservation left: %+v", b)
		}
	})
	http.DefaultClient.CloseIdleConnections()
	waitGoroutines(t, before)
}

func TestReloadKeepsOneStoreHandle(t *testing.T) {
	up := newFakeOpenAI(t, chatOK("ok", 1, 1))
	env := startGateway(t, providerBlock("primary", up.URL)+pricedModel("gpt-test", pricedRoute("primary", "m")), "")
	_, key := env.workspace(5 * usd)
	for i := 0; i < 3; i++ {
		loadCaddyfile(t, gatewayCaddyfile(portOf(env.baseURL), env.dbPath, providerBlock("primary", up.URL)+pricedModel(fmt.Sprintf("gpt-test-%d", i), pricedRoute("primary", "m")), ""))
		status, _, body := env.post(key, "/chat/completions", fmt.Sprintf(`{"model":"gpt-test-%d","messages":[{"role":"user","content":"hi"}]}`, i))
		if status != 200 {
			t.Fatalf("after reload %d: %d %s", i, status, body)
		}
	}
	count := 0
	stores.Range(func(key, value any) bool { count++; return true })
	if count != 1 {
		t.Fatalf("%d store handles after reloads", count)
	}
}
