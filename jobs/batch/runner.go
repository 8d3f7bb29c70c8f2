package batch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/billing"
	"github.com/modelgateway/caddy-modelgateway/blobs"
	"github.com/modelgateway/caddy-modelgateway/files"
	"github.com/modelgateway/caddy-modelgateway/internal/background"
	"github.com/modelgateway/caddy-modelgateway/jobs"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Dispatch runs one row of a batch as an API request of key keyID of workspace
// workspaceID, through the gateway's route table and request lifecycle, with its credit
// from adm and its generation id fixed to generationID; path is relative to the API's
// base path ("/chat/completions"). It returns the answer's status and body; its error is
// for a row that got no answer at all.
type Dispatch func(ctx context.Context, workspaceID, keyID string, adm billing.Admission, generationID, path string, body []byte) (status int, answer []byte, err error)

// Defaults of the Runner's bounds.
const (
	DefaultChunks       = 4
	DefaultRowsPerChunk = 8
	DefaultBatchChunks  = 2
	DefaultProviderRows = 16
	DefaultRowTimeout   = 10 * time.Minute
	defaultLease        = 2 * time.Minute
	defaultIdle         = time.Second
	// cancelCheck is how often a chunk looks whether its batch was cancelled or expired.
	cancelCheck = time.Second
)

// Runner runs the rows of gateway-run batches: it claims chunks of RowQueue, at most
// BatchChunks of one batch at once across every instance, and runs each chunk's rows not
// yet recorded, RowsPerChunk at once, at most ProviderRows of one provider at once in the
// process, so that batches never take every connection an upstream's interactive traffic
// needs. A row's outcome is recorded once (store.BatchRows); its charge settles against
// the batch's reservation under a generation id derived from the row, so that a row run
// again after a crash is charged once.
type Runner struct {
	Store  store.Store
	Ledger *billing.Ledger
	// Blobs and Dispatch are the newest configuration's; nil while there is none.
	Blobs    func() blobs.Store
	Dispatch func() Dispatch
	Logger   *zap.Logger
	// Owner names this process's claims (its instance id).
	Owner string
	// Bounds; zero values take the defaults above.
	Chunks, RowsPerChunk, BatchChunks, ProviderRows int
	RowTimeout                                      time.Duration
	// Lease is how long a chunk's claim is held between extensions; Idle how long the
	// Runner waits when no chunk is due.
	Lease, Idle time.Duration
	// WakeJobs, when set, wakes the process's jobs engine: a batch whose last row was
	// recorded has its poll made due at once, so that it completes without waiting its
	// pace, and the engine is told.
	WakeJobs func()

	providersMu sync.Mutex
	providers   map[string]chan struct{}
}

func orInt(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

func orDur(v, def time.Duration) time.Duration {
	if v <= 0 {
		return def
	}
	return v
}

// providerSlots is the process's semaphore of rows of provider at once.
func (r *Runner) providerSlots(provider string) chan struct{} {
	r.providersMu.Lock()
	defer r.providersMu.Unlock()
	if r.providers == nil {
		r.providers = map[string]chan struct{}{}
	}
	s, ok := r.providers[provider]
	if !ok {
		s = make(chan struct{}, orInt(r.ProviderRows, DefaultProviderRows))
		r.providers[provider] = s
	}
	return s
}

// Run claims and runs chunks until ctx ends. Its error (the store cannot be reached to
// claim) is for the worker runtime, which runs it again after a backoff.
func (r *Runner) Run(ctx context.Context) error {
	slots := make(chan struct{}, orInt(r.Chunks, DefaultChunks))
	freed := make(chan struct{}, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		// Taken before the claim, so that chunks queued while it runs wake the wait below.
		queued := chunksQueued.Wait()
		if free := cap(slots) - len(slots); free > 0 {
			items, err := r.Store.Claim(ctx, store.ClaimParams{
				Queue: RowQueue, Owner: r.Owner, Lease: orDur(r.Lease, defaultLease), Limit: free,
				GroupCap: orInt(r.BatchChunks, DefaultBatchChunks),
			})
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("claiming chunks of batch rows: %w", err)
			}
			for _, it := range items {
				slots <- struct{}{}
				wg.Add(1)
				go func() {
					defer func() {
						<-slots
						wg.Done()
						select {
						case freed <- struct{}{}:
						default:
						}
					}()
					if p := background.Call("running chunk "+it.ID, func() { r.runChunk(ctx, it) }); p != nil {
						r.Logger.Error("a chunk of batch rows panicked; its lease running out runs it again", zap.Error(p))
					}
				}()
			}
			if len(items) > 0 {
				continue
			}
		}
		t := time.NewTimer(orDur(r.Idle, defaultIdle))
		select {
		case <-ctx.Done():
		case <-freed:
		case <-queued:
		case <-t.C:
		}
		t.Stop()
	}
	return nil
}

// runChunk runs the rows of a claimed chunk that are not recorded yet, then completes it.
func (r *Runner) runChunk(ctx context.Context, it store.ClaimedItem) {
	log := r.Logger.With(zap.String("chunk", it.ID))
	var c Chunk
	if err := json.Unmarshal(it.Payload, &c); err != nil || c.BatchID == "" {
		log.Error("a queued chunk names no batch; dropped")
		r.complete(ctx, log, it.Claim)
		return
	}
	j, err := r.Store.GetJob(ctx, c.WorkspaceID, c.BatchID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		r.complete(ctx, log, it.Claim)
		return
	case err != nil:
		r.retry(ctx, log, it, fmt.Errorf("reading the batch: %w", err))
		return
	}
	if jobs.Terminal(j.Status) || j.Status == StatusCancelling || StateOf(j).Ending != "" {
		r.complete(ctx, log, it.Claim)
		return
	}
	if at, err := r.Store.BatchCancelRequested(ctx, j.ID); err != nil || !at.IsZero() {
		if err != nil {
			r.retry(ctx, log, it, err)
		} else {
			r.complete(ctx, log, it.Claim)
		}
		return
	}
	spec, err := SpecOf(j)
	if err != nil {
		log.Error("a batch's spec does not read; its chunk dropped", zap.Error(err))
		r.complete(ctx, log, it.Claim)
		return
	}
	doneIdx, err := r.Store.BatchRowsDone(ctx, j.ID, c.First, c.First+c.Count)
	if err != nil {
		r.retry(ctx, log, it, err)
		return
	}
	if len(doneIdx) >= c.Count {
		r.complete(ctx, log, it.Claim)
		return
	}
	done := make(map[int]bool, len(doneIdx))
	for _, i := range doneIdx {
		done[i] = true
	}
	var dispatch Dispatch
	var b blobs.Store
	if r.Dispatch != nil {
		dispatch = r.Dispatch()
	}
	if r.Blobs != nil {
		b = r.Blobs()
	}
	if dispatch == nil || b == nil {
		r.retry(ctx, log, it, errors.New("no configuration runs batch rows yet (a gateway with a blob store)"))
		return
	}
	err = r.runRows(ctx, it, log, j, spec, c, done, dispatch, b)
	switch {
	case ctx.Err() != nil:
		r.handBack(log, it.Claim)
	case errors.Is(err, store.ErrClaimLost):
		// Its lease ran out and another claim holds the chunk: that one runs what is left.
	case err != nil:
		r.retry(ctx, log, it, err)
	default:
		// Every row ran, or the batch stopped (cancelled, expired) and the rest never will.
		r.complete(ctx, log, it.Claim)
		if r.mayBeLast(it, c, spec) {
			r.pollIfDone(ctx, log, j, spec)
		}
	}
}

// mayBeLast tells whether chunk c (claimed as it) may be the last of its batch to end:
// one of its last chunks, which are claimed last (a batch's chunks are claimed in order,
// at most BatchChunks at once), or one run again (after a failure, a lost lease), which
// may end after them. Counting the rows at every chunk's end would read the batch's
// every row once a chunk; a batch whose last chunk is not caught here (a chunk slower
// than every chunk after it) is polled at its pace.
func (r *Runner) mayBeLast(it store.ClaimedItem, c Chunk, spec Spec) bool {
	per := max(spec.ChunkRows, 1)
	tail := 2 * max(orInt(r.BatchChunks, DefaultBatchChunks), orInt(r.Chunks, DefaultChunks))
	return it.Attempt > 1 || c.First+tail*per >= spec.Rows
}

// pollIfDone makes the poll of batch j due now when every one of its rows is recorded,
// so that it is finalized at once rather than at its next poll (its pace). A failure only
// leaves the batch to its pace.
func (r *Runner) pollIfDone(ctx context.Context, log *zap.Logger, j store.Job, spec Spec) {
	ctx = context.WithoutCancel(ctx)
	counts, err := r.Store.CountBatchRows(ctx, j.ID)
	if err != nil || counts.Done < spec.Rows {
		return
	}
	if err := r.Store.Reschedule(ctx, store.JobQueue(j.Kind), j.ID, time.Time{}); err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			log.Info("making a done batch's poll due failed; its pace polls it", zap.Error(err))
		}
		return
	}
	if r.WakeJobs != nil {
		r.WakeJobs()
	}
}

// runRows runs the rows of chunk c not in done, until they ran or the batch stopped
// (cancelled, expired); its error is one to retry the chunk for, or store.ErrClaimLost.
func (r *Runner) runRows(ctx context.Context, it store.ClaimedItem, log *zap.Logger, j store.Job, spec Spec, c Chunk,
	done map[int]bool, dispatch Dispatch, b blobs.Store) error {
	rc, _, err := b.Open(ctx, files.BlobKey(j.WorkspaceID, spec.InputFileID), c.Offset, -1)
	if err != nil {
		return fmt.Errorf("reading the input file: %w", err)
	}
	defer func() { _ = rc.Close() }()

	// The chunk's share of the reservation: what its rows not yet run were reserved for.
	undone := int64(c.Count - len(done))
	share := int64(0)
	if spec.Rows > 0 {
		share = (spec.EstimatedNanos*undone + int64(spec.Rows) - 1) / int64(spec.Rows)
	}
	budget := rowAdmission{
		budget: r.Ledger.ResumeBatchBudget(j.ReservationID, j.WorkspaceID, j.KeyID, share),
		own:    r.Ledger.Durable(time.Now().Add(orDur(r.RowTimeout, DefaultRowTimeout) + time.Hour)),
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var halted atomic.Bool
	var lost atomic.Bool
	// unrecorded is set when a row ran but its outcome could not be handed to the recorder
	// (its charge could not be read, it panicked): the chunk is run again for it.
	var unrecorded atomic.Bool
	watch := make(chan struct{})
	go func() {
		defer close(watch)
		_ = background.Call("watching chunk "+it.ID, func() { r.watchChunk(runCtx, it.Claim, j.ID, &halted, &lost, stop) })
	}()
	defer func() { stop(); <-watch }()

	rec := startRowRecorder(ctx, r.Store, log)
	rowSlots := make(chan struct{}, orInt(r.RowsPerChunk, DefaultRowsPerChunk))
	provider := r.providerSlots(j.Provider)
	var wg sync.WaitGroup
	errStop := errors.New("stop")
	end := c.First + c.Count
	err = ScanRows(rc, c.Offset, c.First, func(i int, _ int64, l files.BatchLine) error {
		if i >= end || runCtx.Err() != nil || halted.Load() {
			return errStop
		}
		if done[i] {
			return nil
		}
		select {
		case rowSlots <- struct{}{}:
		case <-runCtx.Done():
			return errStop
		}
		select {
		case provider <- struct{}{}:
		case <-runCtx.Done():
			<-rowSlots
			return errStop
		}
		wg.Add(1)
		go func() {
			defer func() { <-provider; <-rowSlots; wg.Done() }()
			handed := false
			if p := background.Call(fmt.Sprintf("running row %d of batch %s", i, j.ID), func() {
				handed = r.runRow(runCtx, log, j, spec, i, l, budget, dispatch, rec)
			}); p != nil {
				log.Error("a batch row panicked; run again with its chunk", zap.Int("row", i), zap.Error(p))
			}
			if !handed && runCtx.Err() == nil {
				unrecorded.Store(true)
			}
		}()
		return nil
	})
	wg.Wait()
	recErr := rec.close()
	if lost.Load() {
		return store.ErrClaimLost
	}
	if recErr != nil {
		// The rows whose write failed are not recorded: the chunk runs them again (each
		// charged once, under its generation id).
		return fmt.Errorf("recording rows: %w", recErr)
	}
	if unrecorded.Load() {
		return errors.New("a row's outcome could not be recorded; the chunk runs it again")
	}
	if err != nil && !errors.Is(err, errStop) {
		return fmt.Errorf("reading the input file: %w", err)
	}
	return nil
}

// watchChunk keeps a running chunk's claim and looks whether its batch was stopped
// (cancelled, expired: halted), until ctx ends. A claim lost (its lease ran out and
// another took it) stops the chunk: the other claim runs its rows.
func (r *Runner) watchChunk(ctx context.Context, c store.Claim, batchID string, halted, lost *atomic.Bool, stop func()) {
	lease := orDur(r.Lease, defaultLease)
	extend := time.NewTicker(lease / 3)
	check := time.NewTicker(cancelCheck)
	defer extend.Stop()
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-extend.C:
			if _, err := r.Store.Extend(ctx, c, lease); errors.Is(err, store.ErrClaimLost) {
				lost.Store(true)
				stop()
				return
			}
		case <-check.C:
			if at, err := r.Store.BatchCancelRequested(ctx, batchID); err == nil && !at.IsZero() {
				// Rows in flight finish; no row more starts.
				halted.Store(true)
			}
		}
	}
}

// rowAdmission admits a row from its chunk's share of the batch's reservation and, when the
// share cannot hold the row's worst case (the estimate, made from a sample of the rows,
// was short for it), from the wallet with a hold of its own, as the same request alone
// would be: the batch goes on while the workspace can pay, and no row is ever free. The
// shares of every chunk add up to the reservation, so that instances sharing a batch never
// admit from it more than it was made for.
type rowAdmission struct {
	budget *billing.BatchBudget
	own    billing.Admission
	// charge, when set, is told what the row's settlement charged.
	charge *rowCharge
}

func (a rowAdmission) Admit(ctx context.Context, r billing.Request) (billing.Hold, error) {
	h, err := a.budget.Admit(ctx, r)
	if errors.Is(err, billing.ErrBudgetExhausted) {
		h, err = a.own.Admit(ctx, r)
	}
	if err != nil || a.charge == nil {
		return h, err
	}
	return chargedHold{Hold: h, charge: a.charge}, nil
}

// rowCharge is what a row's settlement charged, as the store recorded it: the row's
// record takes its cost from there rather than reading the generation back.
type rowCharge struct {
	mu    sync.Mutex
	cost  int64
	known bool
}

func (c *rowCharge) get() (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cost, c.known
}

// chargedHold tells its rowCharge what its settlement charged.
type chargedHold struct {
	billing.Hold
	charge *rowCharge
}

func (h chargedHold) Settle(ctx context.Context, g *store.Generation) (store.Generation, error) {
	stored, err := h.Hold.Settle(ctx, g)
	if err == nil {
		h.charge.mu.Lock()
		h.charge.cost, h.charge.known = stored.CostNanos, true
		h.charge.mu.Unlock()
	}
	return stored, err
}

// runRow runs row i of batch j and hands its outcome to rec, reporting whether it did: not
// when the run was cut short by the process stopping (the chunk is handed back) or its
// charge could not be read (the chunk is run again); either way the row runs again.
func (r *Runner) runRow(ctx context.Context, log *zap.Logger, j store.Job, spec Spec, i int, l files.BatchLine, budget rowAdmission,
	dispatch Dispatch, rec *rowRecorder) (handed bool) {
	genID := RowGenerationID(j.ID, i)
	charge := &rowCharge{}
	adm := budget
	adm.charge = charge
	rowCtx, cancel := context.WithTimeout(ctx, orDur(r.RowTimeout, DefaultRowTimeout))
	status, answer, err := dispatch(rowCtx, j.WorkspaceID, j.KeyID, adm, genID, PathOf(spec.Endpoint), l.Body)
	cancel()
	if ctx.Err() != nil {
		return
	}
	row := store.BatchRow{BatchID: j.ID, Index: i, CustomID: l.CustomID, RequestID: genID}
	switch {
	case err != nil:
		row.ErrorCode, row.ErrorMessage = "row_failed", err.Error()
	default:
		row.StatusCode = status
		if json.Valid(answer) {
			row.Body = answer
		} else {
			row.Body, _ = json.Marshal(string(answer)) // a string is always JSON
		}
	}
	if cost, ok := charge.get(); ok {
		row.CostNanos = cost
	} else if gen, gerr := r.Store.GetGeneration(context.WithoutCancel(ctx), j.WorkspaceID, genID); gerr == nil {
		// Settled otherwise (journaled, or before a crash by an earlier run of the row).
		row.CostNanos = gen.CostNanos
	} else if !errors.Is(gerr, store.ErrNotFound) {
		log.Warn("reading a batch row's charge failed; the row runs again with its chunk", zap.Int("row", i), zap.Error(gerr))
		return false
	}
	rec.add(row)
	return true
}

func (r *Runner) complete(ctx context.Context, log *zap.Logger, c store.Claim) {
	if err := r.Store.Complete(context.WithoutCancel(ctx), c); err != nil && !errors.Is(err, store.ErrClaimLost) {
		log.Error("completing a chunk of batch rows failed", zap.Error(err))
	}
}

func (r *Runner) retry(ctx context.Context, log *zap.Logger, it store.ClaimedItem, cause error) {
	log.Warn("a chunk of batch rows failed; run again later", zap.Error(cause))
	wait := min(time.Duration(it.Attempt)*time.Second, time.Minute)
	if err := r.Store.Retry(context.WithoutCancel(ctx), it.Claim, time.Now().Add(wait), cause.Error()); err != nil && !errors.Is(err, store.ErrClaimLost) {
		log.Error("rescheduling a chunk failed; its lease running out runs it again", zap.Error(err))
	}
}

// handBack makes a chunk cut short by shutdown due again at once, for the next Runner.
func (r *Runner) handBack(log *zap.Logger, c store.Claim) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := r.Store.Requeue(ctx, c, time.Time{}); err != nil && !errors.Is(err, store.ErrClaimLost) {
		log.Info("a chunk cut short by shutdown could not be handed back; its lease running out does", zap.Error(err))
	}
}
