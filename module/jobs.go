package module

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/billing"
	"github.com/modelgateway/caddy-modelgateway/handlers"
	"github.com/modelgateway/caddy-modelgateway/internal/workers"
	"github.com/modelgateway/caddy-modelgateway/jobs"
	"github.com/modelgateway/caddy-modelgateway/store"
)

func init() {
	backgroundWorkers = append(backgroundWorkers, worker{Name: "jobs", Run: runJobs})
}

// runJobs polls the jobs of every registered kind (jobs.Engine) until the store handle
// ends. Its holds are durable (owned by no instance), so its ledger needs no owner; its
// prices and routes are the newest started configuration's, read at each poll.
func runJobs(ctx context.Context, rt workers.Runtime[*appRuntime]) error {
	log := rt.Logger()
	ledger, owner := workerLedger(rt)
	defer func() { _ = ledger.Close() }()
	e := &jobs.Engine{
		Store: rt.Store(), Ledger: ledger, Logger: log, Owner: owner,
		Env:     func() jobs.Env { return jobsEnv(rt.Current()) },
		Events:  jobs.WebhookEvents(log, time.Now),
		Changed: func(j store.Job) { cur := rt.Current(); emitJobChanged(cur, j); notifyJobFailed(cur, j) },
		Wakeup:  jobsWakeup,
	}
	return e.Run(ctx)
}

// workerLedger is the ledger of a background worker's holds and settlements, bounded as
// the configuration the worker started with says, and the owner its claims are made as
// (the instance's id).
func workerLedger(rt workers.Runtime[*appRuntime]) (*billing.Ledger, string) {
	cur := rt.Current()
	owner := "worker"
	if cur.Owner != nil {
		owner = cur.Owner.ID()
	}
	return billing.NewLedger(&billing.Config{
		Store: rt.Store(), Logger: rt.Logger(), Now: time.Now,
		ReservationTTL: orDuration(cur.ReservationTTL, handlers.DefaultReservationTTL),
		StoreTimeout:   orDuration(cur.StoreTimeout, handlers.DefaultStoreTimeout),
		SettleTimeout:  orDuration(cur.SettleTimeout, handlers.DefaultSettleTimeout),
	}), owner
}

// wakeJobs wakes the process's job poller, unless it is already to wake.
func wakeJobs() {
	select {
	case jobsWakeup <- struct{}{}:
	default:
	}
}

// jobsWakeup is how a request that created a job wakes the process's poller, so that its
// first poll is not left to the poller's idle wait. It is the process's, not a store's: a
// wake-up of the poller of another store (tests run several) costs one look at its queue.
var jobsWakeup = make(chan struct{}, 1)

// jobSubmitter is the engine a configuration's requests create jobs with: it holds and
// stores them, and wakes the worker's engine, which polls them.
func (a *App) jobSubmitter(logger *zap.Logger) *jobs.Engine {
	owner := ""
	if a.pooled.inst != nil {
		owner = a.pooled.inst.ID()
	}
	return &jobs.Engine{
		Store: a.store, Logger: logger, Owner: owner,
		Env:     func() jobs.Env { return jobsEnv(a.runtime()) },
		Events:  jobs.WebhookEvents(logger, time.Now),
		Changed: func(j store.Job) { cur := a.runtime(); emitJobChanged(cur, j); notifyJobFailed(cur, j) },
		Wakeup:  jobsWakeup,
	}
}

// jobsEnv is what a job's poll may use of configuration c: its routes by provider and
// upstream model.
func jobsEnv(c *appRuntime) jobs.Env {
	env := jobs.Env{Route: func(j store.Job) (jobs.Route, bool) {
		if c == nil || c.Registry == nil {
			return jobs.Route{}, false
		}
		return c.Registry.JobRoute(j)
	}}
	if c != nil {
		env.Blobs = c.Blobs
	}
	return env
}

func orDuration(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// JobChangedEvent is the Caddy event emitted when this instance commits a change to a job
// (created, polled to a new status or progress, ended), with its job_id, workspace_id,
// kind, model, status, lifecycle_status (as the job's object shows them), stage (the
// engine's: submitted, polling, then settled or released) and progress.
const JobChangedEvent = "model_gateway_job_changed"

// emitJobChanged publishes JobChangedEvent for j through configuration c's events app.
func emitJobChanged(c *appRuntime, j store.Job) {
	if c == nil || c.Emit == nil {
		return
	}
	c.Emit(JobChangedEvent, map[string]any{
		"job_id": j.ID, "workspace_id": j.WorkspaceID, "kind": j.Kind, "model": j.Model,
		"status": jobs.PublicStatus(j.Kind, j.Status), "lifecycle_status": jobs.LifecycleStatus(j.Status),
		"stage": j.Lifecycle, "progress": j.Progress,
	})
}
