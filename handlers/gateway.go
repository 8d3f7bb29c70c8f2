// Package handlers serves the gateway's HTTP API: authentication, validation, routing to
// providers with fallback, the wallet's reserve-and-settle flow, streaming and recording.
// Handlers are plain functions over the store and provider interfaces; the Caddy module
// (package module) builds a Gateway from its configuration and hands requests to it.
package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/billing"
	"github.com/modelgateway/caddy-modelgateway/blobs"
	"github.com/modelgateway/caddy-modelgateway/delivery"
	"github.com/modelgateway/caddy-modelgateway/internal/catalog"
	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/internal/readall"
	"github.com/modelgateway/caddy-modelgateway/jobs"
	"github.com/modelgateway/caddy-modelgateway/notify"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Defaults of the Gateway's settings.
const (
	DefaultMaxBodyBytes      = 10 << 20
	DefaultStreamIdleTimeout = 30 * time.Second
	DefaultReservationTTL    = 2 * time.Hour
	// MinPreflightNanos is the spec's 1.00 USD credit check before every paid request.
	MinPreflightNanos = billing.MinPreflightNanos
	// DefaultStoreTimeout bounds each store call a request waits for before its upstream
	// call; DefaultSettleTimeout bounds a settlement, retried meanwhile.
	DefaultStoreTimeout  = 2 * time.Second
	DefaultSettleTimeout = 30 * time.Second
)

// Gateway serves the API. Build it with its exported fields set, then call Init once.
type Gateway struct {
	// Config is what billing needs: the store, logger, clock, reservation TTL, lease
	// linger, store and settlement timeouts and the instance owning reservations. Its
	// StoreTimeout also bounds the key's lookup: past it the request is answered 503
	// store_unavailable, and nothing is sent upstream; past SettleTimeout an answered
	// request's answer is withheld, uncharged.
	billing.Config
	Registry *Registry
	// MaxBodyBytes limits request bodies; larger ones get 413.
	MaxBodyBytes int64
	// StreamIdleTimeout ends an upstream stream that sends nothing for this long.
	StreamIdleTimeout time.Duration
	// BatchChunkRows is how many rows a chunk of a gateway-run batch holds (one claim of a
	// row worker). Default: batch.DefaultChunkRows.
	BatchChunkRows int
	// KeyCacheTTL is how long a key read from the store is trusted; negative turns the cache
	// off. Default: DefaultKeyCacheTTL.
	KeyCacheTTL time.Duration

	keys *keyCache
	// Catalog describes models for the discovery routes; nil means the embedded
	// catalogue (catalog.Default).
	Catalog *catalog.Catalog
	// CatalogIDs names the catalogue entry of a public model name explicitly, for models
	// whose name and upstream model id are neither an id nor an alias in the catalogue.
	CatalogIDs map[string]string
	// UploadDir is where uploads are spooled while their request lasts (audio to measure,
	// images to send again to a fallback route); empty means os.TempDir().
	UploadDir string
	// DisableCreditTopUp makes POST /credits answer 403: set it where wallets hold money
	// paid to the operator, so that only the operator adds credit.
	DisableCreditTopUp bool
	// WebhookSealer seals webhook signing secrets at rest under the operator's key; nil
	// turns the webhook endpoint routes off (503 not_configured, saying how to set a key).
	WebhookSealer *delivery.Sealer
	// WebhookClient checks the URLs of webhook receivers; nil admits public https
	// receivers only (delivery.NewClient's defaults).
	WebhookClient *delivery.Client
	// DestinationKinds are the notification destination kinds the operator configured, by
	// name (module: the model_gateway.destinations.* guest modules).
	DestinationKinds map[string]notify.Kind
	// Notifications queues the workspace's notifications of the events requests see (a key
	// reaching its limit); nil tells nobody.
	Notifications *notify.Outbox
	// BasePath is the prefix the API is served under ("/v1"), which the URLs the gateway
	// hands out (a job's polling_url) start with.
	BasePath string
	// Jobs creates the jobs of the job families (video, music) under durable holds; the
	// process's worker polls them. nil turns the job routes off (503 not_configured).
	Jobs *jobs.Engine
	// Blobs keeps what jobs made (music audio) and files; nil when none is configured.
	Blobs blobs.Store
	// MaxFileSize is the largest file POST /files takes, in bytes; 0 means
	// files.DefaultMaxSize (512 MB).
	MaxFileSize int64
	// MusicRetention is how long the audio of a completed music job is kept; 0 means
	// music.DefaultRetention (7 days).
	MusicRetention time.Duration
	// LinkKey signs the download links the gateway hands out (derived from the app's
	// secret_key); nil when none is configured, and then no link is handed out.
	LinkKey []byte
	// Metrics, when set, counts requests, usage and upstream behaviour for Prometheus
	// (NewMetrics); nil counts nothing.
	Metrics *Metrics
	// Observer, when set, is told of each metered request as it begins and once it is
	// settled; nil: nobody.
	Observer Observer
	// Live bounds the live updates' websockets (GET /async/{kind}/{id}/ws); a zero field
	// takes its default.
	Live LiveSettings

	// keyLimitNotes keeps key.limit_reached to once per key and period (notifications.go).
	keyLimitNotes keyLimitNotes

	// ready caches GET /health's look at the store (info.go).
	ready readiness
	// jobFeed fans the store's change feed out to the live updates' websockets (live.go).
	jobFeed jobFeed

	// ledger admits and settles credit: key leases, reservations; Close releases its
	// leases.
	ledger *billing.Ledger
	// families are the endpoint families each model serves (discovery.go).
	families map[*Model][]string

	routes map[string]map[string]endpoint
	// patterns are routes with {parameters} in their path, tried when no exact path matches.
	patterns []routePattern
	// placeholders are the "METHOD path" routes that answer not_implemented_yet.
	placeholders map[string]bool
}

// handler serves a route for its caller (nil on a route that needs no key). Handlers are
// methods of Gateway, named in the route table by method expression ((*Gateway).embeddings),
// so that the table is one package-level declaration that discovery reads without a Gateway.
type handler func(g *Gateway, w http.ResponseWriter, r *http.Request, c *Caller) error

type endpoint struct {
	perm    permission
	surface Surface
	serve   handler
}

// Init fills defaults and builds the route table.
func (g *Gateway) Init() {
	if g.MaxBodyBytes <= 0 {
		g.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if g.StreamIdleTimeout <= 0 {
		g.StreamIdleTimeout = DefaultStreamIdleTimeout
	}
	if g.ReservationTTL <= 0 {
		g.ReservationTTL = DefaultReservationTTL
	}
	if g.Now == nil {
		g.Now = time.Now
	}
	if g.KeyCacheTTL == 0 {
		g.KeyCacheTTL = DefaultKeyCacheTTL
	}
	if g.StoreTimeout <= 0 {
		g.StoreTimeout = DefaultStoreTimeout
	}
	if g.SettleTimeout <= 0 {
		g.SettleTimeout = DefaultSettleTimeout
	}
	g.ledger = billing.NewLedger(&g.Config)
	if g.Jobs != nil && g.Jobs.Ledger == nil {
		g.Jobs.Ledger = g.ledger
	}
	g.keys = &keyCache{ttl: g.KeyCacheTTL, m: map[string]cachedKey{}}
	if g.Logger == nil {
		g.Logger = zap.NewNop()
	}
	if g.Registry == nil {
		g.Registry, _ = NewRegistry(nil)
	}
	g.families = g.modelFamilies()
	g.buildRoutes(routeTable)
	// Settlements an earlier run journaled are applied now that a store is there.
	g.ledger.ApplyJournal()
}

// ServeHTTP answers a request whose path, relative to the API's base path, is path.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request, path string) {
	g.serveAs(w, r, path, nil)
}

// serveAs answers r through the route table, for caller when it is given (Dispatch), else
// for the key r authenticates with.
func (g *Gateway) serveAs(w http.ResponseWriter, r *http.Request, path string, given *Caller) {
	path = strings.TrimSuffix(path, "/")
	methods, ok := g.routes[path]
	if !ok {
		methods, ok = g.matchPattern(r, path)
	}
	if !ok {
		answerUnread(w, r, SurfaceOpenAI, newError(http.StatusNotFound, CodeNotFound, "no such endpoint: "+r.Method+" "+path))
		return
	}
	ep, ok := methods[r.Method]
	if !ok && r.Method == http.MethodHead {
		// HEAD is GET without the body, which the HTTP server drops.
		ep, ok = methods[http.MethodGet]
	}
	if !ok {
		allow := make([]string, 0, len(methods)+1)
		for m := range methods {
			allow = append(allow, m)
			if m == http.MethodGet {
				allow = append(allow, http.MethodHead)
			}
		}
		slices.Sort(allow)
		w.Header().Set("Allow", strings.Join(allow, ", "))
		answerUnread(w, r, SurfaceOpenAI, newError(http.StatusMethodNotAllowed, CodeMethodNotAllowed, r.Method+" is not allowed on "+path))
		return
	}
	var caller *Caller
	var refused *APIError
	if given != nil {
		// Dispatched in process: the caller was authenticated by whoever dispatches.
		caller, refused = given, ep.perm.admits(given)
	} else {
		caller, refused = g.authorise(r, ep.perm)
	}
	if refused != nil {
		answerUnread(w, r, ep.surface, refused)
		return
	}
	if err := ep.serve(g, w, r, caller); err != nil {
		// Declared here, not above: errors.As takes its address, which would move it to
		// the heap on every request, not only on a failed one.
		var apiErr *APIError
		switch {
		case errors.As(err, &apiErr):
		case errors.Is(err, store.ErrUnavailable):
			apiErr = g.storeUnavailable("request", err)
		default:
			g.Logger.Error("request failed", zap.String("path", path), zapErr(err))
			apiErr = newError(http.StatusInternalServerError, CodeGateway, "the gateway failed to handle the request")
		}
		if apiErr.Status == http.StatusRequestEntityTooLarge || apiErr.Status == http.StatusRequestTimeout {
			// The rest of the body is unread.
			answerUnread(w, r, ep.surface, apiErr)
			return
		}
		writeError(w, ep.surface, apiErr, w.Header().Get("X-Generation-Id"))
	}
}

// unreadLinger is how long a connection answered before its body was read stays open
// after the answer; serverDrain is how much of an unread body net/http reads before it
// answers.
const (
	unreadLinger = 500 * time.Millisecond
	serverDrain  = 256 << 10
)

// answerUnread answers with an error before the request body was read. A body larger than
// the server drains, or of unknown length, is left on the wire: "Connection: close" keeps
// the server from reading it before the answer is sent (a client that announced a large
// body and awaits the answer, as with Expect: 100-continue, would wait forever: Caddy wraps
// the body, so net/http cannot tell how much is left), and the connection lingers a moment
// so that a client still sending reads the answer before the close resets the connection.
func answerUnread(w http.ResponseWriter, r *http.Request, s Surface, e *APIError) {
	unread := r.ProtoMajor == 1 && (r.ContentLength < 0 || r.ContentLength > serverDrain)
	if unread {
		w.Header().Set("Connection", "close")
	}
	writeError(w, s, e, w.Header().Get("X-Generation-Id"))
	if !unread || http.NewResponseController(w).Flush() != nil {
		return
	}
	t := time.NewTimer(unreadLinger)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
}

// readBody reads a JSON request body within the size limit.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *APIError) {
	return g.readBodyUpTo(w, r, g.MaxBodyBytes)
}

// readBodyUpTo reads a JSON request body of at most limit bytes (an endpoint that takes
// documents inline takes more than MaxBodyBytes).
func (g *Gateway) readBodyUpTo(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *APIError) {
	if r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	body, err := readall.ReadAll(http.MaxBytesReader(w, r.Body, limit), r.ContentLength, limit)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge(limit)
		}
		return nil, unreadable(err)
	}
	if !rawjson.Valid(body) {
		return nil, newError(http.StatusBadRequest, CodeInvalidJSON, "the request body is not valid JSON")
	}
	return body, nil
}

// unreadable answers a request body that could not be read: 408 when the client sent it
// too slowly (the server's body timeouts cut it), 400 otherwise.
func unreadable(err error) *APIError {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return newError(http.StatusRequestTimeout, CodeRequestTimeout, "the request body arrived too slowly and was cut; nothing was sent upstream or charged")
	}
	return newError(http.StatusBadRequest, CodeValidation, "could not read the request body: "+err.Error())
}

func tooLarge(limit int64) *APIError {
	return newError(http.StatusRequestEntityTooLarge, CodePayloadTooLarge, "the request body is larger than the limit of "+strconv.FormatInt(limit, 10)+" bytes")
}

// writeJSON answers 200 with v.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	writeRawJSON(w, status, data)
	return nil
}

func writeRawJSON(w http.ResponseWriter, status int, data []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

// storeContext bounds a store call a request waits for before its upstream call.
func (g *Gateway) storeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, g.StoreTimeout)
}

// storeUnavailable answers a request that a store call failed before anything was done for
// it: the store is down, partitioned or too slow, and the request may be tried again. The
// store's error is logged, never answered (it may name hosts, users and files).
func (g *Gateway) storeUnavailable(what string, err error) *APIError {
	if ce := g.Logger.Check(zap.ErrorLevel, what+" failed"); ce != nil {
		ce.Write(zapErr(err))
	}
	msg := "the gateway's store cannot be reached; retry shortly"
	if errors.Is(err, context.DeadlineExceeded) {
		msg = "the gateway's store did not answer within " + g.StoreTimeout.String() + "; retry shortly"
	}
	e := newError(http.StatusServiceUnavailable, CodeStoreUnavailable, msg)
	e.Type, e.Origin = "system", "gateway"
	e.Extra = map[string]any{"retry_after_seconds": int64(1)}
	return e
}

func zapErr(err error) zap.Field { return zap.Error(err) }

// Close releases every credit lease of the Gateway: those with nothing in flight now, the
// others when their last request settles. Requests after Close reserve for themselves.
// Call it when the Gateway is retired (a config reload, a shutdown) so that no hold
// outlives it.
func (g *Gateway) Close() error {
	if g.ledger == nil {
		return nil
	}
	return g.ledger.Close()
}
