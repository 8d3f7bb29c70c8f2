package module

import (
	"github.com/modelgateway/caddy-modelgateway/jobs/batch"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/blobs"
	"github.com/modelgateway/caddy-modelgateway/delivery"
	"github.com/modelgateway/caddy-modelgateway/handlers"
	"github.com/modelgateway/caddy-modelgateway/internal/workers"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// worker is background work of the gateway (job polling, webhook deliveries): it runs
// once per process and store, from the first Start of an app on the store's handle until
// the handle ends, so that a reload, where two configurations overlap, neither stops it
// nor starts it twice (workers.Pool).
type worker = workers.Worker[*appRuntime]

// backgroundWorkers are the workers every gateway runs. The job families add theirs here.
var backgroundWorkers []worker

// workerPool is the workers of one store handle, with the configurations started on it.
type workerPool = workers.Pool[*appRuntime]

// appRuntime is what the workers see of a started configuration (workers.Runtime.Current):
// the pieces a request's handlers.Gateway is built from, without the HTTP server's. The
// pieces that the job families need next (URL signer, outbound client for webhooks) are
// added here as their configuration appears.
type appRuntime struct {
	// Logger is the app's.
	Logger *zap.Logger
	// Registry holds the public models, their routes with the providers and the prices.
	Registry *handlers.Registry
	// Providers are the upstream adapters by the name routes refer to them with.
	Providers map[string]providers.Provider
	// Metrics are the process's collectors.
	Metrics *handlers.Metrics
	// Owner is the process's instance, the owner of the holds it takes for itself.
	Owner *store.Instance
	// ReservationTTL, StoreTimeout and SettleTimeout are the app's settings (zero: the
	// handlers' defaults).
	ReservationTTL, StoreTimeout, SettleTimeout time.Duration
	// Blobs is the app's blob store, where the job families keep what they produce.
	Blobs blobs.Store
	// Sealer opens the webhook endpoints' signing secrets (the app's secret key); nil when
	// no key is configured, and then no webhook is delivered.
	Sealer *delivery.Sealer
	// Outbound calls webhook receivers (the networks webhook_allow admits included).
	Outbound *delivery.Client
	// Emit publishes a Caddy event through the configuration's events app, when anything
	// subscribes to it.
	Emit func(name string, data map[string]any)
	// BatchRow runs a row of a gateway-run batch through this configuration's routes;
	// nil when it has none.
	BatchRow batch.Dispatch
	// Batches are the bounds of gateway-run batches (nil: the defaults).
	Batches *BatchesConfig
}

// runtime is the app's configuration as the workers see it.
func (a *App) runtime() *appRuntime {
	return &appRuntime{
		Logger: a.logger, Registry: a.registry, Providers: a.providers, Metrics: a.metrics, Owner: a.pooled.inst,
		ReservationTTL: time.Duration(a.ReservationTTL), StoreTimeout: time.Duration(a.StoreTimeout),
		SettleTimeout: time.Duration(a.SettleTimeout), Blobs: a.blobs, Sealer: a.sealer, Outbound: a.outbound, Emit: a.emit,
		BatchRow: a.batchDispatcher(), Batches: a.Batches,
	}
}
