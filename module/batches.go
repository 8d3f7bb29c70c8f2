package module

import (
	"context"
	"sync"
	"time"

	"github.com/modelgateway/caddy-modelgateway/blobs"
	"github.com/modelgateway/caddy-modelgateway/files"
	"github.com/modelgateway/caddy-modelgateway/handlers"
	"github.com/modelgateway/caddy-modelgateway/internal/workers"
	"github.com/modelgateway/caddy-modelgateway/jobs/batch"
)

func init() {
	backgroundWorkers = append(backgroundWorkers, worker{Name: "batch rows", Run: runBatchRows},
		worker{Name: "batch row records", Run: runBatchRowSweep})
}

// batchRowSweepEvery is how often the ended batches' row records are looked for, and
// batchRowGrace how long after its end a batch keeps them (batch.SweepRows). Atomic
// because every gateway of a process reads them (tests shorten them).
var (
	batchRowSweepEvery = sweepInterval(time.Minute)
	batchRowGrace      = sweepInterval(batch.DefaultRowsGrace)
)

// runBatchRowSweep removes the row records of the batches that ended more than
// batchRowGrace ago (batch.SweepRows) every so often, until ctx ends.
func runBatchRowSweep(ctx context.Context, rt workers.Runtime[*appRuntime]) error {
	return runSweep(ctx, batchRowSweepEvery, batch.SweepPage, func(ctx context.Context) (int, error) {
		return batch.SweepRows(ctx, rt.Store(), time.Now().Add(-time.Duration(batchRowGrace.Load())), batch.SweepPage)
	})
}

// runBatchRows runs the rows of gateway-run batches (batch.Runner) with the routes, blob
// store and bounds of the newest started configuration, until the store handle ends.
func runBatchRows(ctx context.Context, rt workers.Runtime[*appRuntime]) error {
	cur := rt.Current()
	log := rt.Logger()
	ledger, owner := workerLedger(rt)
	defer func() { _ = ledger.Close() }()
	r := &batch.Runner{
		Store: rt.Store(), Ledger: ledger, Logger: log, Owner: owner,
		Blobs: func() blobs.Store {
			if c := rt.Current(); c != nil {
				return c.Blobs
			}
			return nil
		},
		WakeJobs: wakeJobs,
		Dispatch: func() batch.Dispatch {
			if c := rt.Current(); c != nil {
				return c.BatchRow
			}
			return nil
		},
	}
	// The bounds are the configuration's the worker started with: a reload that changes
	// them restarts nothing, and they apply from the next process.
	if b := cur.Batches; b != nil {
		r.Chunks, r.RowsPerChunk, r.BatchChunks, r.ProviderRows = b.Chunks, b.RowsPerChunk, b.BatchChunks, b.ProviderRows
		r.RowTimeout = time.Duration(b.RowTimeout)
	}
	return r.Run(ctx)
}

// batchRowRunner is the gateway a configuration runs its batch rows through, built at its
// first use (the workers' first look at the configuration), not in Provision, which
// also runs under caddy validate.
type batchRowRunner struct {
	once sync.Once
	gw   *handlers.Gateway
}

func (b *batchRowRunner) close() {
	b.once.Do(func() {}) // none is built after this
	if b.gw != nil {
		_ = b.gw.Close()
	}
}

// batchDispatcher is the Dispatch of this configuration's batch rows: a gateway of its
// own over the configuration's routes, whose body limit takes any row a batch file may
// hold.
func (a *App) batchDispatcher() batch.Dispatch {
	if a.batchRowRunner == nil || a.registry == nil || a.store == nil {
		return nil
	}
	a.batchRowRunner.once.Do(func() {
		a.batchRowRunner.gw = a.gateway(a.logger.Named("batches"), "/v1", files.MaxBatchLineBytes, 0)
	})
	if a.batchRowRunner.gw == nil {
		return nil
	}
	return a.batchRowRunner.gw.DispatchRow
}
