package module

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

func init() {
	caddy.RegisterModule(eventRecorder{})
}

// recordedEvents receives the events that eventRecorder subscribers are given.
var recordedEvents = make(chan caddy.Event, 16)

// eventRecorder is an event handler module, as an operator's subscriber would be.
type eventRecorder struct{}

func (eventRecorder) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "events.handlers.model_gateway_test_recorder", New: func() caddy.Module { return eventRecorder{} }}
}

func (eventRecorder) Handle(_ context.Context, e caddy.Event) error {
	recordedEvents <- e
	return nil
}

// loadRecordingEvents runs Caddyfile cf with the events app sending event to
// eventRecorder (recordedEvents, drained of any earlier test's first).
func loadRecordingEvents(t *testing.T, cf, event string) {
	t.Helper()
	adapted, _, err := caddyconfig.GetAdapter("caddyfile").Adapt(caddyfile.Format([]byte(cf)), nil)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(adapted, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["apps"].(map[string]any)["events"] = map[string]any{"subscriptions": []any{map[string]any{
		"events": []string{event}, "handlers": []any{map[string]any{"handler": "model_gateway_test_recorder"}},
	}}}
	cfgJSON, _ := json.Marshal(cfg)
	for len(recordedEvents) > 0 {
		<-recordedEvents
	}
	if err := caddy.Load(cfgJSON, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = caddy.Stop() })
}

// A metered request's outcome is published as Caddy placeholders, which the access log
// takes with log_append and a deferred header directive reads, and as an event for
// subscribers once the request is settled.
func TestOutcomePlaceholdersAndEvent(t *testing.T) {
	dir := t.TempDir()
	setDataDirs(t, dir)
	up := newFakeOpenAI(t, chatOK("Hello there", 5, 2))
	port := freePort(t)
	env := &gatewayEnv{t: t, baseURL: fmt.Sprintf("http://127.0.0.1:%d", port), dbPath: filepath.Join(dir, "gateway.db")}
	accessLog := filepath.Join(dir, "access.log")
	cf := fmt.Sprintf(`{
	admin off
	persist_config off
	grace_period 1ns
	model_gateway {
		store sqlite %s
		credit_lease_linger 0
%s
	}
}

http://127.0.0.1:%d {
	log {
		output file %s
		format json
	}
	log_append generation_id {http.model_gateway.generation_id}
	log_append workspace_id {http.model_gateway.workspace_id}
	log_append model {http.model_gateway.model}
	log_append provider {http.model_gateway.provider}
	log_append cost_nanos {http.model_gateway.cost_nanos}
	header >X-Answered-By {http.model_gateway.provider}
	route /v1/* {
		model_gateway
	}
}
`, env.dbPath, providerBlock("up", up.URL)+pricedModel("m", pricedRoute("up", "up-model")), port, accessLog)
	loadRecordingEvents(t, cf, FinishedEvent)
	env.openStore()
	wsID, key := env.workspace(10 * usd)

	client := env.openai(key)
	params := openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
	var resp, streamResp *http.Response
	if _, err := client.Chat.Completions.New(context.Background(), params, option.WithResponseInto(&resp)); err != nil {
		t.Fatal(err)
	}
	stream := client.Chat.Completions.NewStreaming(context.Background(), params, option.WithResponseInto(&streamResp))
	for stream.Next() {
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}

	want := map[string]map[string]any{}
	for _, r := range []*http.Response{resp, streamResp} {
		id := r.Header.Get("X-Generation-Id")
		if got := r.Header.Get("X-Answered-By"); got != "up" {
			t.Errorf("%s: the deferred header read provider %q, want up", id, got)
		}
		gen := env.generation(wsID, id)
		if gen.CostNanos == 0 {
			t.Fatalf("%s: free, want a cost", id)
		}
		want[id] = map[string]any{"generation_id": id, "workspace_id": wsID, "model": "m", "provider": "up", "cost_nanos": float64(gen.CostNanos)}
	}

	f, err := os.Open(accessLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	logged := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("%v: %s", err, sc.Text())
		}
		w, ok := want[fmt.Sprint(line["generation_id"])]
		if !ok {
			continue
		}
		logged++
		for k, v := range w {
			if line[k] != v {
				t.Errorf("access log %s = %v, want %v", k, line[k], v)
			}
		}
	}
	if logged != len(want) {
		t.Fatalf("%d access log lines name the requests' generations, want %d", logged, len(want))
	}

	for range want {
		e := <-recordedEvents
		w := want[fmt.Sprint(e.Data["generation_id"])]
		if w == nil || e.Name() != FinishedEvent || e.Data["status"] != http.StatusOK || e.Data["endpoint"] != "/chat/completions" {
			t.Fatalf("event %s %v", e.Name(), e.Data)
		}
		for k, v := range w {
			if k == "cost_nanos" {
				v = int64(v.(float64))
			}
			if e.Data[k] != v {
				t.Errorf("event %s = %v, want %v", k, e.Data[k], v)
			}
		}
	}
}
