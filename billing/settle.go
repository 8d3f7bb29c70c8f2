package billing

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/internal/background"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Settlement retries.
//
// A settlement comes after the upstream answered: giving up on it withholds an answer
// already paid for upstream. So while the store cannot be reached (store.ErrUnavailable,
// or a try that outlived StoreTimeout, given up for a new connection), it is tried again,
// backing off from settleRetry to settleRetryMax, until SettleTimeout. A try that failed so
// may have been applied all the same (its commit reached the server, the answer did not come
// back): the store answers the next with the generation as stored (settlement is
// idempotent by generation id, store.Wallet.Settle). Nothing is charged twice.
const (
	settleRetry    = 50 * time.Millisecond
	settleRetryMax = time.Second
)

// settleRetrying runs settle, one settlement of gen, until it succeeds, fails for good,
// ctx ends or deadline passes. gen is read before the first try only (the store owns it
// from then on). Each try is bounded by StoreTimeout or what is left until deadline,
// whichever is shorter: the deadline is a time rather than a context of its own, so that a
// settlement the store acknowledges at once (a journaled one) makes one timer, not two.
func (lg *Ledger) settleRetrying(ctx context.Context, deadline time.Time, gen *store.Generation, settle func(ctx context.Context) (store.Generation, error)) (store.Generation, error) {
	id := gen.ID
	unsure := false
	var err error
	for wait := settleRetry; ; wait = min(2*wait, settleRetryMax) {
		left := time.Until(deadline)
		if left <= 0 {
			if err == nil {
				err = context.DeadlineExceeded
			}
			return store.Generation{}, err
		}
		tctx, cancel := context.WithTimeout(ctx, min(lg.cfg.StoreTimeout, left))
		var stored store.Generation
		stored, err = settle(tctx)
		cancel()
		if err == nil {
			return stored, nil
		}
		if !maybeApplied(err) || ctx.Err() != nil {
			return store.Generation{}, err
		}
		if !unsure {
			lg.cfg.Logger.Warn("settling a generation failed; trying again", zap.String("generation_id", id), zap.Error(err))
		}
		unsure = true
		select {
		case <-ctx.Done():
			return store.Generation{}, err
		case <-time.After(min(wait, time.Until(deadline))):
		}
	}
}

// maybeApplied tells a store call that failed without the store's answer (it may or may
// not have been applied) from one the store refused.
func maybeApplied(err error) bool {
	return errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// Reservations whose Reserve failed without an answer.
//
// A Reserve given up after StoreTimeout, or whose connection was lost, may have committed
// all the same: nothing would use or release that hold, which its owner would keep until
// its expiry, hours later. The gateway makes reservation ids, so it releases such a hold
// in the background, trying every unsureRetry until the store answers (or the reservation
// expires). Beyond unsureMax ids waiting, during a long outage, the rest wait for their
// expiry, or for their owner's clean stop (store.Instance), which releases them.
const (
	unsureRetry = time.Second
	unsureMax   = 10_000
)

type unsureReservations struct {
	mu     sync.Mutex
	ids    map[string]time.Time // reservation id → its expiry
	closed bool
	// stop ends the worker, which closes done once it returned; nil when none runs.
	stop, done chan struct{}
}

// reserve is Store.Reserve, with a hold that may have been taken unbeknown released later.
func (lg *Ledger) reserve(ctx context.Context, p store.ReserveParams) (store.Reservation, error) {
	res, err := lg.cfg.Store.Reserve(ctx, p)
	if err != nil && maybeApplied(err) {
		lg.releaseUnsure(p.ID, p.ExpiresAt)
	}
	return res, err
}

func (lg *Ledger) releaseUnsure(id string, expires time.Time) {
	u := &lg.unsure
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed || len(u.ids) >= unsureMax {
		return
	}
	if u.ids == nil {
		u.ids = map[string]time.Time{}
	}
	u.ids[id] = expires
	if u.stop == nil {
		u.stop, u.done = make(chan struct{}), make(chan struct{})
		stop := u.stop
		background.Loop{Name: "unsure reservation release", Report: lg.reportPanic, Stop: stop, Done: u.done}.Go(func() { lg.releaseUnsureLoop(stop) })
	}
}

// releaseUnsureLoop releases the unsure reservations until none is left or stop is
// closed. It runs again after a panic (a background.Loop), and takes u.mu only around map
// operations, never across a store call.
func (lg *Ledger) releaseUnsureLoop(stop chan struct{}) {
	u := &lg.unsure
	tick := time.NewTicker(unsureRetry)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		u.mu.Lock()
		pending := make([]string, 0, len(u.ids))
		for id := range u.ids {
			pending = append(pending, id)
		}
		u.mu.Unlock()
		for _, id := range pending {
			ctx, cancel := lg.storeContext(context.Background())
			_, err := lg.cfg.Store.ReleaseReservation(ctx, id)
			cancel()
			if maybeApplied(err) {
				break // the store is still away: the next round tries again
			}
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				lg.cfg.Logger.Warn("releasing a reservation whose Reserve failed", zap.String("reservation_id", id), zap.Error(err))
			}
			u.mu.Lock()
			delete(u.ids, id)
			u.mu.Unlock()
		}
		now := time.Now()
		u.mu.Lock()
		for id, expires := range u.ids {
			if now.After(expires) {
				delete(u.ids, id)
			}
		}
		if len(u.ids) == 0 {
			u.stop = nil
			u.mu.Unlock()
			return
		}
		u.mu.Unlock()
	}
}

// close stops the worker: what it still holds is the Owner's, released when it stops.
func (u *unsureReservations) close() {
	u.mu.Lock()
	u.closed = true
	stop, done := u.stop, u.done
	u.stop = nil
	u.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

func (lg *Ledger) storeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, lg.cfg.StoreTimeout)
}
