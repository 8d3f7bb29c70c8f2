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

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestAppCaddyfile(t *testing.T) {
	tests := []caddyfileCase{
		{
			name:  "full",
			input: "model_gateway {\n store postgres {env.DATABASE_URL}\n reservation_ttl 1h\n provider oa {\n type openai\n base_url https://api.groq.com/openai/v1\n api_key {env.KEY}\n organization org-1\n project proj-1\n header X-Extra yes\n timeout 2m\n stream_idle_timeout 10s\n transport http {\n  dial_timeout 5s\n  response_header_timeout 30s\n }\n }\n provider m {\n type mock\n latency 5ms\n chunks 3\n chunk_interval 1ms\n text \"hi there\"\n }\n model gpt {\n owned_by openai\n route oa gpt-4o {\n  input 2.50\n  cached_input 1.25\n  output 10\n  max_output_tokens 16384\n }\n route m\n }\n}",
			want:  `{"store":{"driver":"postgres","dsn":"{env.DATABASE_URL}"},"providers":{"m":{"adapter":{"chunk_interval":1000000,"chunks":3,"latency":5000000,"text":"hi there","type":"mock"}},"oa":{"adapter":{"api_key":"{env.KEY}","base_url":"https://api.groq.com/openai/v1","headers":{"X-Extra":"yes"},"organization":"org-1","project":"proj-1","stream_idle_timeout":10000000000,"timeout":120000000000,"transport":{"dial_timeout":5000000000,"protocol":"http","response_header_timeout":30000000000},"type":"openai"}}},"models":[{"name":"gpt","owned_by":"openai","routes":[{"provider":"oa","model":"gpt-4o","pricing":{"input":"2.50","cached_input":"1.25","output":"10"},"max_output_tokens":16384},{"provider":"m"}]}],"reservation_ttl":3600000000000}`,
		},
		{name: "sqlite default path", input: "model_gateway {\n store sqlite\n}", want: `{"store":{"driver":"sqlite"}}`},
		{name: "catalogue options", input: "model_gateway {\n catalog_file /etc/x.json\n credit_top_up off\n model m {\n catalog openai/gpt-4o\n route p\n }\n}", want: `{"models":[{"name":"m","catalog_id":"openai/gpt-4o","routes":[{"provider":"p"}]}],"catalog_file":"/etc/x.json","credit_top_up":false}`},
		{name: "credit_top_up value", input: "model_gateway {\n credit_top_up maybe\n}", wantErr: "want on or off"},
		{name: "duplicate catalog_file", input: "model_gateway {\n catalog_file a\n catalog_file b\n}", wantErr: "catalog_file already specified"},
		{name: "model endpoints", input: "model_gateway {\n model m {\n endpoints embeddings moderations\n route p\n }\n}", want: `{"models":[{"name":"m","endpoints":["embeddings","moderations"],"routes":[{"provider":"p"}]}]}`},
		{name: "model endpoints empty", input: "model_gateway {\n model m {\n endpoints\n route p\n }\n}", wantErr: "wrong argument count"},
		{name: "upload_dir", input: "model_gateway {\n upload_dir /var/spool/gateway\n}", want: `{"upload_dir":"/var/spool/gateway"}`},
		{name: "duplicate upload_dir", input: "model_gateway {\n upload_dir a\n upload_dir b\n}", wantErr: "upload_dir already specified"},
		{name: "secret_key", input: "model_gateway {\n secret_key {env.GATEWAY_SECRET_KEY}\n}", want: `{"secret_key":"{env.GATEWAY_SECRET_KEY}"}`},
		{name: "duplicate secret_key", input: "model_gateway {\n secret_key a\n secret_key b\n}", wantErr: "secret_key already specified"},
		{name: "webhook_allow", input: "model_gateway {\n webhook_allow 10.0.0.0/8 192.168.1.5\n}", want: `{"webhook_allow":["10.0.0.0/8","192.168.1.5"]}`},
		{name: "webhook_allow without networks", input: "model_gateway {\n webhook_allow\n}", wantErr: "wrong argument count"},
		{name: "duplicate webhook_allow", input: "model_gateway {\n webhook_allow 10.0.0.0/8\n webhook_allow 10.0.0.0/8\n}", wantErr: "webhook_allow already specified"},
		{name: "duplicate catalog", input: "model_gateway {\n model m {\n catalog a\n catalog b\n route p\n }\n}", wantErr: "catalog already specified"},
		{name: "unknown subdirective", input: "model_gateway {\n bogus\n}", wantErr: `unrecognized subdirective "bogus"`},
		{name: "lease linger", input: "model_gateway {\n credit_lease_linger 0\n}", want: `{"credit_lease_linger":0}`},
		{name: "store and instance timeouts", input: "model_gateway {\n store_timeout 500ms\n settle_timeout 1m\n instance_heartbeat 5s\n instance_timeout 20s\n}",
			want: `{"store_timeout":500000000,"settle_timeout":60000000000,"instance_heartbeat":5000000000,"instance_timeout":20000000000}`},
		{name: "duplicate store_timeout", input: "model_gateway {\n store_timeout 1s\n store_timeout 2s\n}", wantErr: "store_timeout already specified"},
		{name: "zero instance_heartbeat", input: "model_gateway {\n instance_heartbeat 0\n}", wantErr: "instance_heartbeat must be longer than 0"},
		{name: "bad settle_timeout", input: "model_gateway {\n settle_timeout soon\n}", wantErr: "invalid duration"},
		{name: "instance_timeout args", input: "model_gateway {\n instance_timeout 1s 2s\n}", wantErr: "wrong argument count"},
		{name: "music retention", input: "model_gateway {\n music_retention 72h\n}", want: `{"music_retention":259200000000000}`},
		{name: "max file size", input: "model_gateway {\n max_file_size 100MiB\n}", want: `{"max_file_size":104857600}`},
		{name: "bad max file size", input: "model_gateway {\n max_file_size lots\n}", wantErr: `max_file_size "lots"`},
		{name: "music retention zero", input: "model_gateway {\n music_retention 0s\n}", wantErr: "music_retention must be longer than 0"},
		{name: "sqlite durability", input: "model_gateway {\n store sqlite /var/lib/gw.db {\n  durability power\n }\n}", want: `{"store":{"driver":"sqlite","path":"/var/lib/gw.db","durability":"power"}}`},
		{name: "bad durability", input: "model_gateway {\n store sqlite {\n  durability disk\n }\n}", wantErr: `durability "disk"`},
		{name: "durability on postgres", input: "model_gateway {\n store postgres x {\n  durability power\n }\n}", wantErr: "applies to the sqlite store"},
		{name: "unknown store option", input: "model_gateway {\n store sqlite {\n  fsync yes\n }\n}", wantErr: "unknown store option"},
		{name: "unknown store", input: "model_gateway {\n store redis\n}", wantErr: "unknown store driver"},
		{name: "duplicate store", input: "model_gateway {\n store sqlite\n store sqlite\n}", wantErr: "store already specified"},
		{name: "postgres needs dsn", input: "model_gateway {\n store postgres\n}", wantErr: "connection string"},
		{name: "provider needs type", input: "model_gateway {\n provider x {\n base_url http://a\n }\n}", wantErr: "type is required"},
		{name: "provider options around the type's", input: "model_gateway {\n provider a {\n retries 1\n version 2023-06-01\n type anthropic\n header A 1\n circuit_breaker off\n header B 2\n default_max_tokens 8192\n prefill off\n }\n provider g {\n type gemini\n api_key k\n }\n}",
			want: `{"providers":{"a":{"adapter":{"default_max_tokens":8192,"headers":{"A":"1","B":"2"},"type":"anthropic","version":"2023-06-01"},"retries":1,"circuit_breaker_threshold":0,"prefill":false},"g":{"adapter":{"api_key":"k","type":"gemini"}}}}`},
		{name: "mistral provider", input: "model_gateway {\n provider mi {\n type mistral\n api_key {env.MISTRAL_API_KEY}\n base_url https://eu.api.mistral.ai/v1\n header X-Team ocr\n timeout 5m\n stream_idle_timeout 45s\n transport http {\n  dial_timeout 3s\n }\n retries 2\n }\n model voxtral {\n route mi voxtral-mini-latest {\n  input_audio_seconds 0.0000333\n }\n }\n}",
			want: `{"providers":{"mi":{"adapter":{"api_key":"{env.MISTRAL_API_KEY}","base_url":"https://eu.api.mistral.ai/v1","headers":{"X-Team":"ocr"},"stream_idle_timeout":45000000000,"timeout":300000000000,"transport":{"dial_timeout":3000000000,"protocol":"http"},"type":"mistral"},"retries":2}},"models":[{"name":"voxtral","routes":[{"provider":"mi","model":"voxtral-mini-latest","pricing":{"input_audio_seconds":"0.0000333"}}]}]}`},
		{name: "mistral provider defaults", input: "model_gateway {\n provider mi {\n type mistral\n }\n}", want: `{"providers":{"mi":{"adapter":{"type":"mistral"}}}}`},
		{name: "mistral has no api option", input: "model_gateway {\n provider mi {\n type mistral\n api responses\n }\n}", wantErr: `unrecognized subdirective "api"`},
		{name: "mistral has no organization", input: "model_gateway {\n provider mi {\n type mistral\n organization o\n }\n}", wantErr: `unrecognized subdirective "organization"`},
		{name: "mistral duplicate api_key", input: "model_gateway {\n provider mi {\n type mistral\n api_key a\n api_key b\n }\n}", wantErr: "api_key already specified"},
		{name: "mistral header args", input: "model_gateway {\n provider mi {\n type mistral\n header X-Only\n }\n}", wantErr: "wrong argument count"},
		{name: "elevenlabs provider", input: "model_gateway {\n provider el {\n type elevenlabs\n api_key {env.ELEVENLABS_API_KEY}\n base_url https://api.eu.residency.elevenlabs.io\n header X-Trace on\n timeout 5m\n stream_idle_timeout 20s\n transport http {\n  dial_timeout 3s\n }\n retries 2\n }\n model tts {\n route el eleven_multilingual_v2 {\n  input_characters 100\n }\n }\n}",
			want: `{"providers":{"el":{"adapter":{"api_key":"{env.ELEVENLABS_API_KEY}","base_url":"https://api.eu.residency.elevenlabs.io","headers":{"X-Trace":"on"},"stream_idle_timeout":20000000000,"timeout":300000000000,"transport":{"dial_timeout":3000000000,"protocol":"http"},"type":"elevenlabs"},"retries":2}},"models":[{"name":"tts","routes":[{"provider":"el","model":"eleven_multilingual_v2","pricing":{"input_characters":"100"}}]}]}`},
		{name: "elevenlabs option of another type", input: "model_gateway {\n provider el {\n type elevenlabs\n organization org-1\n }\n}", wantErr: `unrecognized subdirective "organization"`},
		{name: "elevenlabs duplicate api_key", input: "model_gateway {\n provider el {\n type elevenlabs\n api_key a\n api_key b\n }\n}", wantErr: "api_key already specified"},
		{name: "third-party provider type", input: "model_gateway {\n provider p {\n type echo\n greeting hi\n retries 0\n }\n}", want: `{"providers":{"p":{"adapter":{"greeting":"hi","type":"echo"},"retries":0}}}`},
		{name: "unknown provider type", input: "model_gateway {\n provider x {\n type bedrock\n }\n}", wantErr: `unknown provider type "bedrock": no module model_gateway.providers.bedrock in this build, whose types are anthropic, batch_fake, echo, elevenlabs, gemini, media_fake, mistral, mock and openai; add a provider type from another Go module with xcaddy build --with <its module path>, at Testfile:3`},
		{name: "option of another type", input: "model_gateway {\n provider x {\n type mock\n base_url http://a\n }\n}", wantErr: `unrecognized subdirective "base_url"`},
		{name: "bad api", input: "model_gateway {\n provider x {\n type openai\n api completions\n }\n}", wantErr: "want chat or responses"},
		{name: "duplicate resilience option", input: "model_gateway {\n provider x {\n type mock\n retries 1\n retries 2\n }\n}", wantErr: "retries already specified"},
		{name: "duplicate type option", input: "model_gateway {\n provider x {\n type openai\n base_url http://a\n base_url http://b\n }\n}", wantErr: "base_url already specified"},
		{name: "duplicate provider", input: "model_gateway {\n provider x {\n type mock\n }\n provider x {\n type mock\n }\n}", wantErr: `provider "x" already defined`},
		{name: "duplicate provider option", input: "model_gateway {\n provider x {\n type mock\n type openai\n }\n}", wantErr: "type already specified"},
		{name: "model needs route", input: "model_gateway {\n model x {\n owned_by me\n }\n}", wantErr: "at least one route"},
		{name: "duplicate model", input: "model_gateway {\n model x {\n route p\n }\n model x {\n route p\n }\n}", wantErr: `model "x" already defined`},
		{name: "bad price key", input: "model_gateway {\n model x {\n route p {\n price 1\n }\n }\n}", wantErr: `unrecognized subdirective "price"`},
		{name: "every price dimension", input: "model_gateway {\n model x {\n route p {\n  input 0.15\n  cached_input 0.075\n  cache_write 0.1875\n  output 0.60\n  reasoning 1.2\n" +
			"  input_audio_tokens 40\n  output_audio_tokens 80\n  image_input_tokens 10\n  image_output_tokens 40\n  input_characters 15\n" +
			"  input_audio_seconds 0.0001\n  output_audio_seconds 0.0002\n  image 0.04 size 1024x1024\n  image 0.08 quality hd size 1024x1024\n  image 0.02\n" +
			"  page 0.001\n  output_video_seconds 0.10 resolution 720p\n  output_video_seconds 0.30 resolution 1080p\n  request 0.001\n }\n }\n}",
			want: `{"models":[{"name":"x","routes":[{"provider":"p","pricing":{"input":"0.15","cached_input":"0.075","cache_write":"0.1875","output":"0.60","reasoning":"1.2",` +
				`"input_audio_tokens":"40","output_audio_tokens":"80","image_input_tokens":"10","image_output_tokens":"40","input_characters":"15",` +
				`"input_audio_seconds":"0.0001","output_audio_seconds":"0.0002","image":[{"price":"0.04","size":"1024x1024"},{"price":"0.08","size":"1024x1024","quality":"hd"},{"price":"0.02"}],` +
				`"page":"0.001","output_video_seconds":[{"price":"0.10","resolution":"720p"},{"price":"0.30","resolution":"1080p"}],"request":"0.001"}}]}]}`},
		{name: "image key twice", input: "model_gateway {\n model x {\n route p {\n  image 0.04 size 1024x1024\n  image 0.05 size 1024X1024\n }\n }\n}", wantErr: `image price for size "1024X1024" and quality "" already specified`},
		{name: "image any twice", input: "model_gateway {\n model x {\n route p {\n  image 0.04\n  image 0.05\n }\n }\n}", wantErr: "already specified"},
		{name: "resolution twice", input: "model_gateway {\n model x {\n route p {\n  output_video_seconds 0.1 resolution 720p\n  output_video_seconds 0.2 resolution 720p\n }\n }\n}", wantErr: `resolution "720p" already specified`},
		{name: "image unknown key", input: "model_gateway {\n model x {\n route p {\n  image 0.04 resolution 720p\n }\n }\n}", wantErr: `image: unknown key "resolution"`},
		{name: "image key twice on a line", input: "model_gateway {\n model x {\n route p {\n  image 0.04 size 1 size 2\n }\n }\n}", wantErr: "image: size already specified"},
		{name: "image key without value", input: "model_gateway {\n model x {\n route p {\n  image 0.04 quality\n }\n }\n}", wantErr: "image: quality needs a value"},
		{name: "image without price", input: "model_gateway {\n model x {\n route p {\n  image\n }\n }\n}", wantErr: "wrong argument count"},
		{name: "page twice", input: "model_gateway {\n model x {\n route p {\n  page 1\n  page 2\n }\n }\n}", wantErr: "page already specified"},
		{name: "price args", input: "model_gateway {\n model x {\n route p {\n  input_characters 15 per_million\n }\n }\n}", wantErr: "wrong argument count"},
		{name: "bad duration", input: "model_gateway {\n provider x {\n type mock\n latency soon\n }\n}", wantErr: "invalid duration"},
		{name: "bad chunks", input: "model_gateway {\n provider x {\n type mock\n chunks -2\n }\n}", wantErr: "positive whole number"},
		{name: "route args", input: "model_gateway {\n model x {\n route a b c\n }\n}", wantErr: "wrong argument count"},
		{name: "batches", input: "model_gateway {\n batches {\n  chunks 8\n  rows_per_chunk 4\n  batch_chunks 3\n  provider_rows 32\n  row_timeout 2m\n }\n}",
			want: `{"batches":{"chunks":8,"rows_per_chunk":4,"batch_chunks":3,"provider_rows":32,"row_timeout":120000000000}}`},
		{name: "batches empty", input: "model_gateway {\n batches\n}", want: `{"batches":{}}`},
		{name: "batches duplicate option", input: "model_gateway {\n batches {\n  chunks 1\n  chunks 2\n }\n}", wantErr: "chunks already specified"},
		{name: "batches unknown option", input: "model_gateway {\n batches {\n  rows 1\n }\n}", wantErr: `unrecognized subdirective "rows"`},
		{name: "batches zero", input: "model_gateway {\n batches {\n  provider_rows 0\n }\n}", wantErr: "positive whole number"},
		{name: "batches too many", input: "model_gateway {\n batches {\n  chunks 5000\n }\n}", wantErr: "at most 1024"},
		{name: "batches twice", input: "model_gateway {\n batches\n batches\n}", wantErr: "batches already specified"},
	}
	runCaddyfileCases(t, tests, func() caddyfile.Unmarshaler { return new(App) })
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
	tests := []caddyfileCase{
		{name: "empty", input: "model_gateway", want: `{}`},
		{name: "options", input: "model_gateway {\n base_path /api/v1\n max_body_size 2MB\n stream_idle_timeout 45s\n}", want: `{"base_path":"/api/v1","max_body_size":2000000,"stream_idle_timeout":45000000000}`},
		{name: "args refused", input: "model_gateway /v1", wantErr: "wrong argument count"},
		{name: "bad size", input: "model_gateway {\n max_body_size lots\n}", wantErr: "max_body_size"},
		{name: "body timeouts", input: "model_gateway {\n body_timeout 10s\n body_min_rate 64KiB\n}", want: `{"body_timeout":10000000000,"body_min_rate":65536}`},
		{name: "body timeouts off", input: "model_gateway {\n body_timeout off\n body_min_rate off\n}", want: `{"body_timeout":-1,"body_min_rate":-1}`},
		{name: "bad body timeout", input: "model_gateway {\n body_timeout 0s\n}", wantErr: "body_timeout"},
		{name: "bad body min rate", input: "model_gateway {\n body_min_rate fast\n}", wantErr: "body_min_rate"},
		{name: "duplicate", input: "model_gateway {\n base_path /a\n base_path /b\n}", wantErr: "already specified"},
		{name: "unknown", input: "model_gateway {\n upstream x\n}", wantErr: `unrecognized subdirective "upstream"`},
	}
	runCaddyfileCases(t, tests, func() caddyfile.Unmarshaler { return new(Handler) })
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

// TestPriceConfigResolve: every price of the configuration reaches the route's price, in
// nanodollars, with the defaults of the cached, cache-write and reasoning prices; a price
// that could never bill is refused when the configuration loads.
func TestPriceConfigResolve(t *testing.T) {
	pc := &PriceConfig{
		Input: "0.15", Output: "0.60", InputAudioTokens: "40", OutputAudioTokens: "80", ImageInputTokens: "10", ImageOutputTokens: "40",
		InputCharacters: "15", InputAudioSeconds: "0.0001", OutputAudioSeconds: "0.0002", Page: "0.001", Request: "$0.002",
		Image:              []ImagePriceConfig{{Price: "0.04", Size: "1024x1024"}, {Price: "0.08", Size: "1024x1024", Quality: "hd"}},
		OutputVideoSeconds: []VideoPriceConfig{{Price: "0.10", Resolution: "720p"}},
	}
	got, err := pc.resolve()
	if err != nil {
		t.Fatal(err)
	}
	want := pricing.Price{
		Input: 150_000_000, CachedInput: 150_000_000, CacheWrite: 150_000_000, Output: 600_000_000, Reasoning: 600_000_000,
		InputAudioTokens: 40_000_000_000, OutputAudioTokens: 80_000_000_000, ImageInputTokens: 10_000_000_000, ImageOutputTokens: 40_000_000_000,
		InputCharacters: 15_000_000_000, InputAudioSeconds: 100_000, OutputAudioSeconds: 200_000, Page: 1_000_000, PerRequest: 2_000_000,
	}
	want, _ = want.WithImages(pricing.ImagePrice{Size: "1024x1024", Nanos: 40_000_000}, pricing.ImagePrice{Size: "1024x1024", Quality: "hd", Nanos: 80_000_000})
	want, _ = want.WithVideoSeconds(pricing.VideoPrice{Resolution: "720p", Nanos: 100_000_000})
	if !got.Equal(want) {
		t.Fatalf("resolved %+v %+v %+v\nwant %+v", got, got.Images(), got.VideoSeconds(), want)
	}
	if p, err := (*PriceConfig)(nil).resolve(); err != nil || !p.IsZero() {
		t.Fatalf("no pricing: %+v %v", p, err)
	}
	for _, tc := range []struct {
		name string
		pc   PriceConfig
		want string
	}{
		{"bad decimal", PriceConfig{InputCharacters: "1e3"}, "price input_characters"},
		{"bad image price", PriceConfig{Image: []ImagePriceConfig{{Price: "-1"}}}, "price image 1"},
		{"missing image price", PriceConfig{Image: []ImagePriceConfig{{Size: "1024x1024"}}}, "price image 1: empty amount"},
		{"auto size", PriceConfig{Image: []ImagePriceConfig{{Price: "0.04", Size: "auto"}}}, `size "auto"`},
		{"image key twice", PriceConfig{Image: []ImagePriceConfig{{Price: "1", Quality: "hd"}, {Price: "2", Quality: "HD"}}}, "priced twice"},
		{"bad video price", PriceConfig{OutputVideoSeconds: []VideoPriceConfig{{Price: "0.1"}, {Price: "x", Resolution: "720p"}}}, "price output_video_seconds 2"},
		{"resolution twice", PriceConfig{OutputVideoSeconds: []VideoPriceConfig{{Price: "1"}, {Price: "2"}}}, "priced twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.pc.resolve(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// caddyfileCase is a Caddyfile parse test: the input, and the JSON it makes or the
// error it is refused with.
type caddyfileCase struct {
	name    string
	input   string
	want    string
	wantErr string
}

// runCaddyfileCases parses each case's input with a new unmarshaler.
func runCaddyfileCases(t *testing.T, tests []caddyfileCase, newUnmarshaler func() caddyfile.Unmarshaler) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u := newUnmarshaler()
			err := u.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := string(caddyconfig.JSON(u, nil)); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}
