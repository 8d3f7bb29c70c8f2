package module

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestAppCaddyfile(t *testing.T) {
	tests := []struct {
		name    string
		input   string
		want    string
		wantErr string
	}{
		{
			name:  "full",
			input: "model_gateway {\n store postgres {env.DATABASE_URL}\n reservation_ttl 1h\n provider oa {\n type openai\n base_url https://api.groq.com/openai/v1\n api_key {env.KEY}\n organization org-1\n project proj-1\n header X-Extra yes\n timeout 2m\n stream_idle_timeout 10s\n transport http {\n  dial_timeout 5s\n  response_header_timeout 30s\n }\n }\n provider m {\n type mock\n latency 5ms\n chunks 3\n chunk_interval 1ms\n text \"hi there\"\n }\n model gpt {\n owned_by openai\n route oa gpt-4o {\n  input 2.50\n  cached_input 1.25\n  output 10\n  max_output_tokens 16384\n }\n route m\n }\n}",
			want:  `{"store":{"driver":"postgres","dsn":"{env.DATABASE_URL}"},"providers":{"m":{"type":"mock","latency":5000000,"chunks":3,"chunk_interval":1000000,"text":"hi there"},"oa":{"type":"openai","base_url":"https://api.groq.com/openai/v1","api_key":"{env.KEY}","organization":"org-1","project":"proj-1","headers":{"X-Extra":"yes"},"timeout":120000000000,"stream_idle_timeout":10000000000,"transport":{"dial_timeout":5000000000,"protocol":"http","response_header_timeout":30000000000}}},"models":[{"name":"gpt","owned_by":"openai","routes":[{"provider":"oa","model":"gpt-4o","pricing":{"input":"2.50","cached_input":"1.25","output":"10"},"max_output_tokens":16384},{"provider":"m"}]}],"reservation_ttl":3600000000000}`,
		},
		{name: "sqlite default path", input: "model_gateway {\n store sqlite\n}", want: `{"store":{"driver":"sqlite"}}`},
		{name: "catalogue options", input: "model_gateway {\n catalog_file /etc/x.json\n credit_top_up off\n model m {\n catalog openai/gpt-4o\n route p\n }\n}", want: `{"models":[{"name":"m","catalog_id":"openai/gpt-4o","routes":[{"provider":"p"}]}],"catalog_file":"/etc/x.json","credit_top_up":false}`},
		{name: "credit_top_up value", input: "model_gateway {\n credit_top_up maybe\n}", wantErr: "want on or off"},
		{name: "duplicate catalog_file", input: "model_gateway {\n catalog_file a\n catalog_file b\n}", wantErr: "catalog_file already specified"},
		{name: "duplicate catalog", input: "model_gateway {\n model m {\n catalog a\n catalog b\n route p\n }\n}", wantErr: "catalog already specified"},
		{name: "unknown subdirective", input: "model_gateway {\n bogus\n}", wantErr: `unrecognized subdirective "bogus"`},
		{name: "lease linger", input: "model_gateway {\n credit_lease_linger 0\n}", want: `{"credit_lease_linger":0}`},
		{name: "store and instance timeouts", input: "model_gateway {\n store_timeout 500ms\n settle_timeout 1m\n instance_heartbeat 5s\n instance_timeout 20s\n}",
			want: `{"store_timeout":500000000,"settle_timeout":60000000000,"instance_heartbeat":5000000000,"instance_timeout":20000000000}`},
		{name: "duplicate store_timeout", input: "model_gateway {\n store_timeout 1s\n store_timeout 2s\n}", wantErr: "store_timeout already specified"},
		{name: "zero instance_heartbeat", input: "model_gateway {\n instance_heartbeat 0\n}", wantErr: "instance_heartbeat must be longer than 0"},
		{name: "bad settle_timeout", input: "model_gateway {\n settle_timeout soon\n}", wantErr: "invalid duration"},
		{name: "instance_timeout args", input: "model_gateway {\n instance_timeout 1s 2s\n}", wantErr: "wrong argument count"},
		{name: "sqlite durability", input: "model_gateway {\n store sqlite /var/lib/gw.db {\n  durability power\n }\n}", want: `{"store":{"driver":"sqlite","path":"/var/lib/gw.db","durability":"power"}}`},
		{name: "bad durability", input: "model_gateway {\n store sqlite {\n  durability disk\n }\n}", wantErr: `durability "disk"`},
		{name: "durability on postgres", input: "model_gateway {\n store postgres x {\n  durability power\n }\n}", wantErr: "applies to the sqlite store"},
		{name: "unknown store option", input: "model_gateway {\n store sqlite {\n  fsync yes\n }\n}", wantErr: "unknown store option"},
		{name: "unknown store", input: "model_gateway {\n store redis\n}", wantErr: "unknown store driver"},
		{name: "duplicate store", input: "model_gateway {\n store sqlite\n store sqlite\n}", wantErr: "store already specified"},
		{name: "postgres needs dsn", input: "model_gateway {\n store postgres\n}", wantErr: "connection string"},
		{name: "provider needs type", input: "model_gateway {\n provider x {\n base_url http://a\n }\n}", wantErr: "type is required"},
		{name: "duplicate provider", input: "model_gateway {\n provider x {\n type mock\n }\n provider x {\n type mock\n }\n}", wantErr: `provider "x" already defined`},
		{name: "duplicate provider option", input: "model_gateway {\n provider x {\n type mock\n type openai\n }\n}", wantErr: "type already specified"},
		{name: "model needs route", input: "model_gateway {\n model x {\n owned_by me\n }\n}", wantErr: "at least one route"},
		{name: "duplicate model", input: "model_gateway {\n model x {\n route p\n }\n model x {\n route p\n }\n}", wantErr: `model "x" already defined`},
		{name: "bad price key", input: "model_gateway {\n model x {\n route p {\n price 1\n }\n }\n}", wantErr: `unrecognized subdirective "price"`},
		{name: "bad duration", input: "model_gateway {\n provider x {\n type mock\n latency soon\n }\n}", wantErr: "invalid duration"},
		{name: "bad chunks", input: "model_gateway {\n provider x {\n type mock\n chunks -2\n }\n}", wantErr: "positive whole number"},
		{name: "route args", input: "model_gateway {\n model x {\n route a b c\n }\n}", wantErr: "wrong argument count"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			app := new(App)
			err := app.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := string(caddyconfig.JSON(app, nil))
			if got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestAppValidate: an instance may not be taken for dead for one late heartbeat.
func TestAppValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		app     App
		wantErr string
	}{
		{name: "defaults", app: App{}},
		{name: "timeout of two heartbeats", app: App{InstanceHeartbeat: caddy.Duration(time.Second), InstanceTimeout: caddy.Duration(2 * time.Second)}},
		{name: "timeout under two heartbeats", app: App{InstanceHeartbeat: caddy.Duration(10 * time.Second), InstanceTimeout: caddy.Duration(15 * time.Second)}, wantErr: "at least twice"},
		{name: "heartbeat past half the default timeout", app: App{InstanceHeartbeat: caddy.Duration(30 * time.Second)}, wantErr: "at least twice"},
		{name: "negative", app: App{StoreTimeout: -1}, wantErr: "store_timeout must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.app.Validate()
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Validate = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestHandlerCaddyfile(t *testing.T) {
	tests := []struct {
		name    string
		input   string
		want    string
		wantErr string
	}{
		{name: "empty", input: "model_gateway", want: `{}`},
		{name: "options", input: "model_gateway {\n base_path /api/v1\n max_body_size 2MB\n stream_idle_timeout 45s\n}", want: `{"base_path":"/api/v1","max_body_size":2000000,"stream_idle_timeout":45000000000}`},
		{name: "args refused", input: "model_gateway /v1", wantErr: "wrong argument count"},
		{name: "bad size", input: "model_gateway {\n max_body_size lots\n}", wantErr: "max_body_size"},
		{name: "duplicate", input: "model_gateway {\n base_path /a\n base_path /b\n}", wantErr: "already specified"},
		{name: "unknown", input: "model_gateway {\n upstream x\n}", wantErr: `unrecognized subdirective "upstream"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := new(Handler)
			err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := string(caddyconfig.JSON(h, nil)); got != tc.want {
				t.Fatalf("got %s want %s", got, tc.want)
			}
		})
	}
}

// TestCaddyfileExampleGolden keeps Caddyfile.example and its JSON in step: run with -update
// after a deliberate change.
func TestCaddyfileExampleGolden(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "Caddyfile.example"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt(src, map[string]any{"filename": "Caddyfile.example"})
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) > 0 {
		t.Fatalf("warnings: %v", warnings)
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, cfg, "", "\t"); err != nil {
		t.Fatal(err)
	}
	pretty.WriteByte('\n')
	golden := filepath.Join("testdata", "Caddyfile.example.json")
	if *update {
		if err := os.WriteFile(golden, pretty.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./module -run Golden -update)", err)
	}
	if !bytes.Equal(pretty.Bytes(), want) {
		t.Fatalf("Caddyfile.example adapts to:\n%s\nwant:\n%s", pretty.Bytes(), want)
	}
}
