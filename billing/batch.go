package billing

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// BatchBudget is a batch's one reservation, from which its rows are admitted: each row holds
// its worst case on the budget and settles against it (SettleLease with HeldNanos, the
// arithmetic of a key lease), so the reservation shrinks by exactly what each row cost, up
// to its worst case, and nothing else is reserved per row. A row beyond what the budget has
// left is refused (ErrBudgetExhausted): the batch asked for no more.
//
// The reservation has no owner and expires at the batch's horizon: no instance's death
// frees it, and a worker that restarted re-opens it (ResumeBatchBudget).
//
// Invariant, whenever no row's store call is under way:
//
//	reservation amount in the store == remaining + Σ worst case of rows not yet settled
type BatchBudget struct {
	lg          *Ledger
	id          string
	workspaceID string
	keyID       string

	mu        sync.Mutex
	remaining int64
	// charged sums what the rows' settlements took from the reservation.
	charged int64
}

// ErrBudgetExhausted refuses a row whose worst case is more than the batch's budget has
// left. It matches store.ErrInsufficientFunds: to the row's caller it is the same refusal.
var ErrBudgetExhausted = fmt.Errorf("the batch's budget cannot hold the row's worst case: %w", store.ErrInsufficientFunds)

// ReserveBatch reserves amount for a batch of the key's, expiring at expires, with the
// 1.00 USD preflight of any paid call.
func (lg *Ledger) ReserveBatch(ctx context.Context, workspaceID, keyID string, amount int64, expires time.Time) (*BatchBudget, error) {
	sctx, cancel := lg.storeContext(ctx)
	defer cancel()
	res, err := lg.reserve(sctx, store.ReserveParams{
		ID: ids.New("res"), WorkspaceID: workspaceID, KeyID: keyID, AmountNanos: amount,
		MinAvailableNanos: MinPreflightNanos, ExpiresAt: expires,
	})
	if err != nil {
		return nil, err
	}
	return &BatchBudget{lg: lg, id: res.ID, workspaceID: workspaceID, keyID: keyID, remaining: res.AmountNanos}, nil
}

// ResumeBatchBudget re-opens the budget of reservation id after a restart, with remaining
// what it holds (the store's amount: no row is in flight after a restart, its rows being
// re-run or recorded).
func (lg *Ledger) ResumeBatchBudget(id, workspaceID, keyID string, remaining int64) *BatchBudget {
	return &BatchBudget{lg: lg, id: id, workspaceID: workspaceID, keyID: keyID, remaining: remaining}
}

// ID is the budget's reservation id.
func (b *BatchBudget) ID() string { return b.id }

// Remaining is what the budget may still admit.
func (b *BatchBudget) Remaining() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.remaining
}

// Charged sums what the rows settled so far took from the reservation.
func (b *BatchBudget) Charged() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.charged
}

// Admit holds r's worst case on the budget. A row of another workspace or key is refused:
// the reservation, and the key's spending limit it counts against, are the batch's.
func (b *BatchBudget) Admit(ctx context.Context, r Request) (Hold, error) {
	if r.WorkspaceID != b.workspaceID || r.KeyID != b.keyID {
		return nil, errors.New("a batch budget admits only its own key's rows")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.Most > b.remaining {
		return nil, ErrBudgetExhausted
	}
	b.remaining -= r.Most
	return &rowHold{b: b, w: r.Most}, nil
}

// Release drops the budget's reservation, returning what it still holds to the wallet.
// Rows still in flight then fail to settle: release a budget once its rows ended.
func (b *BatchBudget) Release(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.lg.cfg.StoreTimeout)
	defer cancel()
	if _, err := b.lg.cfg.Store.ReleaseReservation(rctx, b.id); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("releasing batch budget %s: %w", b.id, err)
	}
	b.mu.Lock()
	b.remaining = 0
	b.mu.Unlock()
	return nil
}

// rowHold is one row's worst case held on a batch budget.
type rowHold struct {
	b    *BatchBudget
	w    int64
	once settledOnce
}

func (h *rowHold) Most() int64 { return h.w }

func (h *rowHold) Settle(ctx context.Context, g *store.Generation) (store.Generation, error) {
	return h.once.do(h.b.lg, ctx, g, func() (store.Generation, error) {
		b := h.b
		sctx, deadline := context.WithoutCancel(ctx), time.Now().Add(b.lg.cfg.SettleTimeout)
		stored, err := b.lg.settleRetrying(sctx, deadline, g, func(ctx context.Context) (store.Generation, error) {
			return b.lg.cfg.Store.SettleLease(ctx, store.SettleLeaseParams{ReservationID: b.id, HeldNanos: h.w, Generation: g})
		})
		if err != nil {
			// The settlement may have been applied all the same: the row's worst case stays
			// out of what the budget admits, so the budget never admits past what it holds.
			return stored, err
		}
		b.mu.Lock()
		took := min(stored.CostNanos, h.w)
		b.remaining += h.w - took
		b.charged += took
		b.mu.Unlock()
		return stored, nil
	})
}

func (h *rowHold) SettleLater(g *store.Generation) error {
	return h.b.lg.settleLater(journalEntry{ReservationID: h.b.id, Lease: true, HeldNanos: h.w, Generation: *g})
}

func (h *rowHold) Release(ctx context.Context) error {
	// After a failed settlement the lease or budget already took the call's worst case
	// back, or keeps it out for a settlement that may have landed: nothing to release.
	if fresh, _ := h.once.end(); !fresh {
		return nil
	}
	h.b.mu.Lock()
	h.b.remaining += h.w
	h.b.mu.Unlock()
	return nil
}
