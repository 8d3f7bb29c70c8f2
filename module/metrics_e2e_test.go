package module

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// metricsCaddyfile serves the gateway twice (under /v1 and /v2, two handlers of one
// configuration) with the admin API on adminPort, and Caddy's metrics handler on the site;
// extra is added to the gateway's options.
func metricsCaddyfile(adminPort, port int, dbPath, extra string) string {
	return fmt.Sprintf(`{
	admin 127.0.0.1:%d
	persist_config off
	grace_period 1ns
	model_gateway {
		store sqlite %s
		credit_lease_linger 0
		provider mock {
			type mock
			chunks 2
		}
		model mock-1:free {
			route mock mock-1
		}
%s
	}
}

http://127.0.0.1:%d {
	metrics /metrics
	route /v1/* {
		model_gateway
	}
	route /v2/* {
		model_gateway {
			base_path /v2
		}
	}
}
`, adminPort, dbPath, extra, port)
}

// startMetricsGateway runs metricsCaddyfile with extra and returns the environment, the
// admin API's URL and how to render the configuration with other extra options.
func startMetricsGateway(t *testing.T, extra string) (env *gatewayEnv, adminURL string, config func(extra string) string) {
	t.Helper()
	dir := t.TempDir()
	setDataDirs(t, dir)
	adminPort, port := freePort(t), freePort(t)
	env = &gatewayEnv{t: t, baseURL: fmt.Sprintf("http://127.0.0.1:%d", port), dbPath: filepath.Join(dir, "gateway.db")}
	config = func(extra string) string { return metricsCaddyfile(adminPort, port, env.dbPath, extra) }
	loadCaddyfile(t, config(extra))
	t.Cleanup(func() {
		// Stop leaves the admin API listening: a configuration without it closes it.
		_ = caddy.Load([]byte(`{"admin":{"disabled":true}}`), true)
		_ = caddy.Stop()
	})
	env.openStore()
	return env, fmt.Sprintf("http://127.0.0.1:%d", adminPort), config
}

// The gateway's metrics are registered on Caddy's registry and served on the admin API's
// /metrics and by a metrics handler, with both handlers of the configuration counting into
// the same series.
func TestMetricsOnCaddysEndpoints(t *testing.T) {
	env, adminURL, _ := startMetricsGateway(t, "")
	// A free model needs no credit, but a key all the same.
	_, key := env.workspace(0)
	admin := adminURL + "/metrics"
	chat := func(base string) {
		t.Helper()
		client := env.openai(key, option.WithBaseURL(env.baseURL+base))
		_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model:    "mock-1:free",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	chat("/v1/")
	chat("/v2/")
	const series = `model_gateway_requests_total{code="200",endpoint="/chat/completions",model="mock-1:free",provider="mock"}`
	for _, url := range []string{admin, env.baseURL + "/metrics"} {
		if got := scrape(t, url, series); got != "2" {
			t.Errorf("%s: %s = %q, want 2", url, series, got)
		}
	}
	if got := scrape(t, admin, `model_gateway_breaker_open{provider="mock"}`); got != "0" {
		t.Errorf("breaker_open = %q, want 0", got)
	}
}

// The gateway's counters are the process's: a reload through the admin API to a changed
// configuration keeps them, and a stream in flight across the reload is counted when it
// ends. What was counted before, plus what was served across and after, is what is counted
// after.
func TestMetricsSurviveReload(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	up := newFakeOpenAI(t, func(w http.ResponseWriter, r *http.Request, req map[string]any) {
		close(arrived)
		<-release
		streamChat(w, req["model"].(string), []string{"across ", "a reload"}, 5, 3, 0)
	})
	slow := providerBlock("slow", up.URL) + `
		model slow-1:free {
			route slow slow-1
		}`
	env, admin, config := startMetricsGateway(t, slow)
	_, key := env.workspace(0)
	client := env.openai(key)
	chat := func() {
		t.Helper()
		_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model:    "mock-1:free",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	const (
		mockSeries = `model_gateway_requests_total{code="200",endpoint="/chat/completions",model="mock-1:free",provider="mock"}`
		slowSeries = `model_gateway_requests_total{code="200",endpoint="/chat/completions",model="slow-1:free",provider="slow"}`
		slowUsage  = `model_gateway_usage_total{dimension="output",model="slow-1:free",provider="slow"}`
	)
	chat()
	chat()
	if got := scrape(t, admin+"/metrics", mockSeries); got != "2" {
		t.Fatalf("before the reload: %s = %q, want 2", mockSeries, got)
	}

	streamed := make(chan string, 1)
	go func() {
		stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
			Model:    "slow-1:free",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")},
		})
		var text strings.Builder
		for stream.Next() {
			if ch := stream.Current(); len(ch.Choices) > 0 {
				text.WriteString(ch.Choices[0].Delta.Content)
			}
		}
		if err := stream.Err(); err != nil {
			text.WriteString(" error: " + err.Error())
		}
		streamed <- text.String()
	}()
	<-arrived

	// A changed configuration (one model more), loaded as an operator would.
	changed := config(slow + `
		model mock-2:free {
			route mock mock-2
		}`)
	req, _ := http.NewRequest(http.MethodPost, admin+"/load", strings.NewReader(changed))
	req.Header.Set("Content-Type", "text/caddyfile")
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reload: %d %s", resp.StatusCode, body)
	}
	chat()
	close(release)
	if text := <-streamed; text != "across a reload" {
		t.Fatalf("the stream across the reload read %q", text)
	}
	chat()

	for _, tc := range []struct{ series, want string }{
		{mockSeries, "4"},
		{slowSeries, "1"},
		{slowUsage, "3"},
		{`model_gateway_breaker_open{provider="mock"}`, "0"},
	} {
		if got := scrape(t, admin+"/metrics", tc.series); got != tc.want {
			t.Errorf("after the reload: %s = %q, want %s", tc.series, got, tc.want)
		}
	}
}

// scrape reads the value of one series from a Prometheus text endpoint ("" if absent).
func scrape(t *testing.T, url, series string) string {
	t.Helper()
	resp, err := testClient.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d %s", url, resp.StatusCode, data)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}
