// Package billing holds credit for metered work and settles it: admission (where a call's
// credit comes from), holds, the settlement retry loop and the key leases. It knows neither
// HTTP nor Caddy, so that the handlers of a request and the workers of a job (a video polled
// for minutes, a gateway-run batch row) hold and settle credit the same way.
//
// A Hold is credit held for one metered call; an Admission makes one. Four admissions:
//
//   - Reservation: a reservation of the call's own, owned by the instance (freed when it
//     dies) and expiring after the reservation TTL.
//   - KeyLease: admitted in memory from a key's credit lease (lease.go), the hot path.
//   - BatchBudget: rows drawn from a batch's one reservation; each row settles against it
//     (SettleLease with HeldNanos), so the budget shrinks by exactly the rows' costs.
//   - Durable: a reservation owned by no instance, expiring at the job's horizon: no
//     instance's death frees it; the job's end settles or releases it, and a worker that
//     restarted re-opens it from its reservation id (ResumeDurable).
//
// The Ledger is the default admission: a key lease, else a reservation of the call's own.
//
// Where this differs from the sketch in design/async-core.md:
//
//   - Admit takes a Request, not (workspace, key, most): a reservation of the call's own
//     names its generation, endpoint and model, and a lease's in-flight trace names them
//     too, so that a crash before the settlement leaves an interrupted record
//     (store/interrupted.go). Without them every admission would lose that record.
//   - Hold.Settle runs its own retry loop until Config.SettleTimeout, on a context that
//     outlives the caller's: a settlement comes after the upstream worked, and giving up
//     because a client left would withhold what was already paid for upstream.
//   - ResumeDurable and the batch budget take the Ledger, not the store: they settle through
//     the same retry loop and timeouts as every other hold.
//   - Settle is idempotent by generation id within a hold (a second Settle of the same
//     generation returns the record stored); across processes the store's settlement is,
//     and a durable hold whose reservation is gone answers with the generation recorded.
//   - Hold has a fourth method, SettleLater: an answer the client already has is billed
//     even when the store cannot take its charge at its end, through a settlement journal
//     of the Ledger's own (journal.go), one file per settlement on the local disk, for both
//     backends: SQLite's journal covers settlements it acknowledged, not ones it failed, and
//     PostgreSQL has no journal, only the in-flight trace that records an interrupted,
//     uncharged generation.
//   - The Ledger reads its Config at every use rather than copying it, because the host's
//     settings are that Config (the Gateway embeds it) and may be set after the Ledger is.
//   - The charge (charge.go) names its candidate routes and the route taken by provider
//     and upstream model (RouteName), and keeps its failures as records of their own
//     (Failure), not the routes and errors themselves: a route is the handlers' (its
//     adapter, breaker and policy), an upstream error may wrap a transport's, and neither
//     goes into a job row. A job is pinned to the route that created it.
//   - AdmitInto is the default admission with the lease hold kept in the caller's storage:
//     the hot path makes no allocation for its hold, as it made none before holds existed.
package billing

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// MinPreflightNanos is the spec's 1.00 USD credit check before every paid call.
const MinPreflightNanos = store.NanosPerUSD

// Hold is credit held for one metered call (a request, a batch row, a job).
type Hold interface {
	// Most is what the hold holds for the call, in nanodollars: its worst case.
	Most() int64
	// Settle charges the generation's cost, records it and ends the hold, in one store
	// transaction retried while the store cannot be reached. Settling the same generation
	// id again returns the first result. g is the store's from the call on.
	Settle(ctx context.Context, g *store.Generation) (store.Generation, error)
	// Release ends the hold unsettled: what it held goes back to where it came from.
	Release(ctx context.Context) error
	// SettleLater journals the settlement of g durably, to be applied once the store takes
	// it (journal.go): for an answer the client has, whose Settle failed. g must be built
	// anew, not the one given to the failed Settle, which the store owns.
	SettleLater(g *store.Generation) error
}

// Request is what an admission needs to know of the call it admits.
type Request struct {
	WorkspaceID string
	KeyID       string
	// Most is the call's worst case, the credit to hold.
	Most int64
	// GenerationID, Endpoint and Model name the call, for the interrupted record a crash
	// before its settlement leaves.
	GenerationID string
	Endpoint     string
	Model        string
	Start        time.Time
}

// Admission decides where a call's credit comes from.
type Admission interface {
	Admit(ctx context.Context, r Request) (Hold, error)
}

// Config is what billing needs of its host. The Ledger reads it at every use, so a host
// may keep it as its own settings (the handlers' Gateway embeds it).
type Config struct {
	Store  store.Store
	Logger *zap.Logger
	// Now is the clock; tests inject their own.
	Now func() time.Time
	// ReservationTTL is how long a reservation lives if its call never settles (a crash).
	ReservationTTL time.Duration
	// LeaseLinger keeps a key's credit lease open this long after its last call settled,
	// so that the key's next call is admitted without a store write; 0 drops a lease with
	// its last call in flight (lease.go).
	LeaseLinger time.Duration
	// StoreTimeout bounds each store call a call waits for before its upstream call (the
	// credit reservation and the balance read it may need).
	StoreTimeout time.Duration
	// SettleTimeout bounds a settlement, tried again meanwhile while the store cannot be
	// reached.
	SettleTimeout time.Duration
	// Owner is the instance whose heartbeat keeps the reservations of calls and leases
	// (store.Instance); nil: they have no owner, and only their expiry frees them after a
	// crash.
	Owner *store.Instance
	// JournalDir is where settlements that failed for answers already delivered are kept
	// until the store takes them (journal.go); empty: no journal, and such a charge is
	// logged and lost.
	JournalDir string
}

// Ledger admits and settles credit for one host (a Gateway). It is the default admission:
// a key lease, else a reservation of the call's own.
type Ledger struct {
	cfg     *Config
	leases  *leaseTable
	unsure  unsureReservations
	journal journalState
}

// journalState is the journal loop's: running while entries are left, stopped by Close.
type journalState struct {
	mu         sync.Mutex
	running    bool
	closed     bool
	stop, done chan struct{}
}

// NewLedger returns a Ledger over cfg, which must outlive it; its zero durations and nil
// clock and logger must have been filled by the host.
func NewLedger(cfg *Config) *Ledger {
	return &Ledger{cfg: cfg, leases: newLeaseTable(), journal: journalState{stop: make(chan struct{})}}
}

// Admit admits r from the key's lease, else with a reservation of its own.
func (l *Ledger) Admit(ctx context.Context, r Request) (Hold, error) {
	if h := l.admitLease(ctx, r); h != nil {
		return h, nil
	}
	return l.reserveOwn(ctx, r, l.cfg.Owner.ID(), l.cfg.Now().Add(l.cfg.ReservationTTL))
}

// AdmitInto is Admit with the lease hold, when a lease admits r, written into lease
// rather than allocated: a host that keeps its per-call state on the heap keeps the hold
// of the hot path there. lease must be a zero LeaseHold that outlives the hold.
func (l *Ledger) AdmitInto(ctx context.Context, r Request, lease *LeaseHold) (Hold, error) {
	if l.admitLeaseInto(ctx, r, lease) {
		return lease, nil
	}
	return l.reserveOwn(ctx, r, l.cfg.Owner.ID(), l.cfg.Now().Add(l.cfg.ReservationTTL))
}

// Unheld is the hold of a call that holds nothing (a free model): its settlement records
// the generation and charges what it cost, which is nothing unless the host prices it.
func (l *Ledger) Unheld() Hold { return &ReservationHold{l: l} }

// KeyLease admits only from the key's credit lease; ErrNoLease when it cannot (the call
// is too large for a lease, the wallet or the key's limit refused one, the Ledger closed).
func (l *Ledger) KeyLease() Admission { return keyLease{l} }

// Reservation admits each call with a reservation of its own, owned by the Ledger's
// instance and expiring after the reservation TTL.
func (l *Ledger) Reservation() Admission { return reservation{l} }

// Durable admits a call with a reservation owned by no instance and expiring at expires
// (the job's horizon): no instance's death releases it; its Settle or Release, or its
// expiry, does.
func (l *Ledger) Durable(expires time.Time) Admission { return durable{l, expires} }

// ErrNoLease refuses a call that KeyLease cannot admit from a lease.
var ErrNoLease = errors.New("no credit lease admits the call")

type keyLease struct{ l *Ledger }

func (a keyLease) Admit(ctx context.Context, r Request) (Hold, error) {
	if h := a.l.admitLease(ctx, r); h != nil {
		return h, nil
	}
	return nil, ErrNoLease
}

type reservation struct{ l *Ledger }

func (a reservation) Admit(ctx context.Context, r Request) (Hold, error) {
	return a.l.reserveOwn(ctx, r, a.l.cfg.Owner.ID(), a.l.cfg.Now().Add(a.l.cfg.ReservationTTL))
}

type durable struct {
	l       *Ledger
	expires time.Time
}

func (a durable) Admit(ctx context.Context, r Request) (Hold, error) {
	return a.l.reserveOwn(ctx, r, "", a.expires)
}

// ResumeDurable re-opens the durable hold of reservation id, of worst case most, after a
// restart: its Settle and Release act on the reservation as the hold that took it would.
// A reservation that no longer exists (released, expired, settled) makes Settle fail with
// store.ErrNotFound, unless that generation was settled already, whose record it returns.
func (l *Ledger) ResumeDurable(reservationID string, most int64) *ReservationHold {
	return &ReservationHold{l: l, id: reservationID, most: most}
}

// reserveOwn reserves r.Most for r alone, bounded by StoreTimeout. Its errors are the
// store's: store.ErrInsufficientFunds, a *store.KeyLimitError, or a failure to reach it.
func (l *Ledger) reserveOwn(ctx context.Context, r Request, owner string, expires time.Time) (*ReservationHold, error) {
	sctx, cancel := context.WithTimeout(ctx, l.cfg.StoreTimeout)
	defer cancel()
	res, err := l.reserve(sctx, store.ReserveParams{
		ID:                ids.New("res"),
		WorkspaceID:       r.WorkspaceID,
		KeyID:             r.KeyID,
		Owner:             owner,
		AmountNanos:       r.Most,
		MinAvailableNanos: MinPreflightNanos,
		ExpiresAt:         expires,
		GenerationID:      r.GenerationID,
		Endpoint:          r.Endpoint,
		Model:             r.Model,
	})
	if err != nil {
		return nil, err
	}
	return &ReservationHold{l: l, id: res.ID, most: r.Most}, nil
}

// ReservationHold is a call's reservation of its own (or none, for a call that holds
// nothing): its settlement ends the reservation.
type ReservationHold struct {
	l    *Ledger
	id   string
	most int64
	once settledOnce
}

// ID is the reservation's id, empty for a hold of nothing.
func (h *ReservationHold) ID() string { return h.id }

func (h *ReservationHold) Most() int64 { return h.most }

func (h *ReservationHold) Settle(ctx context.Context, g *store.Generation) (store.Generation, error) {
	return h.once.do(h.l, ctx, g, func() (store.Generation, error) {
		ws, id := g.WorkspaceID, g.ID
		sctx, deadline := context.WithoutCancel(ctx), time.Now().Add(h.l.cfg.SettleTimeout)
		stored, err := h.l.settleRetrying(sctx, deadline, g, func(ctx context.Context) (store.Generation, error) {
			return h.l.cfg.Store.Settle(ctx, store.SettleParams{ReservationID: h.id, Generation: g})
		})
		if errors.Is(err, store.ErrNotFound) && h.id != "" && id != "" {
			// The reservation is gone: a worker that settled it before it was killed, and
			// now settles it again, gets the record it made. The interrupted record of a
			// reservation swept unsettled is no settlement: that stays an error.
			gctx, cancel := context.WithTimeout(sctx, h.l.cfg.StoreTimeout)
			defer cancel()
			if got, gerr := h.l.cfg.Store.GetGeneration(gctx, ws, id); gerr == nil && got.ErrorCode != store.InterruptedCode {
				return got, nil
			}
		}
		return stored, err
	})
}

// Release drops the reservation, also after a settlement that failed (an answer withheld
// because its charge could not be recorded): its reservation is then still there, or was
// consumed by a settlement that landed unanswered, which the release then does not find.
func (h *ReservationHold) Release(ctx context.Context) error {
	if fresh, failed := h.once.end(); h.id == "" || !fresh && !failed {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.l.cfg.StoreTimeout)
	defer cancel()
	_, err := h.l.cfg.Store.ReleaseReservation(rctx, h.id)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		if maybeApplied(err) {
			h.l.releaseUnsure(h.id, h.l.cfg.Now().Add(h.l.cfg.ReservationTTL))
		}
		return fmt.Errorf("releasing reservation %s: %w", h.id, err)
	}
	return nil
}

func (h *ReservationHold) SettleLater(g *store.Generation) error {
	return h.l.settleLater(journalEntry{ReservationID: h.id, Generation: *g})
}

// settledOnce makes a hold's settlement idempotent by generation id: the first settlement
// of a generation runs, later ones of the same id get its result, and a hold ended by one
// generation refuses another (and a Release after a settlement does nothing).
//
// It keeps the generation's id, not its record: a hold is made per call on the hot path, and
// a repeated settlement, rare, reads the record back from the store.
type settledOnce struct {
	mu       sync.Mutex
	ended    bool
	released bool
	genID    string
	err      error
}

var errHoldEnded = errors.New("the hold was already settled or released")

func (o *settledOnce) do(l *Ledger, ctx context.Context, g *store.Generation, settle func() (store.Generation, error)) (store.Generation, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ended {
		if g.ID == "" || g.ID != o.genID {
			return store.Generation{}, errHoldEnded
		}
		if o.err != nil {
			return store.Generation{}, o.err
		}
		gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.StoreTimeout)
		defer cancel()
		return l.cfg.Store.GetGeneration(gctx, g.WorkspaceID, g.ID)
	}
	o.ended, o.genID = true, g.ID
	var stored store.Generation
	stored, o.err = settle()
	return stored, o.err
}

// end marks the hold ended by a release. fresh: nothing settled or released it before;
// failed: a settlement failed before, and nothing released it since.
func (o *settledOnce) end() (fresh, failed bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.released {
		return false, false
	}
	o.released = true
	if o.ended {
		return false, o.err != nil
	}
	o.ended = true
	return true, false
}
