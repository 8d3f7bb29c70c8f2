package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/billing"
	"github.com/modelgateway/caddy-modelgateway/internal/background"
	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Engine creates jobs under durable holds and polls them to their end. One Engine runs per
// store and process (module runs it as a worker); several processes on one PostgreSQL
// database share the work through the store's claims, so each poll is made by one of them.
type Engine struct {
	Store  store.Store
	Ledger *billing.Ledger
	// Env returns the newest configuration's view for polls.
	Env    func() Env
	Logger *zap.Logger
	// Owner names this process's claims (its instance id).
	Owner string
	Now   func() time.Time

	// Pacing. Zero values take the defaults below.
	//
	// Pace is the time between polls when the upstream asks for none; polls are never
	// closer than MinPoll nor further apart than MaxPoll, whatever it asks.
	Pace, MinPoll, MaxPoll time.Duration
	// Idle is how long the engine waits when no poll is due (a Wake cuts it short).
	Idle time.Duration
	// Lease is how long a claimed poll is held; a poll is bounded to half of it, so that it
	// ends while it is still held.
	Lease time.Duration
	// Concurrency is how many polls run at once; GroupCap how many of one provider's.
	Concurrency, GroupCap int
	// MaxAttempts is how many failed polls in a row end a job as failed.
	MaxAttempts int
	// Reconcile is how often the engine looks for live jobs that nothing polls (see
	// Engine.Reconcile); it also looks when it starts.
	Reconcile time.Duration
	// Events, when set, makes the events a change of job j to phase enqueues for delivery
	// (webhooks), in the transaction that makes the change; j is the job as changed.
	Events func(j store.Job, phase string) []store.Event
	// Changed, when set, is told of each change this engine committed to a job, with the
	// job as the change left it (module emits it as a Caddy event). It runs on the
	// engine's goroutine: it must not block.
	Changed func(j store.Job)
	// Wakeup, when set, is the channel Wake signals and Run listens to, so that an engine
	// that only submits (a request's) wakes the one that polls (the worker's) when they
	// share it.
	Wakeup chan struct{}

	wakeOnce sync.Once
	wake     chan struct{}
}

// Defaults of the Engine's pacing.
const (
	DefaultPace        = 5 * time.Second
	DefaultMinPoll     = 200 * time.Millisecond
	DefaultMaxPoll     = time.Minute
	DefaultIdle        = time.Second
	DefaultLease       = 2 * time.Minute
	DefaultConcurrency = 8
	DefaultGroupCap    = 4
	DefaultMaxAttempts = 10
	DefaultReconcile   = 5 * time.Minute
	// reconcileBatch bounds the jobs one reconciliation queues again.
	reconcileBatch = 500
	maxBackoff     = 5 * time.Minute
	holdGrace      = time.Hour
	// handBackTimeout bounds handing a poll back at shutdown, which must not hold the
	// shutdown up.
	handBackTimeout = 2 * time.Second
)

func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

func (e *Engine) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

func (e *Engine) wakeChan() chan struct{} {
	e.wakeOnce.Do(func() {
		e.wake = e.Wakeup
		if e.wake == nil {
			e.wake = make(chan struct{}, 1)
		}
	})
	return e.wake
}

// Wake tells the engine that a poll may be due now (a job was just created here).
func (e *Engine) Wake() {
	select {
	case e.wakeChan() <- struct{}{}:
	default:
	}
}

// Submission is a job to create: the job as it is to be stored (its id, workspace, key,
// kind, model, route, request and expiry set; ExpiresAt is also when its hold expires) and
// the most it may cost.
type Submission struct {
	Job  store.Job
	Most int64
	// Endpoint names the request that made the job (POST /videos), for the records.
	Endpoint string
	// Start makes the job upstream once it is held for: it returns the upstream's id and
	// first report, whose Result, when set, is stored as the job's until its end. Its
	// error releases the hold and is Submit's.
	Start func(ctx context.Context) (nativeID string, first Report, err error)
}

// Submit holds s.Most on the job's workspace with a durable hold expiring with the job,
// starts the job upstream and stores it with its first poll and its created events (the
// Events hook's, when set). Whatever fails after the hold
// was taken releases it. The hold's refusals are billing's (store.ErrInsufficientFunds, a
// *store.KeyLimitError, an unreachable store).
func (e *Engine) Submit(ctx context.Context, s Submission) (store.Job, error) {
	j := s.Job
	if j.ExpiresAt.IsZero() {
		return store.Job{}, fmt.Errorf("job %q: an expiry is required (its hold expires with it)", j.ID)
	}
	// The hold outlives the job's expiry by holdGrace, so that the engine, which ends an
	// expired job and releases its hold, always finds it; only when no gateway runs that
	// long does the hold's own expiry free it.
	hold, err := e.Ledger.Durable(j.ExpiresAt.Add(holdGrace)).Admit(ctx, billing.Request{
		WorkspaceID: j.WorkspaceID, KeyID: j.KeyID, Most: s.Most,
		GenerationID: GenerationID(j.ID), Endpoint: s.Endpoint, Model: j.Model, Start: e.now(),
	})
	if err != nil {
		return store.Job{}, err
	}
	rh, ok := hold.(interface{ ID() string })
	if !ok {
		_ = hold.Release(context.WithoutCancel(ctx))
		return store.Job{}, errNoHold
	}
	j.ReservationID, j.HeldNanos = rh.ID(), s.Most
	release := func(cause error) error {
		if rerr := hold.Release(context.WithoutCancel(ctx)); rerr != nil {
			e.Logger.Error("releasing the hold of a job not created failed; its expiry frees it",
				zap.String("job_id", j.ID), zap.String("reservation_id", j.ReservationID), zap.Error(rerr))
		}
		return cause
	}
	first := Report{Status: StatusQueued}
	if s.Start != nil {
		native, rep, err := s.Start(ctx)
		if err != nil {
			return store.Job{}, release(err)
		}
		j.NativeID, first = native, rep
		if rep.Result != nil {
			// What the kind keeps of its start (the upstream's pace) until the job's end
			// replaces it.
			j.Result = rep.Result
		}
	}
	if first.Status == "" {
		first.Status = StatusQueued
	}
	j.Status, j.Lifecycle, j.Progress = first.Status, LifecycleSubmitted, first.Progress
	now := e.now()
	var events []store.Event
	if e.Events != nil {
		// The created event tells of the job as stored, its creation time included.
		if j.CreatedAt.IsZero() {
			j.CreatedAt = now
		}
		events = e.Events(j, "created")
	}
	if err := e.Store.CreateJob(ctx, j, e.next(first), events); err != nil {
		return store.Job{}, release(fmt.Errorf("storing job %q: %w", j.ID, err))
	}
	e.changed(j)
	e.Wake()
	return j, nil
}

// next is when to poll next after a poll that reported rep.
func (e *Engine) next(rep Report) time.Time {
	if rep.PollNow {
		return e.now()
	}
	return e.now().Add(e.pace(rep.PollAfter))
}

// pace is when to poll next after a poll whose upstream asked for after.
func (e *Engine) pace(after time.Duration) time.Duration {
	if after <= 0 {
		after = orDefault(e.Pace, DefaultPace)
	}
	return min(max(after, orDefault(e.MinPoll, DefaultMinPoll)), orDefault(e.MaxPoll, DefaultMaxPoll))
}

// backoff is when to poll again after attempt failed polls: exponential from the pace,
// jittered, capped.
func (e *Engine) backoff(attempt int) time.Duration {
	d := orDefault(e.MinPoll, DefaultMinPoll)
	for i := 1; i < attempt && d < maxBackoff; i++ {
		d *= 2
	}
	d = min(d, maxBackoff)
	return d/2 + rand.N(d/2+1)
}

// Run polls due jobs of every registered kind until ctx ends. Its error (the store cannot
// be reached to claim) is for the worker runtime, which runs it again after a backoff.
func (e *Engine) Run(ctx context.Context) error {
	sem := make(chan struct{}, orDefault(e.Concurrency, DefaultConcurrency))
	var wg sync.WaitGroup
	defer wg.Wait()
	var reconciled time.Time
	for ctx.Err() == nil {
		if now := e.now(); now.Sub(reconciled) >= orDefault(e.Reconcile, DefaultReconcile) {
			reconciled = now
			if _, err := e.ReconcileJobs(ctx); err != nil && ctx.Err() == nil {
				e.Logger.Warn("looking for jobs nothing polls failed; looked again later", zap.Error(err))
			}
		}
		claimed := 0
		for _, name := range Kinds() {
			free := cap(sem) - len(sem)
			if free == 0 {
				break
			}
			items, err := e.Store.Claim(ctx, store.ClaimParams{
				Queue: store.JobQueue(name), Owner: e.Owner, Lease: orDefault(e.Lease, DefaultLease),
				Limit: free, GroupCap: orDefault(e.GroupCap, DefaultGroupCap),
			})
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("claiming polls of %s jobs: %w", name, err)
			}
			claimed += len(items)
			for _, it := range items {
				sem <- struct{}{}
				wg.Add(1)
				go func() {
					// A poll's end frees a place under the group's cap, which a due poll
					// may take at once: the loop is told, rather than left to its idle
					// wait (capped polls are due polls, not "none due").
					defer func() { <-sem; wg.Done(); e.Wake() }()
					// A poll's own panic is the job's (PollClaimed retries it); one of the
					// engine's is logged here, and the claim's lease running out polls again.
					if p := background.Call("polling job "+it.ID, func() { e.PollClaimed(ctx, it) }); p != nil {
						e.Logger.Error("a job's poll panicked outside its kind", zap.Error(p))
					}
				}()
			}
		}
		if claimed > 0 {
			continue
		}
		t := time.NewTimer(orDefault(e.Idle, DefaultIdle))
		select {
		case <-ctx.Done():
		case <-e.wakeChan():
		case <-t.C:
		}
		t.Stop()
	}
	return nil
}

// ReconcileJobs queues a poll again for each live job that has none (store.UnpolledJobs),
// so that a job whose state nobody follows (a database restored from a backup, a poll
// removed by hand) is polled to its end and its hold settled or released, rather than
// left holding credit until the hold expires. It returns how many it queued. Instances
// reconciling at once race harmlessly: a poll queued twice is one poll.
func (e *Engine) ReconcileJobs(ctx context.Context) (int, error) {
	lost, err := e.Store.UnpolledJobs(ctx, reconcileBatch)
	if err != nil {
		return 0, err
	}
	queued := 0
	for _, j := range lost {
		switch err := e.Store.Enqueue(ctx, store.JobEnqueue(j, e.now())); {
		case err == nil:
			queued++
			e.Logger.Warn("a live job had no poll queued; polled again",
				zap.String("job_id", j.ID), zap.String("kind", j.Kind), zap.String("status", j.Status))
		case errors.Is(err, store.ErrConflict):
		default:
			return queued, fmt.Errorf("queueing a poll of job %q again: %w", j.ID, err)
		}
	}
	if queued > 0 {
		e.Wake()
	}
	return queued, nil
}

// PollClaimed polls the job of a claimed item and advances it: on to its next poll, to its
// end (settled or released, then completed), or back to a later attempt when the poll
// failed. Every outcome is written with the claim, so a claim lost meanwhile changes nothing.
func (e *Engine) PollClaimed(ctx context.Context, it store.ClaimedItem) {
	log := e.Logger.With(zap.String("job_id", it.ID), zap.Int("attempt", it.Attempt))
	ws, id, err := store.JobOf(it)
	if err != nil {
		log.Error("a queued poll names no job; dropped", zap.Error(err))
		e.complete(ctx, log, it.Claim)
		return
	}
	j, err := e.Store.GetJob(ctx, ws, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		e.complete(ctx, log, it.Claim)
		return
	case err != nil:
		e.retry(ctx, log, it, fmt.Errorf("reading the job: %w", err))
		return
	}
	log = log.With(zap.String("kind", j.Kind))
	if Terminal(j.Status) {
		// Ended elsewhere (cancelled, expired by an operator) but its hold not yet settled or
		// released: finish it, as idempotently as any end.
		e.end(ctx, log, it, j, Report{Status: j.Status, ErrorCode: j.ErrorCode, ErrorMessage: j.ErrorMessage})
		return
	}
	if !j.ExpiresAt.IsZero() && !e.now().Before(j.ExpiresAt) {
		e.end(ctx, log, it, j, Report{Status: StatusExpired, ErrorCode: "job_expired",
			ErrorMessage: "the job did not finish before it expired; nothing was charged"})
		return
	}
	k, ok := kindOf(j.Kind)
	if !ok {
		e.retry(ctx, log, it, fmt.Errorf("no job kind %q is registered in this gateway", j.Kind))
		return
	}
	env := Env{Route: func(store.Job) (Route, bool) { return Route{}, false }}
	if e.Env != nil {
		env = e.Env()
	}
	if env.Store == nil {
		env.Store = e.Store
	}
	timeout := orDefault(e.Lease, DefaultLease) / 2
	if lp, ok := k.(LongPoller); ok {
		if d := lp.PollTimeout(j); d > timeout {
			if _, err := e.Store.Extend(ctx, it.Claim, 2*d); err != nil {
				e.advanceFailed(ctx, log, it, fmt.Errorf("extending the claim for a long poll: %w", err))
				return
			}
			timeout = d
		}
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	var rep Report
	var perr error
	if p := background.Call("polling job "+j.ID, func() { rep, perr = k.Poll(pctx, env, j) }); p != nil {
		perr = p
	}
	cancel()
	if ctx.Err() != nil {
		e.handBack(log, it.Claim)
		return
	}
	var fail *Failure
	switch {
	case errors.As(perr, &fail):
		e.end(ctx, log, it, j, Report{Status: StatusFailed, ErrorCode: fail.Code, ErrorMessage: fail.Message})
		return
	case perr != nil:
		if background.AsPanic(perr) != nil {
			log.Error("a job's poll panicked; retried", zap.Error(perr))
		}
		if it.Attempt >= orDefault(e.MaxAttempts, DefaultMaxAttempts) {
			e.end(ctx, log, it, j, Report{Status: StatusFailed, ErrorCode: "upstream_unavailable",
				ErrorMessage: fmt.Sprintf("the upstream could not be polled %d times in a row: %v", it.Attempt, perr)})
			return
		}
		e.retry(ctx, log, it, perr)
		return
	}
	switch {
	case Terminal(rep.Status):
		e.end(ctx, log, it, j, rep)
		return
	case rep.Status == StatusQueued || rep.Status == StatusInProgress || ownStatus(k, rep.Status):
	default:
		e.retry(ctx, log, it, fmt.Errorf("the upstream reported status %q, which is no job status", rep.Status))
		return
	}
	u := store.JobUpdate{Status: &rep.Status, Progress: &rep.Progress, Lifecycle: ptr(LifecyclePolling)}
	// The events tell of the job as this poll leaves it.
	changed := j
	changed.Status, changed.Progress, changed.Lifecycle = rep.Status, rep.Progress, LifecyclePolling
	if _, keeps := k.(StatusKind); keeps && rep.Result != nil {
		// A kind with statuses of its own keeps its running state in the job's result.
		u.Result, changed.Result = rep.Result, rep.Result
	}
	var events []store.Event
	if e.Events != nil {
		if rep.Status != j.Status {
			events = append(events, e.Events(changed, "status_changed")...)
		}
		if rep.Progress != j.Progress {
			events = append(events, e.Events(changed, "progress")...)
		}
	}
	if err := e.Store.AdvanceJob(ctx, it.Claim, u, events, e.next(rep)); err != nil {
		e.advanceFailed(ctx, log, it, err)
		return
	}
	if changed.Status != j.Status || changed.Progress != j.Progress || changed.Lifecycle != j.Lifecycle || u.Result != nil {
		e.changed(changed)
	}
}

// ownStatus tells whether status is a live status of kind k's own (StatusKind).
func ownStatus(k Kind, status string) bool {
	sk, ok := k.(StatusKind)
	return ok && !Terminal(status) && slices.Contains(sk.LiveStatuses(), status)
}

// piecewise tells whether the jobs of kind are charged piecewise (PiecewiseKind).
func piecewise(kind string) bool {
	k, ok := kindOf(kind)
	if !ok {
		return false
	}
	_, ok = k.(PiecewiseKind)
	return ok
}

// changed tells Changed of a change committed to j, if it is set.
func (e *Engine) changed(j store.Job) {
	if e.Changed != nil {
		e.Changed(j)
	}
}

// end settles a completed job's hold at its usage's price, or a failed, cancelled or
// expired one's at nothing (which releases the hold and records the job's generation), or
// releases what a piecewise job's hold has left (PiecewiseKind), then completes the job
// with its claim. The settlement is idempotent by the job's
// generation id: an instance that died between the two settles again and is charged once.
func (e *Engine) end(ctx context.Context, log *zap.Logger, it store.ClaimedItem, j store.Job, rep Report) {
	var lifecycle string
	var err error
	if piecewise(j.Kind) {
		// Its pieces were settled as they were made, whatever its end: what the hold has
		// left goes back.
		lifecycle, err = LifecycleSettled, e.releaseRest(ctx, j)
	} else {
		lifecycle, err = e.settleEnd(ctx, log, j, rep)
	}
	if err != nil {
		e.retry(ctx, log, it, fmt.Errorf("settling the job: %w", err))
		return
	}
	now := e.now()
	u := store.JobUpdate{Status: &rep.Status, Lifecycle: &lifecycle, CompletedAt: &now}
	if rep.Status == StatusCompleted {
		u.Progress = ptr(100)
		if usage, err := json.Marshal(rep.Usage); err == nil {
			u.Usage = usage
		}
	}
	if rep.Result != nil {
		u.Result = rep.Result
	}
	if rep.ErrorCode != "" || rep.ErrorMessage != "" {
		u.ErrorCode, u.ErrorMessage = &rep.ErrorCode, &rep.ErrorMessage
	}
	changed := j
	changed.Status, changed.Lifecycle, changed.CompletedAt = rep.Status, lifecycle, now
	if u.Progress != nil {
		changed.Progress = *u.Progress
	}
	changed.ErrorCode, changed.ErrorMessage = rep.ErrorCode, rep.ErrorMessage
	if rep.Result != nil {
		changed.Result = rep.Result
	}
	var events []store.Event
	if e.Events != nil && rep.Status != j.Status {
		// A job's terminal statuses are the phases of its end's event.
		events = e.Events(changed, rep.Status)
	}
	if err := e.Store.AdvanceJob(ctx, it.Claim, u, events, time.Time{}); err != nil {
		e.advanceFailed(ctx, log, it, err)
		return
	}
	e.changed(changed)
}

// settleEnd settles a job's hold at its end: a completed job at its usage's price, any
// other at nothing (which releases the hold and records the job's generation). It returns
// the job's lifecycle stage then.
func (e *Engine) settleEnd(ctx context.Context, log *zap.Logger, j store.Job, rep Report) (string, error) {
	gen := &store.Generation{
		ID: GenerationID(j.ID), WorkspaceID: j.WorkspaceID, KeyID: j.KeyID, Endpoint: "/" + j.Kind,
		Model: j.Model, Provider: j.Provider, UpstreamModel: j.UpstreamModel, UpstreamID: j.NativeID,
		Status: 200, CreatedAt: j.CreatedAt,
	}
	lifecycle := LifecycleReleased
	if rep.Status == StatusCompleted {
		lifecycle = LifecycleSettled
		gen.CostLines, gen.CostNanos = e.price(log, j, rep.Usage)
		gen.RecordDimensions(&rep.Usage)
		gen.InputTokens, gen.CacheReadTokens, gen.OutputTokens = rep.Usage.Input, rep.Usage.CachedInput, rep.Usage.Output
	} else {
		gen.Status, gen.ErrorCode, gen.ErrorMessage, gen.ErrorOrigin = 0, rep.ErrorCode, rep.ErrorMessage, "upstream"
		if rep.Status == StatusExpired || rep.Status == StatusCancelled {
			gen.ErrorOrigin = "gateway"
		}
	}
	gen.EndToEndMs = e.now().Sub(j.CreatedAt).Milliseconds()
	_, err := e.settle(ctx, j, gen)
	return lifecycle, err
}

// releaseRest releases what a piecewise job's hold has left; a hold already gone (released
// before a crash, or expired) is nothing to release.
func (e *Engine) releaseRest(ctx context.Context, j store.Job) error {
	if j.ReservationID == "" {
		return nil
	}
	if _, err := e.Store.ReleaseReservation(ctx, j.ReservationID); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return nil
}

// settle charges gen against the job's durable hold. A hold already gone (the job's
// settlement was made before a crash: the store answers with its record; or the hold
// expired) is settled from the balance, so that a completed job is never free.
func (e *Engine) settle(ctx context.Context, j store.Job, gen *store.Generation) (store.Generation, error) {
	if j.ReservationID == "" {
		return e.Ledger.Unheld().Settle(ctx, gen)
	}
	stored, err := e.Ledger.ResumeDurable(j.ReservationID, j.HeldNanos).Settle(ctx, gen)
	if errors.Is(err, store.ErrNotFound) {
		return e.Ledger.Unheld().Settle(ctx, gen)
	}
	return stored, err
}

// price prices a completed job's usage on its route in the newest configuration. A usage
// it cannot price (the route is gone, or has no price for what was made) is charged the
// worst case the job held, never nothing; a free model's job is charged nothing.
func (e *Engine) price(log *zap.Logger, j store.Job, u pricing.Usage) ([]store.CostLine, int64) {
	var rt Route
	ok := false
	if e.Env != nil {
		if env := e.Env(); env.Route != nil {
			rt, ok = env.Route(j)
		}
	}
	var err error
	switch {
	case ok && rt.Free:
		return nil, 0
	case ok:
		var lines []store.CostLine
		var total int64
		if lines, total, err = rt.Price.Cost(u); err == nil {
			return lines, total
		}
	default:
		err = fmt.Errorf("route %s/%s is no longer configured", j.Provider, j.UpstreamModel)
	}
	log.Error("a completed job's usage could not be priced; charged the worst case it held", zap.Error(err))
	return []store.CostLine{{Dimension: pricing.DimRequest, Quantity: 1, UnitPriceNanos: j.HeldNanos, Nanos: j.HeldNanos}}, j.HeldNanos
}

// retry ends a failed poll's claim and makes it due again after a backoff: a failure
// raises the item's attempt.
func (e *Engine) retry(ctx context.Context, log *zap.Logger, it store.ClaimedItem, cause error) {
	log.Warn("a job's poll failed; retried later", zap.Error(cause))
	if err := e.Store.Retry(context.WithoutCancel(ctx), it.Claim, e.now().Add(e.backoff(it.Attempt)), cause.Error()); err != nil {
		log.Error("rescheduling a failed poll failed; its lease running out makes it due again", zap.Error(err))
	}
}

// handBack makes a poll cut short by the engine's shutdown (caddy stop, or the store
// closing) due again at once, without counting it as a failure, so that the next engine to
// run (this process restarted, another instance) polls the job without waiting for the
// claim's lease to run out. If the store cannot be reached, the lease running out does the
// same, later.
func (e *Engine) handBack(log *zap.Logger, c store.Claim) {
	ctx, cancel := context.WithTimeout(context.Background(), handBackTimeout)
	defer cancel()
	if err := e.Store.Requeue(ctx, c, time.Time{}); err != nil && !errors.Is(err, store.ErrClaimLost) {
		log.Info("a poll cut short by shutdown could not be handed back; its lease running out does", zap.Error(err))
	}
}

func (e *Engine) complete(ctx context.Context, log *zap.Logger, c store.Claim) {
	if err := e.Store.Complete(context.WithoutCancel(ctx), c); err != nil && !errors.Is(err, store.ErrClaimLost) {
		log.Error("completing a poll failed", zap.Error(err))
	}
}

func (e *Engine) advanceFailed(ctx context.Context, log *zap.Logger, it store.ClaimedItem, err error) {
	if errors.Is(err, store.ErrClaimLost) {
		// Another claim holds the job now (this one's lease ran out): its poll is the one
		// that counts.
		log.Info("a job's poll lost its claim; the new claim polls it", zap.Error(err))
		return
	}
	e.retry(ctx, log, it, fmt.Errorf("advancing the job: %w", err))
}

func ptr[T any](v T) *T { return &v }
