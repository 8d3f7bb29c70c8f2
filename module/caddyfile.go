package module

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"

	"github.com/modelgateway/caddy-modelgateway/notify"
)

func init() {
	httpcaddyfile.RegisterGlobalOption("model_gateway", parseGlobalOption)
	httpcaddyfile.RegisterHandlerDirective("model_gateway", parseHandlerDirective)
	httpcaddyfile.RegisterDirectiveOrder("model_gateway", httpcaddyfile.Before, "reverse_proxy")
}

func parseGlobalOption(d *caddyfile.Dispenser, _ any) (any, error) {
	app := new(App)
	if err := app.UnmarshalCaddyfile(d); err != nil {
		return nil, err
	}
	return httpcaddyfile.App{Name: "model_gateway", Value: caddyconfig.JSON(app, nil)}, nil
}

func parseHandlerDirective(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	m := new(Handler)
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return m, err
}

// UnmarshalCaddyfile sets up the app from the global option block:
//
//	{
//		model_gateway {
//			store sqlite [<path>] {
//				durability process|power
//			}
//			store postgres <dsn>
//			reservation_ttl <duration>
//			credit_lease_linger <duration>
//			store_timeout <duration>
//			settle_timeout <duration>
//			instance_heartbeat <duration>
//			instance_timeout <duration>
//			catalog_file <path>
//			upload_dir <path>
//			credit_top_up on|off
//			music_retention <duration>
//			max_file_size <size>
//			batches {
//				chunks <n>
//				chunk_rows <n>
//				rows_per_chunk <n>
//				batch_chunks <n>
//				provider_rows <n>
//				row_timeout <duration>
//			}
//			blob_store file [<directory>]
//			blob_store s3 {
//				endpoint <host[:port]>
//				bucket <name>
//				region <region>
//				access_key_id <id>
//				secret_access_key <secret>
//				use_tls on|off
//				path_style on|off
//			}
//			destinations {
//				email {
//					host <smtp host>
//					port <port>
//					security starttls|tls|none
//					username <username>
//					password <password>
//					from <address>
//					timeout <duration>
//				}
//				<kind> [{ <the kind's options> }]
//			}
//
//			provider <name> {
//				type openai|anthropic|gemini|elevenlabs|mistral|mock|<type of a provider module>
//				<the type's options: see its UnmarshalCaddyfile>
//				# resilience (also settable per route)
//				retries <n>
//				retry_backoff <base> [<max>]
//				retry_after_cap <duration>
//				header_timeout <duration>|off
//				first_token_timeout <duration>|off
//				circuit_breaker <failures> [<cooldown>]|off
//				prefill on|off
//			}
//
//			model <name> {
//				owned_by <organisation>
//				catalog <catalogue id>
//				endpoints <family>...
//				route <provider> [<upstream model>] {
//					input <usd per 1M tokens>
//					cached_input <usd per 1M tokens>
//					cache_write <usd per 1M tokens>
//					output <usd per 1M tokens>
//					reasoning <usd per 1M tokens>
//					input_audio_tokens <usd per 1M tokens>
//					output_audio_tokens <usd per 1M tokens>
//					image_input_tokens <usd per 1M tokens>
//					image_output_tokens <usd per 1M tokens>
//					input_characters <usd per 1M characters>
//					input_audio_seconds <usd per second>
//					output_audio_seconds <usd per second>
//					image <usd per image> [size <size>] [quality <quality>]
//					page <usd per page>
//					output_video_seconds <usd per second> [resolution <resolution>]
//					request <usd per request>
//					batch_discount_percent <0-100>
//					max_output_tokens <n>
//					context_window <n>
//					<any resilience option of the provider>
//				}
//			}
//		}
//	}
//
// Prices are exact decimals in USD. image and output_video_seconds may repeat, once per
// key: a line without size (quality, resolution) prices any size (quality, resolution) that
// no other line names, and a route with such lines refuses a request they do not price. A
// started second counts as one. batch_discount_percent is taken off every price for a
// request that the route's upstream runs in its own batch (default 50 when the provider has
// batch_api on, else 0).
//
// Placeholders such as {env.OPENAI_API_KEY} are kept as written and resolved when the
// configuration loads.
func (a *App) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the option name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "store":
			if a.Store != nil {
				return d.Err("store already specified")
			}
			a.Store = new(StoreConfig)
			if !d.NextArg() {
				return d.ArgErr()
			}
			a.Store.Driver = d.Val()
			switch a.Store.Driver {
			case "sqlite":
				if d.NextArg() {
					a.Store.Path = d.Val()
				}
			case "postgres":
				if !d.NextArg() {
					return d.Err("store postgres needs a connection string")
				}
				a.Store.DSN = d.Val()
			default:
				return d.Errf("unknown store driver %q (want sqlite or postgres)", a.Store.Driver)
			}
			if d.NextArg() {
				return d.ArgErr()
			}
			for d.NextBlock(1) {
				switch d.Val() {
				case "durability":
					if a.Store.Driver != "sqlite" {
						return d.Err("durability applies to the sqlite store")
					}
					if !d.NextArg() {
						return d.ArgErr()
					}
					a.Store.Durability = d.Val()
					if a.Store.Durability != "process" && a.Store.Durability != "power" {
						return d.Errf("durability %q: want process or power", a.Store.Durability)
					}
					if d.NextArg() {
						return d.ArgErr()
					}
				default:
					return d.Errf("unknown store option %q", d.Val())
				}
			}
		case "reservation_ttl":
			if err := parseDuration(d, &a.ReservationTTL); err != nil {
				return err
			}
		case "store_timeout", "settle_timeout", "instance_heartbeat", "instance_timeout", "music_retention":
			field := map[string]*caddy.Duration{"store_timeout": &a.StoreTimeout, "settle_timeout": &a.SettleTimeout,
				"instance_heartbeat": &a.InstanceHeartbeat, "instance_timeout": &a.InstanceTimeout, "music_retention": &a.MusicRetention}[d.Val()]
			if err := parsePositiveDuration(d, field); err != nil {
				return err
			}
		case "max_file_size":
			if err := parseByteSize(d, "512MiB", &a.MaxFileSize); err != nil {
				return err
			}
		case "batches":
			if a.Batches != nil {
				return d.Err("batches already specified")
			}
			if d.NextArg() {
				return d.ArgErr()
			}
			a.Batches = new(BatchesConfig)
			if err := parseBatches(d, a.Batches); err != nil {
				return err
			}
		case "credit_lease_linger":
			var linger caddy.Duration
			if err := parseDuration(d, &linger); err != nil {
				return err
			}
			a.CreditLeaseLinger = &linger
		case "catalog_file":
			if a.CatalogFile != "" {
				return d.Err("catalog_file already specified")
			}
			if err := parseString(d, &a.CatalogFile); err != nil {
				return err
			}
		case "upload_dir":
			if a.UploadDir != "" {
				return d.Err("upload_dir already specified")
			}
			if err := parseString(d, &a.UploadDir); err != nil {
				return err
			}
		case "secret_key":
			if a.SecretKey != "" {
				return d.Err("secret_key already specified")
			}
			if err := parseString(d, &a.SecretKey); err != nil {
				return err
			}
		case "webhook_allow":
			if a.WebhookAllow != nil {
				return d.Err("webhook_allow already specified")
			}
			a.WebhookAllow = d.RemainingArgs()
			if len(a.WebhookAllow) == 0 {
				return d.ArgErr()
			}
		case "credit_top_up":
			if a.CreditTopUp != nil {
				return d.Err("credit_top_up already specified")
			}
			var v string
			if err := parseString(d, &v); err != nil {
				return err
			}
			switch v {
			case "on", "off":
				on := v == "on"
				a.CreditTopUp = &on
			default:
				return d.Errf("credit_top_up: want on or off, got %q", v)
			}
		case "blob_store":
			if a.BlobStoreRaw != nil {
				return d.Err("blob_store already specified")
			}
			raw, err := parseBlobStore(d)
			if err != nil {
				return err
			}
			a.BlobStoreRaw = raw
		case "destinations":
			if a.DestinationsRaw != nil {
				return d.Err("destinations already specified")
			}
			raw, err := parseDestinations(d)
			if err != nil {
				return err
			}
			a.DestinationsRaw = raw
		case "provider":
			if !d.NextArg() {
				return d.ArgErr()
			}
			name := d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
			if _, dup := a.Providers[name]; dup {
				return d.Errf("provider %q already defined", name)
			}
			pc, err := parseProvider(d)
			if err != nil {
				return err
			}
			if a.Providers == nil {
				a.Providers = map[string]*ProviderConfig{}
			}
			a.Providers[name] = pc
		case "model":
			if !d.NextArg() {
				return d.ArgErr()
			}
			mc := &ModelConfig{Name: d.Val()}
			if d.NextArg() {
				return d.ArgErr()
			}
			for _, have := range a.Models {
				if have.Name == mc.Name {
					return d.Errf("model %q already defined", mc.Name)
				}
			}
			if err := parseModel(d, mc); err != nil {
				return err
			}
			a.Models = append(a.Models, mc)
		default:
			return d.Errf("unrecognized subdirective %q", d.Val())
		}
	}
	return nil
}

// parseBlobStore reads a blob_store line (d is on blob_store): its backend's module reads
// the tokens from the backend's name on, with its block.
func parseBlobStore(d *caddyfile.Dispenser) (json.RawMessage, error) {
	if !d.NextArg() {
		return nil, d.Errf("blob_store needs a backend (%s)", blobBackends())
	}
	backend := d.Val()
	if err := checkBlobBackend(backend); err != nil {
		return nil, d.Err(err.Error())
	}
	info, _ := caddy.GetModule(BlobsNamespace + "." + backend)
	return unmarshalGuest(d, info.New(), "blob store backend "+backend, "backend", backend)
}

// unmarshalGuest has guest module mod read the segment d is on (its name, its arguments
// and its block) and encodes it as JSON, with its name under key when key is not empty
// (an inline key). what names it in errors ("blob store backend s3").
func unmarshalGuest(d *caddyfile.Dispenser, mod caddy.Module, what, key, name string) (json.RawMessage, error) {
	seg := d.NextSegment()
	if unm, ok := mod.(caddyfile.Unmarshaler); ok {
		if err := unm.UnmarshalCaddyfile(caddyfile.NewDispenser(seg)); err != nil {
			return nil, err
		}
	} else if len(seg) > 1 {
		return nil, d.Errf("%s takes no options", what)
	}
	var warnings []caddyconfig.Warning
	var raw json.RawMessage
	if key != "" {
		raw = caddyconfig.JSONModuleObject(mod, key, name, &warnings)
	} else {
		raw = caddyconfig.JSON(mod, &warnings)
	}
	if len(warnings) > 0 {
		return nil, d.Errf("%s: encoding its options: %s", what, warnings[0].Message)
	}
	return raw, nil
}

// parseDestinations reads the destinations block (d is on destinations): a line per kind,
// whose module reads the tokens from the kind's name on, with its block. A kind named
// with no options is on with its defaults, as it is when not named.
func parseDestinations(d *caddyfile.Dispenser) (caddy.ModuleMap, error) {
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	out := caddy.ModuleMap{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		kind := d.Val()
		if _, dup := out[kind]; dup {
			return nil, d.Errf("destination kind %s already specified", kind)
		}
		if err := checkDestinationKind(kind); err != nil {
			return nil, d.Err(err.Error())
		}
		info, _ := caddy.GetModule(DestinationsNamespace + "." + kind)
		raw, err := unmarshalGuest(d, info.New(), "destination kind "+kind, "", "")
		if err != nil {
			return nil, err
		}
		out[kind] = raw
	}
	return out, nil
}

// UnmarshalCaddyfile reads the email destination kind's block:
//
//	email {
//		host <smtp host>
//		port <port>
//		security starttls|tls|none
//		username <username>
//		password <password>
//		from <address>
//		timeout <duration>
//	}
//
// host and from are required. Credentials are best given as {env.NAME}; a from with a
// name is quoted: from "Model Gateway <noreply@example.com>".
func (e *EmailDestination) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	err := parseOptionBlock(d, func(opt string) error {
		switch opt {
		case "host", "username", "password", "from":
			field := map[string]*string{"host": &e.Host, "username": &e.Username, "password": &e.Password, "from": &e.From}[opt]
			if err := parseString(d, field); err != nil {
				return err
			}
		case "security":
			if err := parseString(d, &e.Security); err != nil {
				return err
			}
			switch e.Security {
			case notify.SecuritySTARTTLS, notify.SecurityTLS, notify.SecurityNone:
			default:
				return d.Errf("security: want starttls, tls or none, got %q", e.Security)
			}
		case "port":
			var port int64
			if err := parseInt(d, &port); err != nil {
				return err
			}
			if port < 1 || port > 65535 {
				return d.Errf("port %d is not a TCP port", port)
			}
			e.Port = int(port)
		case "timeout":
			if err := parsePositiveDuration(d, &e.Timeout); err != nil {
				return err
			}
		default:
			return d.Errf("unrecognized subdirective %q", opt)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if e.Host == "" || e.From == "" {
		return d.Err("destinations email needs a host and a from address")
	}
	return nil
}

// UnmarshalCaddyfile reads the file blob store's line:
//
//	blob_store file [<directory>]
func (f *FileBlobStore) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the backend's name
	if d.NextArg() {
		f.Root = d.Val()
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	if d.NextBlock(0) {
		return d.Errf("unrecognized subdirective %q: blob_store file takes only a directory", d.Val())
	}
	return nil
}

// UnmarshalCaddyfile reads the s3 blob store's block:
//
//	blob_store s3 {
//		endpoint <host[:port]>
//		bucket <name>
//		region <region>
//		access_key_id <id>
//		secret_access_key <secret>
//		use_tls on|off
//		path_style on|off
//	}
//
// endpoint and bucket are required. Credentials are best given as {env.NAME}.
func (s *S3BlobStore) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	err := parseOptionBlock(d, func(opt string) error {
		switch opt {
		case "endpoint", "bucket", "region", "access_key_id", "secret_access_key":
			field := map[string]*string{"endpoint": &s.Endpoint, "bucket": &s.Bucket, "region": &s.Region,
				"access_key_id": &s.AccessKeyID, "secret_access_key": &s.SecretAccessKey}[opt]
			if err := parseString(d, field); err != nil {
				return err
			}
		case "use_tls":
			on, err := parseOnOff(d)
			if err != nil {
				return err
			}
			s.UseTLS = &on
		case "path_style":
			on, err := parseOnOff(d)
			if err != nil {
				return err
			}
			s.PathStyle = on
		default:
			return d.Errf("unrecognized subdirective %q", opt)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if s.Endpoint == "" || s.Bucket == "" {
		return d.Err("blob_store s3 needs an endpoint and a bucket")
	}
	return nil
}

// parseOptionBlock reads the block of a guest module (d is on its name, which takes no
// argument): each option, once at most, is given to parse, d on it.
func parseOptionBlock(d *caddyfile.Dispenser, parse func(opt string) error) error {
	d.Next() // the module's name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := map[string]bool{}
	for d.NextBlock(0) {
		opt := d.Val()
		if seen[opt] {
			return d.Errf("%s already specified", opt)
		}
		seen[opt] = true
		if err := parse(opt); err != nil {
			return err
		}
	}
	return nil
}

// parseOnOff reads an option whose value is on or off.
func parseOnOff(d *caddyfile.Dispenser) (bool, error) {
	opt := d.Val()
	var v string
	if err := parseString(d, &v); err != nil {
		return false, err
	}
	switch v {
	case "on":
		return true, nil
	case "off":
		return false, nil
	}
	return false, d.Errf("%s: want on or off, got %q", opt, v)
}

// parseProvider reads a provider block (d is on the provider's name). The gateway keeps
// type and the resilience options; the type's module reads the other lines, given as the
// block of "<type> { ... }", as reverse_proxy gives "transport <name> { ... }" to its
// transport.
func parseProvider(d *caddyfile.Dispenser) (*ProviderConfig, error) {
	seg := d.NextSegment() // the name, then the block with its braces
	pd := caddyfile.NewDispenser(seg)
	pd.Next()
	pc := new(ProviderConfig)
	var (
		typ  string
		rest caddyfile.Segment
		seen = map[string]bool{}
	)
	for pd.NextBlock(0) {
		switch sub := pd.Val(); sub {
		case "type":
			if typ != "" {
				return nil, pd.Err("type already specified")
			}
			if err := parseString(pd, &typ); err != nil {
				return nil, err
			}
			if err := checkProviderType(typ); err != nil {
				return nil, pd.Err(err.Error())
			}
		case "retries", "retry_backoff", "retry_after_cap", "header_timeout", "first_token_timeout", "circuit_breaker", "prefill":
			if seen[sub] {
				return nil, pd.Errf("%s already specified", sub)
			}
			seen[sub] = true
			if err := parseResilience(pd, &pc.Resilience); err != nil {
				return nil, err
			}
		default:
			rest = append(rest, pd.NextSegment()...)
		}
	}
	if typ == "" {
		return nil, d.Errf("provider: type is required (%s)", providerTypes("or"))
	}
	info, _ := caddy.GetModule(ProvidersNamespace + "." + typ)
	mod := info.New()
	if unm, ok := mod.(caddyfile.Unmarshaler); ok {
		// The type's name stands where the provider's name was, before the block's brace.
		head := seg[0]
		head.Text = typ
		tokens := append(caddyfile.Segment{head, seg[1]}, rest...)
		if err := unm.UnmarshalCaddyfile(caddyfile.NewDispenser(append(tokens, seg[len(seg)-1]))); err != nil {
			return nil, err
		}
	} else if len(rest) > 0 {
		rd := caddyfile.NewDispenser(rest)
		rd.Next()
		return nil, rd.Errf("provider type %s takes no options", typ)
	}
	var warnings []caddyconfig.Warning
	if pc.AdapterRaw = caddyconfig.JSONModuleObject(mod, "type", typ, &warnings); len(warnings) > 0 {
		return nil, d.Errf("provider type %s: encoding its options: %s", typ, warnings[0].Message)
	}
	return pc, nil
}

// UnmarshalCaddyfile reads the openai provider type's options, the lines of a provider
// block other than type and the resilience options:
//
//	provider <name> {
//		type openai
//		base_url <url>
//		api_key <key>
//		organization <id>
//		project <id>
//		api chat|responses
//		batch_api on|off
//		header <field> <value>
//		timeout <duration>
//		stream_idle_timeout <duration>
//		transport http {
//			<reverse_proxy transport options>
//		}
//	}
func (p *OpenAIProvider) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return parseProviderOptions(d, p.httpUpstream.unmarshalOption, func(d *caddyfile.Dispenser) (bool, error) {
		switch d.Val() {
		case "organization":
			return true, parseString(d, &p.Organization)
		case "project":
			return true, parseString(d, &p.Project)
		case "batch_api":
			return true, parseOptionalOnOff(d, &p.BatchAPI)
		case "api":
			if err := parseString(d, &p.API); err != nil {
				return true, err
			}
			if p.API != "chat" && p.API != "responses" {
				return true, d.Errf("api: want chat or responses, got %q", p.API)
			}
			return true, nil
		}
		return false, nil
	})
}

// UnmarshalCaddyfile reads the anthropic provider type's options, the lines of a provider
// block other than type and the resilience options:
//
//	provider <name> {
//		type anthropic
//		version <anthropic-version>
//		default_max_tokens <n>
//		batch_api on|off
//		<base_url, api_key, header, timeout, stream_idle_timeout, transport as for openai>
//	}
func (p *AnthropicProvider) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return parseProviderOptions(d, p.httpUpstream.unmarshalOption, func(d *caddyfile.Dispenser) (bool, error) {
		switch d.Val() {
		case "version":
			return true, parseString(d, &p.Version)
		case "default_max_tokens":
			return true, parseInt(d, &p.DefaultMaxTokens)
		case "batch_api":
			return true, parseOptionalOnOff(d, &p.BatchAPI)
		}
		return false, nil
	})
}

// UnmarshalCaddyfile reads the gemini provider type's options, the lines of a provider
// block other than type and the resilience options:
//
//	provider <name> {
//		type gemini
//		<base_url, api_key, header, timeout, stream_idle_timeout, transport as for openai>
//	}
func (p *GeminiProvider) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return parseProviderOptions(d, p.httpUpstream.unmarshalOption)
}

// UnmarshalCaddyfile reads the elevenlabs provider type's options, the lines of a provider
// block other than type and the resilience options:
//
//	provider <name> {
//		type elevenlabs
//		<base_url, api_key, header, timeout, stream_idle_timeout, transport as for openai>
//	}
//
// base_url is the API root without its version (default https://api.elevenlabs.io).
func (p *ElevenLabsProvider) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return parseProviderOptions(d, p.httpUpstream.unmarshalOption)
}

// UnmarshalCaddyfile reads the mistral provider type's options, the lines of a provider
// block other than type and the resilience options:
//
//	provider <name> {
//		type mistral
//		<base_url, api_key, header, timeout, stream_idle_timeout, transport as for openai>
//	}
//
// base_url defaults to https://api.mistral.ai/v1.
func (p *MistralProvider) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return parseProviderOptions(d, p.httpUpstream.unmarshalOption)
}

// UnmarshalCaddyfile reads the mock provider type's options, the lines of a provider block
// other than type and the resilience options:
//
//	provider <name> {
//		type mock
//		latency <duration>
//		chunks <n>
//		chunk_interval <duration>
//		text <reply>
//		video_render <duration>
//		video_bytes_per_second <size>
//	}
func (p *MockProvider) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return parseProviderOptions(d, func(d *caddyfile.Dispenser) (bool, error) {
		switch d.Val() {
		case "video_render":
			return true, parsePositiveDuration(d, &p.VideoRender)
		case "video_bytes_per_second":
			return true, parseByteSize(d, "16MiB", &p.VideoBytesPerSecond)
		case "latency":
			return true, parseDuration(d, &p.Latency)
		case "chunk_interval":
			return true, parseDuration(d, &p.ChunkInterval)
		case "text":
			return true, parseString(d, &p.Text)
		case "chunks":
			var n int64
			err := parseInt(d, &n)
			p.Chunks = int(n)
			return true, err
		}
		return false, nil
	})
}

// parseProviderOptions walks the block after a provider type's name: each option but
// header at most once, read by the first of parse that knows it.
func parseProviderOptions(d *caddyfile.Dispenser, parse ...func(*caddyfile.Dispenser) (bool, error)) error {
	d.Next() // the type's name
	seen := map[string]bool{}
	for d.NextBlock(0) {
		sub := d.Val()
		if sub != "header" && seen[sub] {
			return d.Errf("%s already specified", sub)
		}
		seen[sub] = true
		known := false
		for _, f := range parse {
			ok, err := f(d)
			if err != nil {
				return err
			}
			if known = ok; known {
				break
			}
		}
		if !known {
			return d.Errf("unrecognized subdirective %q", sub)
		}
	}
	return nil
}

// unmarshalOption reads the option of an HTTP provider type that d is on, if it is one.
func (u *httpUpstream) unmarshalOption(d *caddyfile.Dispenser) (bool, error) {
	switch d.Val() {
	case "base_url":
		return true, parseString(d, &u.BaseURL)
	case "api_key":
		return true, parseString(d, &u.APIKey)
	case "timeout":
		return true, parseDuration(d, &u.Timeout)
	case "stream_idle_timeout":
		return true, parseDuration(d, &u.StreamIdleTimeout)
	case "header":
		args := d.RemainingArgs()
		if len(args) != 2 {
			return true, d.ArgErr()
		}
		if u.Headers == nil {
			u.Headers = map[string]string{}
		}
		u.Headers[args[0]] = args[1]
		return true, nil
	case "transport":
		if !d.NextArg() {
			return true, d.ArgErr()
		}
		name := d.Val()
		mod, err := caddyfile.UnmarshalModule(d, "http.reverse_proxy.transport."+name)
		if err != nil {
			return true, d.Errf("transport %s: %v", name, err)
		}
		u.TransportRaw = caddyconfig.JSONModuleObject(mod, "protocol", name, nil)
		return true, nil
	}
	return false, nil
}

func parseModel(d *caddyfile.Dispenser, mc *ModelConfig) error {
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "owned_by":
			if mc.OwnedBy != "" {
				return d.Err("owned_by already specified")
			}
			if err := parseString(d, &mc.OwnedBy); err != nil {
				return err
			}
		case "catalog":
			if mc.CatalogID != "" {
				return d.Err("catalog already specified")
			}
			if err := parseString(d, &mc.CatalogID); err != nil {
				return err
			}
		case "endpoints":
			if mc.Endpoints != nil {
				return d.Err("endpoints already specified")
			}
			mc.Endpoints = d.RemainingArgs()
			if len(mc.Endpoints) == 0 {
				return d.ArgErr()
			}
		case "route":
			args := d.RemainingArgs()
			if len(args) < 1 || len(args) > 2 {
				return d.ArgErr()
			}
			rc := &RouteConfig{Provider: args[0]}
			if len(args) == 2 {
				rc.Model = args[1]
			}
			if err := parseRoute(d, rc); err != nil {
				return err
			}
			mc.Routes = append(mc.Routes, rc)
		default:
			return d.Errf("unrecognized subdirective %q", d.Val())
		}
	}
	if len(mc.Routes) == 0 {
		return d.Errf("model %q needs at least one route", mc.Name)
	}
	return nil
}

func parseRoute(d *caddyfile.Dispenser, rc *RouteConfig) error {
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		// Keyed prices repeat, once a key.
		if seen[sub] && sub != "image" && sub != "output_video_seconds" {
			return d.Errf("%s already specified", sub)
		}
		seen[sub] = true
		switch sub {
		case "max_output_tokens":
			if err := parseInt(d, &rc.MaxOutputTokens); err != nil {
				return err
			}
			continue
		case "context_window":
			if err := parseInt(d, &rc.ContextWindow); err != nil {
				return err
			}
			continue
		case "max_upload":
			if err := parseByteSize(d, "25MiB", &rc.MaxUpload); err != nil {
				return err
			}
			continue
		case "retries", "retry_backoff", "retry_after_cap", "header_timeout", "first_token_timeout", "circuit_breaker", "prefill":
			if err := parseResilience(d, &rc.Resilience); err != nil {
				return err
			}
			continue
		case "batch_discount_percent":
			var s string
			if err := parseString(d, &s); err != nil {
				return err
			}
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 0 || n > 100 {
				return d.Errf("batch_discount_percent: want a whole number from 0 to 100, got %q", s)
			}
			if rc.Pricing == nil {
				rc.Pricing = new(PriceConfig)
			}
			rc.Pricing.BatchDiscountPercent = &n
			continue
		}
		if rc.Pricing == nil {
			rc.Pricing = new(PriceConfig)
		}
		pc := rc.Pricing
		var target *string
		switch sub {
		case "input":
			target = &pc.Input
		case "cached_input":
			target = &pc.CachedInput
		case "cache_write":
			target = &pc.CacheWrite
		case "output":
			target = &pc.Output
		case "reasoning":
			target = &pc.Reasoning
		case "input_audio_tokens":
			target = &pc.InputAudioTokens
		case "output_audio_tokens":
			target = &pc.OutputAudioTokens
		case "image_input_tokens":
			target = &pc.ImageInputTokens
		case "image_output_tokens":
			target = &pc.ImageOutputTokens
		case "input_characters":
			target = &pc.InputCharacters
		case "input_audio_seconds":
			target = &pc.InputAudioSeconds
		case "output_audio_seconds":
			target = &pc.OutputAudioSeconds
		case "page":
			target = &pc.Page
		case "request":
			target = &pc.Request
		case "image":
			var ic ImagePriceConfig
			if err := parseKeyedPrice(d, sub, &ic.Price, map[string]*string{"size": &ic.Size, "quality": &ic.Quality}); err != nil {
				return err
			}
			for _, prev := range pc.Image {
				if strings.EqualFold(prev.Size, ic.Size) && strings.EqualFold(prev.Quality, ic.Quality) {
					return d.Errf("image price for size %q and quality %q already specified", ic.Size, ic.Quality)
				}
			}
			pc.Image = append(pc.Image, ic)
			continue
		case "output_video_seconds":
			var vc VideoPriceConfig
			if err := parseKeyedPrice(d, sub, &vc.Price, map[string]*string{"resolution": &vc.Resolution}); err != nil {
				return err
			}
			for _, prev := range pc.OutputVideoSeconds {
				if strings.EqualFold(prev.Resolution, vc.Resolution) {
					return d.Errf("output_video_seconds price for resolution %q already specified", vc.Resolution)
				}
			}
			pc.OutputVideoSeconds = append(pc.OutputVideoSeconds, vc)
			continue
		default:
			return d.Errf("unrecognized subdirective %q", sub)
		}
		if err := parseString(d, target); err != nil {
			return err
		}
	}
	return nil
}

// parseKeyedPrice reads the arguments of a keyed price, "<usd> [<key> <value>]...": the
// price, then each of keys at most once, in any order.
func parseKeyedPrice(d *caddyfile.Dispenser, dim string, price *string, keys map[string]*string) error {
	if !d.NextArg() {
		return d.ArgErr()
	}
	*price = d.Val()
	for d.NextArg() {
		name := d.Val()
		out, ok := keys[name]
		if !ok {
			return d.Errf("%s: unknown key %q", dim, name)
		}
		if *out != "" {
			return d.Errf("%s: %s already specified", dim, name)
		}
		if !d.NextArg() || d.Val() == "" {
			return d.Errf("%s: %s needs a value", dim, name)
		}
		*out = d.Val()
	}
	return nil
}

// UnmarshalCaddyfile sets up the handler from the directive:
//
//	model_gateway {
//		base_path <path>
//		max_body_size <size>
//		stream_idle_timeout <duration>
//		body_timeout <duration>|off
//		body_min_rate <size>|off
//	}
//
// body_min_rate is a size a second, such as 16KiB.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := map[string]bool{}
	for d.NextBlock(0) {
		sub := d.Val()
		if seen[sub] {
			return d.Errf("%s already specified", sub)
		}
		seen[sub] = true
		switch sub {
		case "base_path":
			if err := parseString(d, &h.BasePath); err != nil {
				return err
			}
		case "max_body_size":
			var s string
			if err := parseString(d, &s); err != nil {
				return err
			}
			n, err := humanize.ParseBytes(s)
			if err != nil || n == 0 || n > 1<<40 {
				return d.Errf("max_body_size %q: want a size such as 10MB", s)
			}
			h.MaxBodySize = int64(n)
		case "stream_idle_timeout":
			if err := parseDuration(d, &h.StreamIdleTimeout); err != nil {
				return err
			}
		case "body_timeout":
			n, err := parseOffOr(d, "a duration such as 30s", func(s string) (int64, error) {
				dur, err := caddy.ParseDuration(s)
				return int64(dur), err
			})
			if err != nil {
				return err
			}
			h.BodyTimeout = caddy.Duration(n)
		case "body_min_rate":
			n, err := parseOffOr(d, "a size a second such as 16KiB", func(s string) (int64, error) {
				n, err := humanize.ParseBytes(s)
				if n > 1<<40 {
					return 0, strconv.ErrRange
				}
				return int64(n), err
			})
			if err != nil {
				return err
			}
			h.BodyMinRate = n
		default:
			return d.Errf("unrecognized subdirective %q", sub)
		}
	}
	return nil
}

// parseOffOr reads an option that is off (-1) or a positive value read by parse; want
// describes the value in the error.
func parseOffOr(d *caddyfile.Dispenser, want string, parse func(string) (int64, error)) (int64, error) {
	sub := d.Val()
	var s string
	if err := parseString(d, &s); err != nil {
		return 0, err
	}
	if s == "off" {
		return -1, nil
	}
	n, err := parse(s)
	if err != nil || n <= 0 {
		return 0, d.Errf("%s %q: want %s, or off", sub, s, want)
	}
	return n, nil
}

func parseString(d *caddyfile.Dispenser, out *string) error {
	if !d.NextArg() {
		return d.ArgErr()
	}
	*out = d.Val()
	if d.NextArg() {
		return d.ArgErr()
	}
	return nil
}

// parseByteSize parses an option's size (25MiB, 1000000), from a byte to a TiB; example
// is a size the option's error shows.
func parseByteSize(d *caddyfile.Dispenser, example string, out *int64) error {
	opt := d.Val()
	var s string
	if err := parseString(d, &s); err != nil {
		return err
	}
	n, err := humanize.ParseBytes(s)
	if err != nil || n == 0 || n > 1<<40 {
		return d.Errf("%s %q: want a size such as %s", opt, s, example)
	}
	*out = int64(n)
	return nil
}

func parseDuration(d *caddyfile.Dispenser, out *caddy.Duration) error {
	var s string
	if err := parseString(d, &s); err != nil {
		return err
	}
	dur, err := caddy.ParseDuration(s)
	if err != nil || dur < 0 {
		return d.Errf("invalid duration %q", s)
	}
	*out = caddy.Duration(dur)
	return nil
}

// parsePositiveDuration parses an option that may appear once and whose zero would mean
// its default.
func parsePositiveDuration(d *caddyfile.Dispenser, out *caddy.Duration) error {
	name := d.Val()
	if *out != 0 {
		return d.Errf("%s already specified", name)
	}
	if err := parseDuration(d, out); err != nil {
		return err
	}
	if *out == 0 {
		return d.Errf("%s must be longer than 0", name)
	}
	return nil
}

// parseOptionalOnOff reads an option whose value is on or off into a setting that is
// unset until then: a second line of it is an error.
func parseOptionalOnOff(d *caddyfile.Dispenser, out **bool) error {
	if *out != nil {
		return d.Errf("%s already specified", d.Val())
	}
	on, err := parseOnOff(d)
	if err != nil {
		return err
	}
	*out = &on
	return nil
}

// parseBatches reads the batches block.
func parseBatches(d *caddyfile.Dispenser, b *BatchesConfig) error {
	seen := map[string]bool{}
	for d.NextBlock(1) {
		opt := d.Val()
		if seen[opt] {
			return d.Errf("%s already specified", opt)
		}
		seen[opt] = true
		if opt == "row_timeout" {
			if err := parsePositiveDuration(d, &b.RowTimeout); err != nil {
				return err
			}
			continue
		}
		field, ok := map[string]*int{"chunks": &b.Chunks, "chunk_rows": &b.ChunkRows, "rows_per_chunk": &b.RowsPerChunk, "batch_chunks": &b.BatchChunks, "provider_rows": &b.ProviderRows}[opt]
		if !ok {
			return d.Errf("unrecognized subdirective %q", opt)
		}
		var n int64
		if err := parseInt(d, &n); err != nil {
			return err
		}
		if n > 1024 {
			return d.Errf("%s: at most 1024, got %d", opt, n)
		}
		*field = int(n)
	}
	return nil
}

func parseInt(d *caddyfile.Dispenser, out *int64) error {
	var s string
	if err := parseString(d, &s); err != nil {
		return err
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return d.Errf("%s: want a positive whole number, got %q", d.Val(), s)
	}
	*out = n
	return nil
}

// Interface guards.
var (
	_ caddyfile.Unmarshaler = (*App)(nil)
	_ caddyfile.Unmarshaler = (*Handler)(nil)
	_ caddyfile.Unmarshaler = (*OpenAIProvider)(nil)
	_ caddyfile.Unmarshaler = (*AnthropicProvider)(nil)
	_ caddyfile.Unmarshaler = (*GeminiProvider)(nil)
	_ caddyfile.Unmarshaler = (*MistralProvider)(nil)
	_ caddyfile.Unmarshaler = (*ElevenLabsProvider)(nil)
	_ caddyfile.Unmarshaler = (*MockProvider)(nil)
	_ caddyfile.Unmarshaler = (*FileBlobStore)(nil)
	_ caddyfile.Unmarshaler = (*S3BlobStore)(nil)
	_ caddyfile.Unmarshaler = (*EmailDestination)(nil)
)

// parseResilience reads one resilience option (the current token names it).
func parseResilience(d *caddyfile.Dispenser, r *Resilience) error {
	opt := d.Val()
	args := d.RemainingArgs()
	one := func() error {
		if len(args) != 1 {
			return d.ArgErr()
		}
		return nil
	}
	dur := func(s string, out *caddy.Duration, offOK bool) error {
		if offOK && s == "off" {
			*out = -1
			return nil
		}
		v, err := caddy.ParseDuration(s)
		if err != nil || v <= 0 {
			return d.Errf("%s: invalid duration %q", opt, s)
		}
		*out = caddy.Duration(v)
		return nil
	}
	switch opt {
	case "retries":
		if err := one(); err != nil {
			return err
		}
		n, err := strconv.Atoi(args[0])
		if err != nil || n < 0 || n > 10 {
			return d.Errf("retries: want 0 to 10, got %q", args[0])
		}
		r.Retries = &n
	case "retry_backoff":
		if len(args) < 1 || len(args) > 2 {
			return d.ArgErr()
		}
		if err := dur(args[0], &r.RetryBackoff, false); err != nil {
			return err
		}
		if len(args) == 2 {
			return dur(args[1], &r.RetryBackoffMax, false)
		}
	case "retry_after_cap":
		if err := one(); err != nil {
			return err
		}
		return dur(args[0], &r.RetryAfterCap, false)
	case "header_timeout":
		if err := one(); err != nil {
			return err
		}
		return dur(args[0], &r.HeaderTimeout, true)
	case "first_token_timeout":
		if err := one(); err != nil {
			return err
		}
		return dur(args[0], &r.FirstTokenTimeout, true)
	case "circuit_breaker":
		if len(args) < 1 || len(args) > 2 {
			return d.ArgErr()
		}
		if args[0] == "off" {
			if len(args) != 1 {
				return d.ArgErr()
			}
			zero := 0
			r.CircuitBreakerThreshold = &zero
			return nil
		}
		n, err := strconv.Atoi(args[0])
		if err != nil || n < 1 {
			return d.Errf("circuit_breaker: want a number of failures or off, got %q", args[0])
		}
		r.CircuitBreakerThreshold = &n
		if len(args) == 2 {
			return dur(args[1], &r.CircuitBreakerCooldown, false)
		}
	case "prefill":
		if err := one(); err != nil {
			return err
		}
		if args[0] != "on" && args[0] != "off" {
			return d.Errf("prefill: want on or off, got %q", args[0])
		}
		on := args[0] == "on"
		r.Prefill = &on
	}
	return nil
}
