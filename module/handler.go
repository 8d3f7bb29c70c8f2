package module

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/timeouts"

	"github.com/modelgateway/caddy-modelgateway/handlers"
)

func init() {
	caddy.RegisterModule(new(Handler))
}

// Handler serves the gateway's API (chat completions, models, generations, keys...) under
// its base path, with the providers and models of the model_gateway app.
type Handler struct {
	// BasePath is the prefix the API is served under; the SDKs' base URL ends with it.
	// Requests outside it pass to the next handler. Default: /v1.
	BasePath string `json:"base_path,omitempty"`
	// MaxBodySize limits request bodies in bytes; larger ones get 413. Default: 10 MiB.
	MaxBodySize int64 `json:"max_body_size,omitempty"`
	// StreamIdleTimeout ends an upstream stream that sends nothing for this long. Default: 30s.
	StreamIdleTimeout caddy.Duration `json:"stream_idle_timeout,omitempty"`
	// BodyTimeout and BodyMinRate bound how long a client takes to send a request body
	// (JSON or upload): from the start, the body must arrive at BodyMinRate bytes a
	// second on average, and a client more than BodyTimeout behind that pace (to begin
	// with, one that sends nothing for BodyTimeout) is answered 408 request_timeout and
	// its spooled upload freed. A body of n bytes thus has at most BodyTimeout + n /
	// BodyMinRate: a client trickling bytes cannot hold a request, its spool file and its
	// goroutine for as long as it likes. They replace the server's read_idle_timeout and
	// read_min_rate while the gateway serves a request; the server's read_timeout still
	// caps the whole body. Default: 30s; negative leaves bodies to the server's timeouts.
	BodyTimeout caddy.Duration `json:"body_timeout,omitempty"`
	// BodyMinRate is in bytes a second. Default: 16384 (16 KiB/s: 27 minutes at most for
	// a 25 MiB upload); negative: none, and BodyTimeout is then the longest pause between
	// two reads of the body.
	BodyMinRate int64 `json:"body_min_rate,omitempty"`

	gw *handlers.Gateway
	// bodyTimeouts applies BodyTimeout and BodyMinRate to a request with a body, through
	// Caddy's idle timeouts of the request (or its own, when the server has none).
	bodyTimeouts *timeouts.Timeouts
	// api serves a request under BasePath; with bodyTimeouts, the handler it wraps.
	api caddyhttp.HandlerFunc
	// storeKey is the handler's own reference to the app's pooled store (stores): the
	// store stays open until the handler has returned its leases, whichever of the two is
	// cleaned up first.
	storeKey string
}

// CaddyModule returns the Caddy module information.
func (*Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.model_gateway", New: func() caddy.Module { return new(Handler) }}
}

// Provision connects the handler to the model_gateway app.
func (h *Handler) Provision(ctx caddy.Context) error {
	if h.BasePath == "" {
		h.BasePath = "/v1"
	}
	h.BasePath = "/" + strings.Trim(h.BasePath, "/")
	if h.BasePath == "/" {
		h.BasePath = ""
	}
	appIface, err := ctx.App("model_gateway")
	if err != nil {
		return fmt.Errorf("loading the model_gateway app: %w", err)
	}
	app := appIface.(*App)
	if app.storeKey != "" {
		stores.LoadOrStore(app.storeKey, app.pooled)
		h.storeKey = app.storeKey
	}
	h.gw = app.gateway(ctx.Logger(), h.BasePath, h.MaxBodySize, time.Duration(h.StreamIdleTimeout))
	h.api = h.serveAPI
	if h.BodyTimeout >= 0 {
		h.bodyTimeouts = &timeouts.Timeouts{ReadTimeout: DefaultBodyTimeout, ReadMinRate: DefaultBodyMinRate}
		if h.BodyTimeout > 0 {
			h.bodyTimeouts.ReadTimeout = time.Duration(h.BodyTimeout)
		}
		if h.BodyMinRate != 0 {
			h.bodyTimeouts.ReadMinRate = max(h.BodyMinRate, 0)
		}
		if err := h.bodyTimeouts.Provision(ctx); err != nil {
			return err
		}
	}
	events, err := ctx.App("events")
	if err != nil {
		return fmt.Errorf("loading the events app: %w", err)
	}
	h.gw.Observer = &publisher{ctx: ctx, events: events.(*caddyevents.App)}
	return nil
}

// FinishedEvent is the Caddy event emitted once a metered request is settled, with its
// generation_id, workspace_id, endpoint, model, provider, status and cost_nanos.
const FinishedEvent = "model_gateway_request_finished"

// placeholderPrefix names the placeholders of a metered request's outcome:
// {http.model_gateway.generation_id}, .workspace_id, .model, .provider and .cost_nanos.
const placeholderPrefix = "http.model_gateway."

// publisher makes Caddy placeholders and events of each metered request, for an access
// log's fields (log_append), a later handler, or an event subscriber.
type publisher struct {
	ctx    caddy.Context
	events *caddyevents.App
}

// Began adds the request's placeholders to its replacer. They are read when used rather
// than set now: the cost is known only at the end, and the access log asks after it,
// while a request that nothing reads them from pays one function for all of them.
func (p *publisher) Began(ctx context.Context, o handlers.Outcome) {
	repl, ok := ctx.Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if !ok {
		return
	}
	repl.Map(func(key string) (any, bool) {
		name, ok := strings.CutPrefix(key, placeholderPrefix)
		if !ok {
			return nil, false
		}
		switch name {
		case "generation_id":
			return o.GenerationID(), true
		case "workspace_id":
			return o.WorkspaceID(), true
		case "model":
			return o.Model(), true
		case "provider":
			return o.Provider(), true
		case "cost_nanos":
			return o.CostNanos(), true
		}
		return nil, false
	})
}

// Finished emits FinishedEvent, when anything can observe it: the event's data is made
// only for a subscriber.
func (p *publisher) Finished(_ context.Context, o handlers.Outcome) {
	if !p.events.ShouldEmit(FinishedEvent) {
		return
	}
	p.events.Emit(p.ctx, FinishedEvent, map[string]any{
		"generation_id": o.GenerationID(), "workspace_id": o.WorkspaceID(), "endpoint": o.Endpoint(),
		"model": o.Model(), "provider": o.Provider(), "status": o.Status(), "cost_nanos": o.CostNanos(),
	})
}

// Validate checks the configuration.
func (h *Handler) Validate() error {
	if h.MaxBodySize < 0 {
		return fmt.Errorf("max_body_size must not be negative")
	}
	return nil
}

// Defaults of BodyTimeout and BodyMinRate.
const (
	DefaultBodyTimeout = 30 * time.Second
	DefaultBodyMinRate = 16 << 10
)

// ServeHTTP serves API paths and passes everything else on.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if _, ok := h.apiPath(r); !ok {
		return next.ServeHTTP(w, r)
	}
	// A request without a body (its length 0, not unknown) has nothing to time.
	if h.bodyTimeouts == nil || r.ContentLength == 0 {
		return h.api(w, r)
	}
	return h.bodyTimeouts.ServeHTTP(w, r, h.api)
}

// serveAPI serves a request under BasePath. It finds the request's API path again rather
// than being handed the one ServeHTTP found: it is called through the body-timeout wrapper,
// whose handler parameter escapes, so a handler carrying the path would be one more heap
// allocation per request.
func (h *Handler) serveAPI(w http.ResponseWriter, r *http.Request) error {
	path, _ := h.apiPath(r)
	h.gw.ServeHTTP(w, r, path)
	return nil
}

// apiPath is the request's path relative to BasePath; false when it lies outside.
func (h *Handler) apiPath(r *http.Request) (string, bool) {
	path := r.URL.Path
	if h.BasePath == "" {
		return path, true
	}
	rest, ok := strings.CutPrefix(path, h.BasePath)
	if !ok || (rest != "" && rest[0] != '/') {
		return "", false
	}
	return rest, true
}

// Cleanup returns the credit this handler's gateway holds in leases, so that a config
// reload or a shutdown leaves no hold behind, then lets go of the store (closed once the
// app and every handler have let go of it).
func (h *Handler) Cleanup() error {
	var err error
	if h.gw != nil {
		err = h.gw.Close()
	}
	if h.storeKey != "" {
		if _, derr := stores.Delete(h.storeKey); derr != nil && err == nil {
			err = fmt.Errorf("closing the store: %w", derr)
		}
		h.storeKey = ""
	}
	return err
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)

// provisionEvents makes the app's emitter of Caddy events (job changes), through the
// configuration's events app: an event nothing subscribes to costs nothing to skip.
func (a *App) provisionEvents(ctx caddy.Context) error {
	app, err := ctx.App("events")
	if err != nil {
		return fmt.Errorf("loading the events app: %w", err)
	}
	events := app.(*caddyevents.App)
	a.emit = func(name string, data map[string]any) {
		if events.ShouldEmit(name) {
			events.Emit(ctx, name, data)
		}
	}
	return nil
}
