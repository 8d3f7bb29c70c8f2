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

	"github.com/modelgateway/caddy-modelgateway/store/sqlite"
)

// metricsCaddyfile serves the gateway twice (under /v1 and /v2, two handlers of one
// configuration) with the admin API on adminPort, and Caddy's metrics handler on the site.
func metricsCaddyfile(adminPort, port int, dbPath string) string {
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
`, adminPort, dbPath, port)
}

// The gateway's metrics are registered on Caddy's registry and served on the admin API's
// /metrics and by a metrics handler, with both handlers of the configuration counting into
// the same series; a reload registers them on the new configuration's registry.
func TestMetricsOnCaddysEndpoints(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_DATA_HOME", filepath.Join(dir, "data"))
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	adminPort, port := freePort(t), freePort(t)
	env := &gatewayEnv{t: t, baseURL: fmt.Sprintf("http://127.0.0.1:%d", port), dbPath: filepath.Join(dir, "gateway.db")}
	cf := metricsCaddyfile(adminPort, port, env.dbPath)
	loadCaddyfile(t, cf)
	t.Cleanup(func() {
		// Stop leaves the admin API listening: a configuration without it closes it.
		_ = caddy.Load([]byte(`{"admin":{"disabled":true}}`), true)
		_ = caddy.Stop()
	})
	s, err := sqlite.Open(context.Background(), env.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	env.store = s
	// A free model needs no credit, but a key all the same.
	_, key := env.workspace(0)
	admin := fmt.Sprintf("http://127.0.0.1:%d/metrics", adminPort)
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

	// The new configuration counts on its own registry, as Caddy's own metrics do.
	loadCaddyfile(t, cf)
	chat("/v1/")
	if got := scrape(t, admin, series); got != "1" {
		t.Errorf("after a reload: %s = %q, want 1", series, got)
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
