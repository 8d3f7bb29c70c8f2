package module

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/billing"
	"github.com/modelgateway/caddy-modelgateway/blobs"
	"github.com/modelgateway/caddy-modelgateway/delivery"
	"github.com/modelgateway/caddy-modelgateway/handlers"
	"github.com/modelgateway/caddy-modelgateway/internal/catalog"
	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/internal/workers"
	"github.com/modelgateway/caddy-modelgateway/notify"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/postgres"
	"github.com/modelgateway/caddy-modelgateway/store/sqlite"
)

func init() {
	caddy.RegisterModule(new(App))
}

// App is the model_gateway app: the store, the providers and the public models, shared by
// every model_gateway handler of the configuration.
type App struct {
	// Store selects the database. Default: SQLite in Caddy's data directory
	// (model_gateway/gateway.db).
	Store *StoreConfig `json:"store,omitempty"`
	// Providers are the upstream APIs, by the name routes refer to them with.
	Providers map[string]*ProviderConfig `json:"providers,omitempty"`
	// Models are the public model names clients ask for, each with its routes.
	Models []*ModelConfig `json:"models,omitempty"`
	// ReservationTTL is how long credit held for a request survives if the request never
	// settles and nothing else frees it: a process that died loses its holds to the others
	// within instance_timeout, this is the last resort. Default: 2h.
	ReservationTTL caddy.Duration `json:"reservation_ttl,omitempty"`
	// CreditLeaseLinger keeps a key's credit lease (credit held for several of its
	// requests, taken when its wallet holds at least 10 USD) open this long after the
	// key's last request, so that a key sending requests one at a time is admitted
	// without a database write each time. Meanwhile GET /credits counts the lease's unused
	// rest (at most 10 USD) as reserved. "0" drops a lease with its last request in
	// flight. Default: 2s.
	CreditLeaseLinger *caddy.Duration `json:"credit_lease_linger,omitempty"`
	// CatalogFile is a model catalogue file in the format of internal/catalog/models.json
	// ({"schema": 1, "version": ..., "organisations": [...], "models": [...]}) that extends
	// the embedded catalogue of the discovery routes: an entry with a known id replaces
	// the fields it sets, any other entry is added. Placeholders are resolved. Default: none.
	CatalogFile string `json:"catalog_file,omitempty"`
	// SecretKey encrypts webhook signing secrets at rest (AES-256-GCM): 32 random bytes in
	// base64 (openssl rand -base64 32). Placeholders are resolved, so that
	// {env.GATEWAY_SECRET_KEY} keeps it out of the file. Default: none, and the webhook
	// endpoint routes answer 503 until one is set.
	SecretKey string `json:"secret_key,omitempty"`
	// WebhookAllow lists networks (CIDR prefixes, or single addresses) that webhook
	// receivers may be on although they are private, loopback or link-local: an operator's
	// own receivers on an internal network. Everything else that is not public is refused,
	// by literal and by the address actually dialled. Default: none.
	WebhookAllow []string `json:"webhook_allow,omitempty"`
	// UploadDir is the directory where uploads (transcribed audio, images to edit) are
	// spooled while their request lasts, unlinked as soon as made; it must hold the uploads
	// in flight at once. Placeholders are resolved. Default: the system's temporary
	// directory ($TMPDIR).
	UploadDir string `json:"upload_dir,omitempty"`
	// CreditTopUp allows POST /credits, with which a management key adds credit to its own
	// workspace's wallet. Turn it off where wallets hold money paid to the operator, so
	// that only the operator adds credit. Default: on.
	CreditTopUp *bool `json:"credit_top_up,omitempty"`
	// StoreTimeout bounds each store call a request waits for before its upstream call:
	// the key's lookup, the credit reservation and the balance read it may need. Past it
	// the request is answered 503 store_unavailable, fast, and nothing is sent upstream.
	// The reads of the administration and discovery routes (GET /credits, /keys,
	// /activity...) are bounded by it too. GET /health answers 503 when the store does not
	// answer within it (at most 1s). Default: 2s.
	StoreTimeout caddy.Duration `json:"store_timeout,omitempty"`
	// SettleTimeout bounds the settlement of an answered request (its charge and record),
	// tried again meanwhile while the store cannot be reached; past it the answer is
	// withheld (500, or an error at the end of a stream) and nothing is charged. Default:
	// 30s.
	SettleTimeout caddy.Duration `json:"settle_timeout,omitempty"`
	// InstanceHeartbeat is how often this process records in the store that it is alive,
	// and releases what dead instances hold. Default: 10s.
	InstanceHeartbeat caddy.Duration `json:"instance_heartbeat,omitempty"`
	// InstanceTimeout is how long a gateway process may go without recording its heartbeat
	// before any other one (or itself restarted) releases its credit leases and
	// reservations; at least twice instance_heartbeat. A process that cannot record its
	// own heartbeat stops admitting requests from its leases one heartbeat before this.
	// On SQLite, a process that is gone is known at once (the restarted gateway frees its
	// previous run's holds as it starts). Default: 45s.
	InstanceTimeout caddy.Duration `json:"instance_timeout,omitempty"`
	// BlobStoreRaw is where large results are kept (music audio, uploaded files, batch
	// output files): the module model_gateway.blobs.<backend>, {"backend": "file", "root":
	// ...} or {"backend": "s3", "endpoint": ..., "bucket": ...}. Default: the file backend
	// in Caddy's data directory (model_gateway/blobs).
	BlobStoreRaw json.RawMessage `json:"blob_store,omitempty" caddy:"namespace=model_gateway.blobs inline_key=backend"`
	// MusicRetention is how long the audio of a completed music job is kept in the blob
	// store; it is removed then, and the job shows lifecycle_status expired. Default: 7 days.
	MusicRetention caddy.Duration `json:"music_retention,omitempty"`
	// DestinationsRaw configures the kinds of the workspaces' notification destinations,
	// the modules model_gateway.destinations.<kind>, by kind: {"email": {"host": ...,
	// "from": ...}}. Every kind of the build is on, with its defaults when it has no entry:
	// slack, discord, teams and webhook need none; email is off (refusing email
	// destinations) until its host is set. Default: none.
	DestinationsRaw caddy.ModuleMap `json:"destinations,omitempty" caddy:"namespace=model_gateway.destinations"`
	// MaxFileSize is the largest file POST /files takes, in bytes; a larger one is refused
	// with 413 and nothing is kept. Default: 512 MiB (OpenAI's limit).
	MaxFileSize int64 `json:"max_file_size,omitempty"`
	// Batches bounds how gateway-run batches share the gateway with interactive traffic
	// (docs/batches.md). Default: each field's default.
	Batches *BatchesConfig `json:"batches,omitempty"`

	catalog *catalog.Catalog
	sealer  *delivery.Sealer
	// outbound calls webhook receivers, admitting the networks of WebhookAllow.
	outbound *delivery.Client
	// notifications queues this configuration's notifications (provisionNotifications).
	notifications *notify.Outbox
	// emit publishes a Caddy event of this configuration's events app (provisionEvents).
	emit       func(name string, data map[string]any)
	uploadDir  string
	catalogIDs map[string]string
	store      store.Store
	pooled     *pooledStore
	storeKey   string
	registry   *handlers.Registry
	providers  map[string]providers.Provider
	logger     *zap.Logger
	metrics    *handlers.Metrics
	blobs      blobs.Store
	// destinations are the notification destination kinds, by name (provisionDestinations).
	destinations map[string]notify.Kind
	// withdrawBreakers takes this configuration's circuit breakers off the process's
	// breaker_open gauge.
	withdrawBreakers func()

	// storeDriver and storeLocation name the store in the log, without a DSN's password.
	storeDriver, storeLocation string
	// runtimeStopped tells the workers that this configuration stopped; nil until it
	// started.
	runtimeStopped func()
	// batchRowRunner runs the rows of gateway-run batches (batchDispatcher); made by Provision.
	batchRowRunner *batchRowRunner
}

// BatchesConfig bounds the work of gateway-run batches.
type BatchesConfig struct {
	// Chunks is how many chunks of rows this process runs at once, of any batches.
	// Default: 4.
	Chunks int `json:"chunks,omitempty"`
	// ChunkRows is how many rows a chunk (one claim of a worker) holds; a batch keeps the
	// size it was created with. Default: 256.
	ChunkRows int `json:"chunk_rows,omitempty"`
	// RowsPerChunk is how many rows of one chunk run at once. Default: 8.
	RowsPerChunk int `json:"rows_per_chunk,omitempty"`
	// BatchChunks is how many chunks of one batch run at once across every instance, so
	// that one batch never takes every worker. Default: 2.
	BatchChunks int `json:"batch_chunks,omitempty"`
	// ProviderRows is how many batch rows this process sends one provider at once, so
	// that batches never take every connection its interactive requests need. Default: 16.
	ProviderRows int `json:"provider_rows,omitempty"`
	// RowTimeout bounds one row. Default: 10m.
	RowTimeout caddy.Duration `json:"row_timeout,omitempty"`
}

// StoreConfig selects the database.
type StoreConfig struct {
	// Driver is "sqlite" (the default) or "postgres".
	Driver string `json:"driver,omitempty"`
	// Path is the SQLite file. Default: model_gateway/gateway.db under Caddy's data directory.
	Path string `json:"path,omitempty"`
	// DSN is the PostgreSQL connection string, e.g. "{env.DATABASE_URL}".
	DSN string `json:"dsn,omitempty"`
	// Durability (SQLite) is what an answered request's charge survives: "process" (the
	// default) survives the gateway being killed or crashing: settlements are journaled
	// with one write and committed in the background, and SQLite runs at
	// synchronous=NORMAL; "power" also survives a power cut: every answer waits for an
	// fsync'd commit (synchronous=FULL), which costs a disk flush of latency per request.
	// PostgreSQL's own settings (synchronous_commit) decide there.
	Durability string `json:"durability,omitempty"`
}

// ModelConfig is a public model name.
type ModelConfig struct {
	// Name is what clients send as "model". A ":free" suffix makes it free of charge.
	Name string `json:"name"`
	// OwnedBy is shown in GET /models. Default: the first route's provider.
	OwnedBy string `json:"owned_by,omitempty"`
	// CatalogID names the model's entry in the model catalogue ("openai/gpt-4o"), for a
	// model whose name and upstream model id are neither an id nor an alias there.
	// Default: matched by name, then by the first route's upstream model id.
	CatalogID string `json:"catalog_id,omitempty"`
	// Endpoints are the endpoint families the model serves (chat, embeddings, moderations,
	// audio, images, ocr): requests for another family are refused, and discovery lists
	// these. Default: its catalogue entry's, else guessed from its prices (input tokens
	// alone: embeddings; requests alone: moderations; characters or audio: audio; images;
	// pages: ocr; else chat), and every family for a free model the catalogue does not know.
	Endpoints []string `json:"endpoints,omitempty"`
	// Routes are tried in order until one answers.
	Routes []*RouteConfig `json:"routes"`
}

// RouteConfig is one way to serve a model.
type RouteConfig struct {
	// Provider names an entry of the app's providers.
	Provider string `json:"provider"`
	// Model is the provider's model id. Default: the public name without ":free".
	Model string `json:"model,omitempty"`
	// Pricing is what the route charges. Default: free.
	Pricing *PriceConfig `json:"pricing,omitempty"`
	// MaxOutputTokens is the route's largest completion; it sizes credit reservations of
	// requests that set no max_tokens. Default: 4096.
	MaxOutputTokens int64 `json:"max_output_tokens,omitempty"`
	// ContextWindow is the model's context length in tokens. A request refused as too long
	// falls back only to routes with a larger window. Default: unknown (no such fallback).
	ContextWindow int64 `json:"context_window,omitempty"`
	// MaxUpload is the largest multipart upload the route takes, in bytes (audio to
	// transcribe, images to edit). Default: 25 MiB for audio, 50 MiB for images.
	MaxUpload int64 `json:"max_upload,omitempty"`
	// Resilience overrides the provider's policy for this route, field by field.
	Resilience
}

// Resilience is how persistently the gateway works a route. Unset fields take the
// provider's value, then the defaults.
type Resilience struct {
	// Retries is how many more times a route is tried after a 429, a 5xx or a connection
	// failure before any byte reached the client; 0 turns retries off. Default: 2.
	Retries *int `json:"retries,omitempty"`
	// RetryBackoff and RetryBackoffMax bound the exponential backoff with full jitter.
	// Defaults: 200ms and 5s.
	RetryBackoff    caddy.Duration `json:"retry_backoff,omitempty"`
	RetryBackoffMax caddy.Duration `json:"retry_backoff_max,omitempty"`
	// RetryAfterCap is the longest upstream Retry-After honoured before retrying; a longer one
	// moves on to the next route. Default: 20s.
	RetryAfterCap caddy.Duration `json:"retry_after_cap,omitempty"`
	// HeaderTimeout bounds the wait for a stream's response headers; a route silent that long
	// is not retried, the next is tried at once. Negative turns it off. Default: 30s.
	HeaderTimeout caddy.Duration `json:"header_timeout,omitempty"`
	// FirstTokenTimeout bounds the wait from a stream's headers to its first token. Negative
	// turns it off. Default: 60s.
	FirstTokenTimeout caddy.Duration `json:"first_token_timeout,omitempty"`
	// CircuitBreakerThreshold consecutive failures open the route's circuit for
	// CircuitBreakerCooldown; 0 turns the breaker off. Defaults: 5 and 15s.
	CircuitBreakerThreshold *int           `json:"circuit_breaker_threshold,omitempty"`
	CircuitBreakerCooldown  caddy.Duration `json:"circuit_breaker_cooldown,omitempty"`
	// Prefill tells whether the upstream accepts an assistant prefill, which lets a stream
	// broken elsewhere continue here. Default: true for anthropic and mock, false otherwise.
	Prefill *bool `json:"prefill,omitempty"`
}

// over returns r with the fields that o sets replaced.
func (r Resilience) over(o Resilience) Resilience {
	if o.Retries != nil {
		r.Retries = o.Retries
	}
	if o.CircuitBreakerThreshold != nil {
		r.CircuitBreakerThreshold = o.CircuitBreakerThreshold
	}
	if o.Prefill != nil {
		r.Prefill = o.Prefill
	}
	for _, f := range [][2]*caddy.Duration{{&r.RetryBackoff, &o.RetryBackoff}, {&r.RetryBackoffMax, &o.RetryBackoffMax}, {&r.RetryAfterCap, &o.RetryAfterCap},
		{&r.HeaderTimeout, &o.HeaderTimeout}, {&r.FirstTokenTimeout, &o.FirstTokenTimeout}, {&r.CircuitBreakerCooldown, &o.CircuitBreakerCooldown}} {
		if *f[1] != 0 {
			*f[0] = *f[1]
		}
	}
	return r
}

// policy is the handlers' form of the resilience settings.
func (r Resilience) policy() handlers.Policy {
	p := handlers.Policy{
		BackoffBase: time.Duration(r.RetryBackoff), BackoffMax: time.Duration(r.RetryBackoffMax),
		RetryAfterCap: time.Duration(r.RetryAfterCap), HeaderTimeout: time.Duration(r.HeaderTimeout),
		FirstTokenTimeout: time.Duration(r.FirstTokenTimeout), BreakerCooldown: time.Duration(r.CircuitBreakerCooldown),
	}
	if r.Retries != nil {
		p.Retries = *r.Retries
		if p.Retries == 0 {
			p.Retries = -1
		}
	}
	if r.CircuitBreakerThreshold != nil {
		p.BreakerThreshold = *r.CircuitBreakerThreshold
		if p.BreakerThreshold == 0 {
			p.BreakerThreshold = -1
		}
	}
	return p
}

// PriceConfig holds a route's prices in USD as exact decimal strings (at most nine
// decimals): per million tokens, per million characters, per second, per image, per page
// or per request, as each field says. An unset price is free, with the defaults below.
type PriceConfig struct {
	// Input prices prompt tokens that are neither cached nor audio or image tokens, per million.
	Input string `json:"input,omitempty"`
	// CachedInput prices prompt tokens read from a cache, per million. Default: the input price.
	CachedInput string `json:"cached_input,omitempty"`
	// CacheWrite prices prompt tokens written to a cache, per million. Default: the input price.
	CacheWrite string `json:"cache_write,omitempty"`
	// Output prices completion tokens other than reasoning, audio or image tokens, per million.
	Output string `json:"output,omitempty"`
	// Reasoning prices reasoning tokens, per million. Default: the output price.
	Reasoning string `json:"reasoning,omitempty"`
	// InputAudioTokens and OutputAudioTokens price audio tokens, per million.
	InputAudioTokens  string `json:"input_audio_tokens,omitempty"`
	OutputAudioTokens string `json:"output_audio_tokens,omitempty"`
	// ImageInputTokens and ImageOutputTokens price image tokens, per million.
	ImageInputTokens  string `json:"image_input_tokens,omitempty"`
	ImageOutputTokens string `json:"image_output_tokens,omitempty"`
	// InputCharacters prices input text by the character (speech), per million.
	InputCharacters string `json:"input_characters,omitempty"`
	// InputAudioSeconds and OutputAudioSeconds price audio per second; a started second
	// counts as one.
	InputAudioSeconds  string `json:"input_audio_seconds,omitempty"`
	OutputAudioSeconds string `json:"output_audio_seconds,omitempty"`
	// Image prices images by size and quality, per image. A route that lists any refuses
	// images that none of them prices.
	Image []ImagePriceConfig `json:"image,omitempty"`
	// Page prices document pages, per page.
	Page string `json:"page,omitempty"`
	// OutputVideoSeconds prices generated video by resolution, per second; a started second
	// counts as one. A route that lists any refuses video that none of them prices.
	OutputVideoSeconds []VideoPriceConfig `json:"output_video_seconds,omitempty"`
	// Request is a fixed fee per request.
	Request string `json:"request,omitempty"`
	// BatchDiscountPercent is taken off every price above for a request the route's
	// upstream runs in its own batch (OpenAI's Batch API, Anthropic's Message Batches), 0 to
	// 100. A batch the gateway runs itself, request by request, pays the prices above.
	// Default: 50, what OpenAI and Anthropic take off, when the route's provider runs
	// batches natively (batch_api); 0 otherwise.
	BatchDiscountPercent *int64 `json:"batch_discount_percent,omitempty"`
}

// ImagePriceConfig is the price of one image of a size and quality.
type ImagePriceConfig struct {
	// Price is in USD per image.
	Price string `json:"price"`
	// Size is as requests give it ("1024x1024"). Default: any size that no other price names.
	Size string `json:"size,omitempty"`
	// Quality is as requests give it ("high", "hd"). Default: any quality that no other
	// price of the size names.
	Quality string `json:"quality,omitempty"`
}

// VideoPriceConfig is the price of one second of video at a resolution.
type VideoPriceConfig struct {
	// Price is in USD per second.
	Price string `json:"price"`
	// Resolution is as requests give it ("720p"). Default: any resolution that no other
	// price names.
	Resolution string `json:"resolution,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (*App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "model_gateway", New: func() caddy.Module { return new(App) }}
}

// stores keeps one database handle per store identity across config reloads, when the old
// and new app instances overlap.
var stores = caddy.NewUsagePool()

// pooledStore is a database handle shared across config reloads, with the process's
// instance: its identity as the owner of reservations, whose heartbeat runs from the
// first Start of an app on the handle to the handle's end, once however many configs
// overlap.
type pooledStore struct {
	store.Store
	lazy *lazyStore
	inst *store.Instance
	// workers run from the first Start on the handle to its end, and know the newest
	// started configuration, whose logger the instance reports through.
	workers *workerPool
}

func newPooledStore(s *lazyStore) *pooledStore {
	p := &pooledStore{Store: s, lazy: s}
	p.workers = workers.NewPool[*appRuntime](s, workers.Options{})
	p.inst = store.NewInstance(s, ids.New("inst"), store.InstanceOptions{
		OnError: func(err error) { p.log().Error("gateway instance", zap.Error(err)) },
		OnRelease: func(n int, why string) {
			p.log().Info("released reservations", zap.Int("count", n), zap.String("reason", why))
		},
	})
	return p
}

func (p *pooledStore) log() *zap.Logger { return p.workers.Logger() }

// Destruct stops the workers, retires the instance (nothing it held stays reserved) and
// closes the store.
func (p *pooledStore) Destruct() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.workers.Close(ctx); err != nil {
		p.log().Error("stopping the background workers", zap.Error(err))
	}
	err := p.inst.Stop(ctx)
	if err != nil {
		p.log().Error("retiring the gateway instance", zap.Error(err))
	}
	return errors.Join(err, p.Close())
}

// Provision resolves placeholders, builds providers and models, and takes a handle on the
// store, which opens at Start: Provision also runs under `caddy validate`.
func (a *App) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger()
	a.batchRowRunner = &batchRowRunner{}
	repl := caddy.NewReplacer()
	if a.Store == nil {
		a.Store = &StoreConfig{}
	}
	driver, target, err := a.Store.resolve(repl)
	if err != nil {
		return err
	}
	provs, err := a.buildProviders(ctx)
	if err != nil {
		return err
	}
	a.providers = provs
	models, err := a.buildModels(provs)
	if err != nil {
		return err
	}
	if a.registry, err = handlers.NewRegistry(models); err != nil {
		return err
	}
	if err := a.loadCatalog(repl); err != nil {
		return err
	}
	if a.uploadDir, err = checkUploadDir(repl.ReplaceKnown(a.UploadDir, "")); err != nil {
		return err
	}
	if err := a.provisionBlobStore(ctx); err != nil {
		return err
	}
	if err := a.provisionWebhooks(repl); err != nil {
		return err
	}
	if err := a.provisionDestinations(ctx); err != nil {
		return err
	}
	if err := a.provisionEvents(ctx); err != nil {
		return err
	}
	a.storeKey = driver + ":" + target + ":" + a.Store.Durability
	a.storeDriver, a.storeLocation = driver, storeLocation(driver, target)
	durability := a.Store.Durability
	// The handle is shared across reloads; the database is opened by the first Start on it
	// (lazyStore), not here. It reports through the newest started configuration's logger.
	val, _, err := stores.LoadOrNew(a.storeKey, func() (caddy.Destructor, error) {
		var p *pooledStore
		p = newPooledStore(newLazyStore(func(ctx context.Context) (store.Store, error) {
			octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			s, err := openStore(octx, driver, target, durability, p.log)
			if err != nil {
				return nil, fmt.Errorf("opening the %s store: %w", driver, err)
			}
			return s, nil
		}))
		return p, nil
	})
	if err != nil {
		a.storeKey = ""
		return err
	}
	a.pooled = val.(*pooledStore)
	a.store = a.pooled.Store
	a.provisionNotifications()
	return a.provisionMetrics(ctx)
}

// metricsPool keeps the gateway's collectors across config reloads: a counter counts for the
// process, and a request in flight across a reload is counted when it ends, by the
// configuration that served it.
var metricsPool = caddy.NewUsagePool()

const metricsKey = "model_gateway"

// pooledMetrics is the process's collectors while some configuration holds them.
type pooledMetrics struct{ *handlers.Metrics }

func (pooledMetrics) Destruct() error { return nil }

// provisionMetrics takes the process's collectors and registers them on the
// configuration's registry, which Caddy serves on the admin API's /metrics and in its
// metrics handler.
func (a *App) provisionMetrics(ctx caddy.Context) error {
	val, _, err := metricsPool.LoadOrNew(metricsKey, func() (caddy.Destructor, error) {
		m, err := handlers.NewMetrics(nil, nil)
		return pooledMetrics{m}, err
	})
	if err != nil {
		return err
	}
	m := val.(pooledMetrics).Metrics
	a.withdrawBreakers = m.ReportBreakers(a.registry)
	a.metrics = m
	if reg := ctx.GetMetricsRegistry(); reg != nil {
		return m.Register(reg)
	}
	return nil
}

// Validate checks the timeouts and durations.
func (a *App) Validate() error {
	for _, d := range []struct {
		name string
		v    caddy.Duration
	}{{"store_timeout", a.StoreTimeout}, {"settle_timeout", a.SettleTimeout}, {"instance_heartbeat", a.InstanceHeartbeat}, {"instance_timeout", a.InstanceTimeout}, {"music_retention", a.MusicRetention}} {
		if d.v < 0 {
			return fmt.Errorf("%s must not be negative", d.name)
		}
	}
	if a.MaxFileSize < 0 {
		return fmt.Errorf("max_file_size must not be negative")
	}
	if b := a.Batches; b != nil && (b.Chunks < 0 || b.ChunkRows < 0 || b.RowsPerChunk < 0 || b.BatchChunks < 0 || b.ProviderRows < 0 || b.RowTimeout < 0) {
		return fmt.Errorf("batches: bounds must not be negative")
	}
	return store.ValidateIntervals(time.Duration(a.InstanceHeartbeat), time.Duration(a.InstanceTimeout))
}

func (s *StoreConfig) resolve(repl *caddy.Replacer) (driver, target string, err error) {
	driver = s.Driver
	if driver == "" {
		driver = "sqlite"
	}
	switch driver {
	case "sqlite":
		switch s.Durability {
		case "", "process", "power":
		default:
			return "", "", fmt.Errorf("store durability %q: want process or power", s.Durability)
		}
		target = repl.ReplaceKnown(s.Path, "")
		if target == "" {
			target = DefaultSQLitePath()
		}
		if target, err = filepath.Abs(target); err != nil {
			return "", "", fmt.Errorf("store path: %w", err)
		}
	case "postgres":
		if s.Durability != "" {
			return "", "", errors.New("store durability applies to sqlite; PostgreSQL's synchronous_commit decides for postgres")
		}
		target = repl.ReplaceKnown(s.DSN, "")
		if target == "" {
			return "", "", errors.New("store postgres: a dsn is required")
		}
	default:
		return "", "", fmt.Errorf("unknown store driver %q (want sqlite or postgres)", s.Driver)
	}
	return driver, target, nil
}

// DefaultCreditLeaseLinger is how long a key's credit lease stays open after its last
// request by default (App.CreditLeaseLinger).
const DefaultCreditLeaseLinger = 2 * time.Second

// DefaultSQLitePath is the SQLite file used when the configuration names none.
func DefaultSQLitePath() string {
	return filepath.Join(caddy.AppDataDir(), "model_gateway", "gateway.db")
}

// openStore opens the database; its failures in the background are logged to log(). A
// panic's stack is in the entry's errorVerbose field.
func openStore(ctx context.Context, driver, target, durability string, log func() *zap.Logger) (store.Store, error) {
	background := func(err error) {
		log().Error("store background work failed", zap.String("store", driver), zap.Error(err))
	}
	if driver == "postgres" {
		return postgres.Open(ctx, target, postgres.WithBackgroundErrors(background))
	}
	d := sqlite.DurableProcess
	if durability == "power" {
		d = sqlite.DurablePower
	}
	return sqlite.Open(ctx, target, sqlite.WithDurability(d), sqlite.WithBackgroundErrors(background), sqlite.WithDeferredErrors(func(err error) {
		log().Error("a journaled settlement could not be recorded", zap.Error(err))
	}))
}

func (a *App) buildModels(provs map[string]providers.Provider) ([]*handlers.Model, error) {
	out := make([]*handlers.Model, 0, len(a.Models))
	for _, mc := range a.Models {
		if mc == nil || mc.Name == "" {
			return nil, errors.New("a model has no name")
		}
		m := &handlers.Model{Name: mc.Name, OwnedBy: mc.OwnedBy, Endpoints: mc.Endpoints}
		for _, family := range mc.Endpoints {
			if !slices.Contains(handlers.EndpointFamilies(), family) {
				return nil, fmt.Errorf("model %q: endpoints: unknown family %q (want one of %s)", mc.Name, family, strings.Join(handlers.EndpointFamilies(), ", "))
			}
		}
		for i, rc := range mc.Routes {
			p, ok := provs[rc.Provider]
			if !ok {
				return nil, fmt.Errorf("model %q route %d: unknown provider %q", mc.Name, i+1, rc.Provider)
			}
			price, err := rc.Pricing.resolve()
			if err != nil {
				return nil, fmt.Errorf("model %q route %d: %w", mc.Name, i+1, err)
			}
			if price, err = price.WithBatchDiscount(rc.Pricing.batchDiscount(p)); err != nil {
				return nil, fmt.Errorf("model %q route %d: %w", mc.Name, i+1, err)
			}
			upstream := rc.Model
			if upstream == "" {
				upstream = strings.TrimSuffix(mc.Name, handlers.FreeSuffix)
			}
			res := a.Providers[rc.Provider].Resilience.over(rc.Resilience)
			prefill := a.Providers[rc.Provider].prefill
			if res.Prefill != nil {
				prefill = *res.Prefill
			}
			m.Routes = append(m.Routes, handlers.Route{
				ProviderName: rc.Provider, Provider: p, UpstreamModel: upstream, Price: price, MaxOutputTokens: rc.MaxOutputTokens,
				ContextWindow: rc.ContextWindow, MaxUpload: rc.MaxUpload, Prefill: prefill, Policy: res.policy(),
			})
		}
		out = append(out, m)
	}
	return out, nil
}

// batchDiscount is the percent taken off the route's prices in a batch that p runs
// natively: the configured one, else the upstreams' own discount when p runs any batch.
func (pc *PriceConfig) batchDiscount(p providers.Provider) int64 {
	if pc != nil && pc.BatchDiscountPercent != nil {
		return *pc.BatchDiscountPercent
	}
	if br, ok := p.(providers.BatchRunner); ok {
		for _, endpoint := range []string{"/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/embeddings"} {
			if br.SupportsBatch(endpoint) {
				return pricing.DefaultBatchDiscountPercent
			}
		}
	}
	return 0
}

func (pc *PriceConfig) resolve() (pricing.Price, error) {
	var p pricing.Price
	if pc == nil {
		return p, nil
	}
	for _, f := range []struct{ dim, usd string }{
		{pricing.DimInput, pc.Input}, {pricing.DimCachedInput, pc.CachedInput}, {pricing.DimCacheWrite, pc.CacheWrite},
		{pricing.DimOutput, pc.Output}, {pricing.DimReasoning, pc.Reasoning},
		{pricing.DimInputAudioTokens, pc.InputAudioTokens}, {pricing.DimOutputAudioTokens, pc.OutputAudioTokens},
		{pricing.DimImageInputTokens, pc.ImageInputTokens}, {pricing.DimImageOutputTokens, pc.ImageOutputTokens},
		{pricing.DimInputCharacters, pc.InputCharacters},
		{pricing.DimInputAudioSeconds, pc.InputAudioSeconds}, {pricing.DimOutputAudioSeconds, pc.OutputAudioSeconds},
		{pricing.DimPage, pc.Page}, {pricing.DimRequest, pc.Request},
	} {
		if f.usd == "" {
			continue
		}
		n, err := pricing.ParseUSD(f.usd)
		if err != nil {
			return p, fmt.Errorf("price %s: %w", f.dim, err)
		}
		if err := p.SetPerUnit(f.dim, n); err != nil {
			return p, err
		}
	}
	if pc.CachedInput == "" {
		p.CachedInput = p.Input
	}
	if pc.CacheWrite == "" {
		p.CacheWrite = p.Input
	}
	if pc.Reasoning == "" {
		p.Reasoning = p.Output
	}
	if len(pc.Image) > 0 {
		list := make([]pricing.ImagePrice, len(pc.Image))
		for i, ic := range pc.Image {
			n, err := pricing.ParseUSD(ic.Price)
			if err != nil {
				return p, fmt.Errorf("price %s %d: %w", pricing.DimImage, i+1, err)
			}
			list[i] = pricing.ImagePrice{Size: ic.Size, Quality: ic.Quality, Nanos: n}
		}
		var err error
		if p, err = p.WithImages(list...); err != nil {
			return p, err
		}
	}
	if len(pc.OutputVideoSeconds) > 0 {
		list := make([]pricing.VideoPrice, len(pc.OutputVideoSeconds))
		for i, vc := range pc.OutputVideoSeconds {
			n, err := pricing.ParseUSD(vc.Price)
			if err != nil {
				return p, fmt.Errorf("price %s %d: %w", pricing.DimOutputVideoSeconds, i+1, err)
			}
			list[i] = pricing.VideoPrice{Resolution: vc.Resolution, Nanos: n}
		}
		var err error
		if p, err = p.WithVideoSeconds(list...); err != nil {
			return p, err
		}
	}
	return p, nil
}

// checkUploadDir makes sure uploads can be spooled in dir ("" is the system's temporary
// directory, left to be checked by the first upload): found at start rather than by the
// first client whose upload fails.
func checkUploadDir(dir string) (string, error) {
	if dir == "" {
		return "", nil
	}
	f, err := os.CreateTemp(dir, "upload-check-*")
	if err != nil {
		return "", fmt.Errorf("upload_dir %q: uploads cannot be spooled there: %w", dir, err)
	}
	_ = f.Close()
	_ = os.Remove(f.Name())
	return dir, nil
}

// loadCatalog builds the discovery catalogue: the embedded one, extended by the
// operator's file, and the models' explicit catalogue entries.
func (a *App) loadCatalog(repl *caddy.Replacer) error {
	a.catalog = catalog.Default()
	if a.CatalogFile != "" {
		c, err := a.catalog.ExtendFile(repl.ReplaceKnown(a.CatalogFile, ""))
		if err != nil {
			return err
		}
		a.catalog = c
	}
	a.catalogIDs = map[string]string{}
	for _, mc := range a.Models {
		if mc.CatalogID == "" {
			continue
		}
		if _, ok := a.catalog.Lookup(mc.CatalogID); !ok {
			return fmt.Errorf("model %q: catalog_id %q is not in the model catalogue (GET /v1/data/models lists it)", mc.Name, mc.CatalogID)
		}
		a.catalogIDs[mc.Name] = mc.CatalogID
	}
	return nil
}

// Start opens the store and starts the process's instance (once per store handle, whatever
// the reloads): it registers, releases at once what dead instances hold, and keeps a heartbeat. The latest
// configuration's intervals apply from its next heartbeat.
func (a *App) Start() error {
	p := a.pooled
	// The database opens here, once per handle: its schema migrated, its journal replayed.
	if _, err := p.lazy.get(context.Background()); err != nil {
		return err
	}
	a.runtimeStopped = p.workers.Started(a.runtime(), a.logger)
	p.inst.SetIntervals(time.Duration(a.InstanceHeartbeat), time.Duration(a.InstanceTimeout))
	// A failure is reported and retried at the next heartbeat; the gateway serves meanwhile,
	// each request reserving for itself.
	_ = p.inst.Start(context.Background())
	p.workers.Run(backgroundWorkers...)
	a.logReady()
	a.logWebhooks()
	return nil
}

// logReady says in one line which store the gateway works on and what it serves: the
// first thing to check when requests are refused or records are not where expected. A
// provider without its credential refuses every call, so it makes the line a warning.
func (a *App) logReady() {
	var missing []string
	for name, pc := range a.Providers {
		if pc.credentialMissing {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	level := zap.InfoLevel
	if len(missing) > 0 {
		level = zap.WarnLevel
	}
	a.logger.Log(level, "gateway ready", zap.String("store", a.storeDriver), zap.String("store_location", a.storeLocation),
		zap.Int("models", len(a.Models)), zap.Int("providers", len(a.Providers)), zap.Strings("providers_without_credentials", missing))
}

// storeLocation is where the store is, for the log: SQLite's file, or PostgreSQL's host,
// port and database, never the DSN itself, which may hold a password.
func storeLocation(driver, target string) string {
	if driver != "postgres" {
		return target
	}
	cfg, err := pgconn.ParseConfig(target)
	if err != nil {
		return "(a dsn that does not parse)"
	}
	return fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
}

// Stop leaves the instance and the workers to the store handle, which outlives this
// configuration when a reload keeps it; the workers go on with the newest configuration
// still started.
func (a *App) Stop() error {
	if a.runtimeStopped != nil {
		a.runtimeStopped()
	}
	return nil
}

// Cleanup releases this instance's hold on the store and on the metrics.
func (a *App) Cleanup() error {
	if a.batchRowRunner != nil {
		a.batchRowRunner.close()
	}
	if a.metrics != nil {
		a.withdrawBreakers()
		_, _ = metricsPool.Delete(metricsKey)
		a.metrics = nil
	}
	if a.storeKey != "" {
		if _, err := stores.Delete(a.storeKey); err != nil {
			return fmt.Errorf("closing the store: %w", err)
		}
	}
	return nil
}

// gateway builds the request handler of one model_gateway handler instance.
func (a *App) gateway(logger *zap.Logger, basePath string, maxBody int64, idle time.Duration) *handlers.Gateway {
	g := &handlers.Gateway{
		Config: billing.Config{
			Store: a.store, Logger: logger, ReservationTTL: time.Duration(a.ReservationTTL),
			LeaseLinger:   DefaultCreditLeaseLinger,
			StoreTimeout:  time.Duration(a.StoreTimeout),
			SettleTimeout: time.Duration(a.SettleTimeout),
			Owner:         a.pooled.inst,
			// Settlements of answers delivered while the store could not take them wait
			// here for it, across restarts (billing/journal.go).
			JournalDir: filepath.Join(caddy.AppDataDir(), "model_gateway", "settlements"),
		},
		Registry: a.registry, MaxBodyBytes: maxBody, StreamIdleTimeout: idle,
		Catalog: a.catalog, CatalogIDs: a.catalogIDs,
		DisableCreditTopUp: a.CreditTopUp != nil && !*a.CreditTopUp,
		UploadDir:          a.uploadDir,
		Metrics:            a.metrics,
		WebhookSealer:      a.sealer,
		WebhookClient:      a.outbound,
		DestinationKinds:   a.destinationKinds(),
		Notifications:      a.notifications,
		BasePath:           basePath,
		Jobs:               a.jobSubmitter(logger),
		Blobs:              a.blobs,
		MusicRetention:     time.Duration(a.MusicRetention),
		MaxFileSize:        a.MaxFileSize,
	}
	if a.Batches != nil {
		g.BatchChunkRows = a.Batches.ChunkRows
	}
	if a.sealer != nil {
		g.LinkKey = a.sealer.Derive("download links")
	}
	if a.CreditLeaseLinger != nil {
		g.LeaseLinger = time.Duration(*a.CreditLeaseLinger)
	}
	g.Init()
	return g
}

// Interface guards.
var (
	_ caddy.App          = (*App)(nil)
	_ caddy.Provisioner  = (*App)(nil)
	_ caddy.Validator    = (*App)(nil)
	_ caddy.CleanerUpper = (*App)(nil)
)
