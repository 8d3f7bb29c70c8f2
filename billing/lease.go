package billing

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/internal/background"
	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Credit leases.
//
// A paid request used to make two durable writes: Reserve of its worst case W before the
// upstream call and Settle after. A lease turns the first into an in-memory step: one
// store reservation of L nanos (with the key's id, so the key's spending limit counts all
// of it), held by one Ledger for one (workspace, key), from which requests are admitted
// under a mutex: a request of worst case W is admitted if lease.remaining >= W, and then
// remaining -= W. Its settlement (SettleLease) charges the cost C, records the generation
// and shrinks the reservation by min(C, W) in one transaction; in memory the request's
// W - min(C, W) goes back to remaining. A cost above W is charged from the balance, exactly
// as Settle charges a cost above its reservation, never from the hold of other requests.
//
// Invariant, per lease, whenever no store call of the lease is in progress:
//
//	reservation amount in the store == remaining + Σ W of the lease's requests not yet settled
//
// (admission moves W from remaining to the in-flight sum; settlement takes min(C, W) from
// both the store and the in-flight W, and returns the rest to remaining). So every
// request admitted from a lease is covered by held credit exactly as by a reservation of
// its own, and the wallet can never be overspent: the store refuses the lease unless the
// wallet (and the key's limit) can hold all of L.
//
// Size: L = min(max(leaseMultiple × W, leaseFloorNanos), leaseMaxNanos) of the request that
// takes the lease. A lease is only taken when L > W and the wallet has at least leaseMinAvailableNanos
// available (the Reserve's MinAvailableNanos). The spec's 1.00 USD preflight is therefore
// checked when a lease is taken, not for each request it admits: a request is admitted
// only if, when its lease was taken, at least max(L, 10 USD) >= 1 USD was available.
// Small wallets: when the wallet has less than leaseMinAvailableNanos available, the lease
// is sized from its balance instead: L = min(the size above, (available − 1 USD) / 2),
// reserved with MinAvailableNanos = L + 1 USD, and only if L >= 2W. After it, the wallet
// still has at least the 1.00 USD preflight available besides what the lease holds, so the
// preflight holds exactly for every request the lease admits (the lease's charges come out
// of its hold, not out of what is available), and the other keys of the workspace keep the
// other half. Without it, every request of a small wallet made two writes a caller waits
// for, and the single writer capped such a workspace at about half of Caddy's throughput.
// A key found with a small wallet sizes its next leases from the balance for leaseMaxAge
// without asking for a full lease first.
// Whenever the store refuses a lease (ErrInsufficientFunds, or the key's limit), the
// request falls back to a reservation of its own, exactly as before leases (the same
// 1.00 USD preflight, the same 402 and 429 answers), and the key does not try a lease
// again for leaseRefusalBackoff. Wallets with less than 1 USD + 4W available therefore
// never see leases.
//
// Lifecycle: a lease admits for at most leaseMaxAge. When it cannot admit a request (too
// little remaining, too old), it is retired: it admits nothing more, a new lease is taken,
// and the old one keeps serving its requests in flight. A lingering lease is normally
// replaced before that, by a lease taken ahead in the background (Renewal ahead, below).
// A retired lease is dropped as soon as it has no request in flight: the settlement of its
// last request drops the reservation in the same transaction (SettleLease with Release),
// or, when two settlements race to be last, one extra ReleaseReservation does (or, for a
// lease replaced by one taken ahead with nothing in flight, leaseTaken). The key's current
// lease is dropped the same way when Config.LeaseLinger is 0; otherwise it stays open
// until no request was admitted from it for LeaseLinger (the janitor retires and drops
// it), so that a key sending one request at a time does not take a lease, one store write
// in its latency, for every request. So a gateway quiet for LeaseLinger (plus a janitor
// tick) holds no leases and GET /credits shows reserved_nanos exactly as before: only
// requests in flight hold credit, plus (while requests of the key are in flight or
// within LeaseLinger of the last one) the unused rest of their leases:
// at most leaseMaxNanos per lease, one admitting lease per key and Ledger plus retired
// ones still draining. A janitor goroutine retries releases that failed and retires leases
// idle for leaseIdle; Close releases everything.
//
// Precision at the edge: while a lease has requests in flight, its unused rest is held,
// so near an empty wallet or a key's limit a request may be refused (402, 429) up to that
// rest earlier than without leases: the rest is smaller than the W of the request that
// found the lease short, or, for a lease of another instance or an unretired one, at most
// leaseMaxNanos. Holding more than needed never lets anything be overspent. The 429's
// reserved figure (and GET /key's reserved_nanos) counts the lease's whole hold.
//
// leaseMultiple is 64 so that a lease admits more requests than a key usually has in
// flight: a smaller lease drains before the next one is taken, and every request waiting
// for that Reserve stalls for one commit. leaseFloorNanos (1 USD, a tenth of the least a
// wallet has when a lease is taken) keeps cheap requests from renewing their lease every
// 64 requests: a request of a small model at 64 output tokens has a worst case of a few
// hundred-thousandths of a dollar, and a lease of 64 of them lasted milliseconds under load.
//
// Crash: a lease's reservation, like a request's own, names the Ledger's Owner, whose
// heartbeat keeps it: once the process is dead, another instance (or the gateway
// restarted) releases it within the owner's instance timeout (store.Instance). A lease
// admits only while its owner Holds, one heartbeat before others may take the owner for
// dead, and only in the owner generation it was taken in. Without an owner, a lease's
// reservation expires leaseMaxAge + ReservationTTL after it was taken, so every request it
// admitted keeps at least ReservationTTL of cover, as a reservation of its own had.
const (
	leaseMultiple          = 64
	leaseFloorNanos        = store.NanosPerUSD
	leaseMaxNanos          = 10 * store.NanosPerUSD
	leaseMinAvailableNanos = 10 * store.NanosPerUSD
	leaseMaxAge            = 60 * time.Second
	leaseIdle              = 10 * time.Second
	leaseRefusalBackoff    = 2 * time.Second
	leaseJanitorInterval   = 2 * time.Second
	leaseStoreTimeout      = 30 * time.Second
	// leaseRenewAhead: a lingering lease is renewed in the background this long before it
	// reaches leaseMaxAge (see renewDue).
	leaseRenewAhead = 10 * time.Second
)

// The lease sizes and ages above, for callers that reason about leases (tests, diagnostics).
const (
	LeaseMinAvailableNanos = leaseMinAvailableNanos
	LeaseMaxAge            = leaseMaxAge
	LeaseRenewAhead        = leaseRenewAhead
	LeaseRefusalBackoff    = leaseRefusalBackoff
)

type leaseKey struct{ workspace, key string }

// lease is one store reservation admitting requests of one key. Its fields are guarded by
// leaseTable.mu.
type lease struct {
	id        string
	k         leaseKey
	amount    int64 // the reservation's amount when taken
	remaining int64
	// unsettled counts admitted requests whose settlement has not returned; inflightNanos
	// sums their W.
	unsettled     int
	inflightNanos int64
	created       time.Time
	lastAdmit     time.Time
	// gen is the generation of the Ledger's Owner the reservation was taken in: one taken
	// in an earlier generation was released when the owner was taken for dead.
	gen uint64
	// renewAfter: a renewal ahead failed; the next one waits until then (renewDue).
	renewAfter time.Time
	// retired leases admit nothing more; releasing is set while a release is under way;
	// gone once the reservation no longer exists.
	retired, releasing, gone bool
}

// leaseTable holds a Ledger's leases.
type leaseTable struct {
	mu        sync.Mutex
	cur       map[leaseKey]*lease
	all       map[*lease]struct{}
	acquiring map[leaseKey]chan struct{}
	refused   map[leaseKey]time.Time
	// small remembers keys whose wallet was too small for a full lease, until when: their
	// next lease is sized from the balance without asking for a full one first.
	small  map[leaseKey]time.Time
	closed bool
	// janitor runs while leases exist; wake tells it to look again, janitorDone is closed
	// when it returns.
	janitor     bool
	wake        chan struct{}
	janitorDone chan struct{}
	// renewals are the leases being taken ahead in the background (renewLease); Close
	// waits for them.
	renewals sync.WaitGroup
}

func newLeaseTable() *leaseTable {
	return &leaseTable{
		cur: map[leaseKey]*lease{}, all: map[*lease]struct{}{}, acquiring: map[leaseKey]chan struct{}{},
		refused: map[leaseKey]time.Time{}, small: map[leaseKey]time.Time{}, wake: make(chan struct{}, 1),
	}
}

// LeaseSize is the size of the lease a call of worst case w takes; 0 when it takes none.
func LeaseSize(w int64) int64 { return leaseTarget(w) }

// leaseTarget is the size of a lease taken by a request of worst case w; 0 when a lease
// would not admit more than the request itself.
func leaseTarget(w int64) int64 {
	switch {
	case w <= 0 || w >= leaseMaxNanos:
		return 0
	case w >= leaseMaxNanos/leaseMultiple:
		return leaseMaxNanos
	}
	return max(w*leaseMultiple, leaseFloorNanos)
}

// retire stops l admitting. Callers hold t.mu.
func (t *leaseTable) retire(l *lease) {
	l.retired = true
	if t.cur[l.k] == l {
		delete(t.cur, l.k)
	}
}

// admitLease admits r from its key's lease, with the in-flight trace that lets a crash
// before its settlement leave an interrupted record; nil when no lease admits it.
func (lg *Ledger) admitLease(ctx context.Context, r Request) *LeaseHold {
	h := new(LeaseHold)
	if !lg.admitLeaseInto(ctx, r, h) {
		return nil
	}
	return h
}

// admitLeaseInto is admitLease into h, which the caller keeps.
func (lg *Ledger) admitLeaseInto(ctx context.Context, r Request, h *LeaseHold) bool {
	l := lg.admitFromLease(ctx, r.WorkspaceID, r.KeyID, r.Most)
	if l == nil {
		return false
	}
	h.lg, h.lease, h.w = lg, l, r.Most
	// Nothing durable names the request until it settles: the trace lets a crash before
	// then leave an interrupted record (store/interrupted.go).
	h.inflight = lg.cfg.Store.BeginInFlight(store.InFlight{
		GenerationID: r.GenerationID, WorkspaceID: r.WorkspaceID, KeyID: r.KeyID, Endpoint: r.Endpoint,
		Model: r.Model, ReservationID: l.id, Owner: lg.cfg.Owner.ID(), StartedAt: r.Start,
	})
	return true
}

// LeaseHold is a call admitted from a key's lease: its worst case w held on the lease.
type LeaseHold struct {
	lg    *Ledger
	lease *lease
	w     int64
	// inflight is the store's token for the call's trace.
	inflight uint64
	once     settledOnce
}

// ReservationID is the lease's reservation, shared by every call the lease admits.
func (h *LeaseHold) ReservationID() string { return h.lease.id }

func (h *LeaseHold) Most() int64 { return h.w }

func (h *LeaseHold) Settle(ctx context.Context, g *store.Generation) (store.Generation, error) {
	return h.once.do(h.lg, ctx, g, func() (store.Generation, error) {
		sctx, deadline := context.WithoutCancel(ctx), time.Now().Add(h.lg.cfg.SettleTimeout)
		stored, err := h.lg.settleLease(sctx, deadline, h.lease, h.w, g)
		h.lg.cfg.Store.EndInFlight(h.inflight)
		return stored, err
	})
}

// SettleLater journals the call's settlement against the lease's reservation. The lease
// itself, whose settlement failed, no longer admits (settleLease).
func (h *LeaseHold) SettleLater(g *store.Generation) error {
	return h.lg.settleLater(journalEntry{ReservationID: h.lease.id, Lease: true, HeldNanos: h.w, Generation: *g})
}

// Release returns the call's worst case to the lease, dropping the lease when it was the
// last call in flight on a retired one.
func (h *LeaseHold) Release(ctx context.Context) error {
	// After a failed settlement the lease or budget already took the call's worst case
	// back, or keeps it out for a settlement that may have landed: nothing to release.
	if fresh, _ := h.once.end(); !fresh {
		return nil
	}
	lg, l := h.lg, h.lease
	t := lg.leases
	t.mu.Lock()
	l.unsettled--
	l.inflightNanos -= h.w
	l.remaining += h.w
	drop := l.unsettled == 0 && !l.gone && !l.releasing && (l.retired || lg.cfg.LeaseLinger <= 0)
	if drop {
		t.retire(l)
		l.releasing = true
	}
	t.mu.Unlock()
	if drop {
		lg.releaseLease(ctx, l)
	}
	lg.cfg.Store.EndInFlight(h.inflight)
	return nil
}

// admitFromLease admits a request of worst case w from the key's lease, taking a new lease
// if needed. nil means no lease: the request reserves for itself.
//
// ctx is the request's: the store calls of taking a lease are bounded by StoreTimeout here,
// so that a request admitted from memory, the common case, makes no timer.
func (lg *Ledger) admitFromLease(ctx context.Context, workspaceID, keyID string, w int64) *lease {
	target := leaseTarget(w)
	if target <= w {
		return nil
	}
	t := lg.leases
	k := leaseKey{workspaceID, keyID}
	for {
		now := lg.cfg.Now()
		// An owner that may have been taken for dead (no heartbeat recorded lately) may
		// have lost its leases' reservations to another instance's sweep: none admits, and
		// requests reserve for themselves until the heartbeat is recorded again.
		gen, holds := lg.cfg.Owner.Holds()
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return nil
		}
		if l := t.cur[k]; l != nil {
			if holds && l.gen == gen && l.remaining >= w && now.Sub(l.created) < leaseMaxAge {
				l.remaining -= w
				l.unsettled++
				l.inflightNanos += w
				l.lastAdmit = now
				if lg.renewDue(l, now) {
					lg.renewLease(k, w, target, now, gen)
				}
				t.mu.Unlock()
				return l
			}
			// It keeps serving its requests in flight; the last one's settlement drops it.
			t.retire(l)
		}
		if !holds || t.refusedAt(k, now) {
			t.mu.Unlock()
			return nil
		}
		if ch := t.acquiring[k]; ch != nil {
			// Another request is taking the key's lease: wait for it rather than take one more.
			t.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil
			}
		}
		ch, knownSmall := t.startAcquiring(k, now)
		t.mu.Unlock()

		sctx, cancel := lg.storeContext(ctx)
		res, small, err := lg.takeLease(sctx, workspaceID, keyID, w, target, now, knownSmall)
		l := lg.leaseTaken(sctx, k, ch, w, now, gen, res, small, err)
		cancel()
		return l
	}
}

// refusedAt reports whether key k is in its refusal backoff at now, forgetting a backoff
// that has ended. Callers hold t.mu.
func (t *leaseTable) refusedAt(k leaseKey, now time.Time) bool {
	until, ok := t.refused[k]
	if ok && !now.Before(until) {
		delete(t.refused, k)
		return false
	}
	return ok
}

// startAcquiring marks key k's next lease as being taken, and returns the channel closed
// when it is (leaseTaken) and whether the key's wallet is known to be too small for a full
// lease, forgetting that once it is no longer known. Callers hold t.mu.
func (t *leaseTable) startAcquiring(k leaseKey, now time.Time) (ch chan struct{}, knownSmall bool) {
	ch = make(chan struct{})
	t.acquiring[k] = ch
	knownSmall = now.Before(t.small[k])
	if !knownSmall {
		delete(t.small, k)
	}
	return ch, knownSmall
}

// leaseTaken installs the lease takeLease returned as key k's current one, admitting w
// from it (0 for a lease taken ahead), and ends the acquisition ch; nil when there is none
// (the store refused it, or the Ledger closed meanwhile). gen is the Owner's generation
// when the lease was asked for.
func (lg *Ledger) leaseTaken(ctx context.Context, k leaseKey, ch chan struct{}, w int64, now time.Time, gen uint64, res store.Reservation, small bool, err error) *lease {
	t := lg.leases
	t.mu.Lock()
	delete(t.acquiring, k)
	close(ch)
	if small {
		t.small[k] = now.Add(leaseMaxAge)
	} else if err == nil {
		delete(t.small, k)
	}
	if err != nil {
		refused := errors.Is(err, store.ErrInsufficientFunds) || errors.Is(err, store.ErrKeyLimitExceeded)
		switch {
		case refused:
			t.refused[k] = now.Add(leaseRefusalBackoff)
		case w == 0:
			// A renewal ahead that failed is not tried again by every request admitted
			// meanwhile; the current lease admits on, and a request that finds it short
			// takes the next one itself.
			if cur := t.cur[k]; cur != nil {
				cur.renewAfter = lg.cfg.Now().Add(leaseRefusalBackoff)
			}
			lg.cfg.Logger.Warn("renewing a credit lease failed", zap.Error(err))
		case ctx.Err() == nil:
			lg.cfg.Logger.Warn("taking a credit lease failed; reserving per request", zap.Error(err))
		}
		t.mu.Unlock()
		return nil
	}
	if t.closed {
		t.mu.Unlock()
		lg.releaseLeaseReservation(res.ID)
		return nil
	}
	l := &lease{id: res.ID, k: k, amount: res.AmountNanos, remaining: res.AmountNanos - w, created: now, lastAdmit: now, gen: gen}
	if w > 0 {
		l.unsettled, l.inflightNanos = 1, w
	}
	var drop *lease
	if old := t.cur[k]; old != nil {
		t.retire(old)
		// A lease taken ahead replaces one that may have nothing in flight: nothing will
		// settle to drop it.
		if old.unsettled == 0 && !old.gone && !old.releasing {
			old.releasing = true
			drop = old
		}
	}
	t.cur[k] = l
	t.all[l] = struct{}{}
	if !t.janitor {
		t.janitor = true
		t.janitorDone = make(chan struct{})
		background.Loop{Name: "credit lease janitor", Report: lg.reportPanic, Done: t.janitorDone}.Go(lg.leaseJanitor)
	}
	t.mu.Unlock()
	if drop != nil {
		lg.releaseLease(ctx, drop)
	}
	return l
}

// Renewal ahead.
//
// A request that finds its key's lease short takes the next one, and every request of the
// key that arrives meanwhile waits for that Reserve: one commit of the writer, or, when the
// writer is in the middle of a transaction that checkpoints the database, 10-20 ms. At
// 1,000 requests a second (gatewaybench), the 4-6 requests around each renewal took 2-7 ms,
// a tenth of the slowest percent of their arm's requests. So a lingering lease (LeaseLinger
// > 0: a key that keeps sending) is renewed before it runs short: once its remaining credit
// falls below a quarter of its amount, or leaseRenewAhead before leaseMaxAge, the request
// that sees it starts taking the next lease in the background and is admitted from the
// current one; the next lease replaces it when the store has it. Requests wait only if the
// current lease runs dry (or old) before that, as they did before.
//
// The key holds two leases meanwhile: the rest of the current one (at most a quarter of it,
// or whatever is left in its last leaseRenewAhead) and the new one. Near an empty wallet,
// a request may so be refused up to that rest earlier (the precision note above); the
// wallet still can never be overspent, each lease being a reservation the store granted.
// A renewal the store refuses sets the key's refusal backoff: the current lease admits
// until it is short, and requests then reserve for themselves, as without leases. One that
// fails otherwise (a store error) is tried again after the same backoff, not by every
// request admitted meanwhile.

// renewDue reports whether the key's current lease l, which just admitted a request, is to
// be renewed ahead. Callers hold t.mu.
func (lg *Ledger) renewDue(l *lease, now time.Time) bool {
	if lg.cfg.LeaseLinger <= 0 || l.remaining >= l.amount/4 && now.Sub(l.created) < leaseMaxAge-leaseRenewAhead {
		return false
	}
	t := lg.leases
	return t.acquiring[l.k] == nil && !now.Before(l.renewAfter) && !t.refusedAt(l.k, now)
}

// renewLease starts taking key k's next lease in the background, for requests of worst
// case w (the request that found the lease due), in the Owner's generation gen. Callers
// hold t.mu.
func (lg *Ledger) renewLease(k leaseKey, w, target int64, now time.Time, gen uint64) {
	t := lg.leases
	ch, knownSmall := t.startAcquiring(k, now)
	t.renewals.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), leaseStoreTimeout)
		defer cancel()
		var res store.Reservation
		var small bool
		var err error
		// The key's requests wait on ch until leaseTaken: a panic is taken as a failure.
		if p := background.Call("credit lease renewal", func() { res, small, err = lg.takeLease(ctx, k.workspace, k.key, w, target, now, knownSmall) }); p != nil {
			lg.reportPanic(p)
			err = p
		}
		lg.leaseTaken(ctx, k, ch, 0, now, gen, res, small, err)
	})
}

// takeLease reserves a lease for a request of worst case w: target nanos from a wallet with
// at least leaseMinAvailableNanos available, or else, from a smaller wallet, a small lease of
// at most half of what is available above the 1.00 USD preflight, reserved so that the
// preflight still holds after it, and only if it admits at least one more request of the
// same size. The reservation's amount is the lease's. small reports that the wallet was too
// small for a full lease; knownSmall skips asking for one.
func (lg *Ledger) takeLease(ctx context.Context, workspaceID, keyID string, w, target int64, now time.Time, knownSmall bool) (store.Reservation, bool, error) {
	params := store.ReserveParams{
		ID: ids.New("res"), WorkspaceID: workspaceID, KeyID: keyID, Owner: lg.cfg.Owner.ID(),
		AmountNanos: target, MinAvailableNanos: max(MinPreflightNanos, leaseMinAvailableNanos),
		ExpiresAt: now.Add(leaseMaxAge + lg.cfg.ReservationTTL),
	}
	refused := errSmallWallet
	if !knownSmall {
		res, err := lg.reserve(ctx, params)
		if !errors.Is(err, store.ErrInsufficientFunds) {
			return res, false, err
		}
		refused = err
	}
	b, err := lg.cfg.Store.GetBalance(ctx, workspaceID)
	if err != nil {
		return store.Reservation{}, true, err
	}
	// A wallet topped up since is no longer small: its next lease asks for a full one.
	small := b.Available() < params.MinAvailableNanos
	l := smallLeaseSize(b.Available(), w, target)
	if l == 0 {
		return store.Reservation{}, small, refused
	}
	params.ID, params.AmountNanos, params.MinAvailableNanos = ids.New("res"), l, l+MinPreflightNanos
	res, err := lg.reserve(ctx, params)
	return res, small, err
}

// errSmallWallet refuses a lease to a wallet known to be too small for a full one and found
// too small for a small one.
var errSmallWallet = fmt.Errorf("the wallet is too small for a credit lease: %w", store.ErrInsufficientFunds)

// smallLeaseSize is the lease a wallet with available nanos available (less than a lease
// needs) may give a request of worst case w: at most target and half of what is above the
// 1.00 USD preflight, so that the preflight stays exact for every request the lease admits
// and the workspace's other keys keep the other half; 0 when that would not admit at least
// two such requests.
func smallLeaseSize(available, w, target int64) int64 {
	l := min(target, (available-MinPreflightNanos)/2)
	if w <= 0 || l < 2*w {
		return 0
	}
	return l
}

// settleLease settles a request of worst case w admitted from l, and drops the lease when
// it was the last request in flight on a retired or drained lease.
func (lg *Ledger) settleLease(ctx context.Context, deadline time.Time, l *lease, w int64, gen *store.Generation) (store.Generation, error) {
	t := lg.leases
	t.mu.Lock()
	// The last request in flight drops the lease with its own settlement (unless the lease
	// lingers): no request can be admitted in between, the lease is retired first.
	release := l.unsettled == 1 && (l.retired || lg.cfg.LeaseLinger <= 0)
	if release {
		t.retire(l)
		l.releasing = true
	}
	t.mu.Unlock()

	stored, err := lg.settleRetrying(ctx, deadline, gen, func(ctx context.Context) (store.Generation, error) {
		return lg.cfg.Store.SettleLease(ctx, store.SettleLeaseParams{ReservationID: l.id, HeldNanos: w, Generation: gen, Release: release})
	})

	t.mu.Lock()
	l.unsettled--
	l.inflightNanos -= w
	switch {
	case err != nil:
		// Nothing was applied (or, for an ambiguous commit, maybe it was): the lease no longer
		// admits, so no request can rely on a hold that may differ from what memory says.
		l.remaining += w
		t.retire(l)
		l.releasing = false
	case release:
		l.remaining = 0
		l.gone = true
		delete(t.all, l)
	default:
		l.remaining += w - min(stored.CostNanos, w)
	}
	drop := l.unsettled == 0 && !l.gone && !l.releasing && (l.retired || lg.cfg.LeaseLinger <= 0)
	if drop {
		// Two settlements raced to be last: neither dropped it.
		t.retire(l)
		l.releasing = true
	}
	t.wakeJanitorIfEmpty()
	t.mu.Unlock()
	if drop {
		lg.releaseLease(ctx, l)
	}
	return stored, err
}

// releaseLease drops l's reservation; l is marked releasing by the caller and has no
// request in flight.
func (lg *Ledger) releaseLease(ctx context.Context, l *lease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaseStoreTimeout)
	defer cancel()
	// A panic (a backend's bug) is a failure like any other: l must not stay releasing,
	// which nothing would ever release, with its credit held until the process stops.
	var err error
	if p := background.Call("releasing a credit lease", func() { _, err = lg.cfg.Store.ReleaseReservation(rctx, l.id) }); p != nil {
		err = p
	}
	t := lg.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	l.releasing = false
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		// The janitor tries again; the sweeper frees it at the latest when it expires.
		lg.cfg.Logger.Warn("releasing a credit lease failed", zap.String("reservation_id", l.id), zap.Error(err))
		return
	}
	l.remaining = 0
	l.gone = true
	delete(t.all, l)
	t.wakeJanitorIfEmpty()
}

func (lg *Ledger) releaseLeaseReservation(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), leaseStoreTimeout)
	defer cancel()
	if _, err := lg.cfg.Store.ReleaseReservation(ctx, id); err != nil {
		lg.cfg.Logger.Warn("releasing a credit lease failed", zap.String("reservation_id", id), zap.Error(err))
	}
}

// wakeJanitorIfEmpty lets the janitor return as soon as the last lease is gone. Anything
// else it does waits for its tick: a settlement drops its own lease when it is the last,
// so waking the janitor on every settlement would only cost a goroutine switch and a scan
// of the table per request. Callers hold t.mu.
func (t *leaseTable) wakeJanitorIfEmpty() {
	if len(t.all) == 0 {
		t.wakeJanitor()
	}
}

func (t *leaseTable) wakeJanitor() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// leaseJanitor retires idle leases and releases leases with nothing in flight whose
// release has not happened (a store error); it returns once no lease is left. It runs
// again after a panic (a background.Loop): leases would otherwise never be dropped, so
// it takes t.mu only in sweepLeases, which releases it in a defer.
func (lg *Ledger) leaseJanitor() {
	t := lg.leases
	idle, interval := leaseIdle, leaseJanitorInterval
	if lg.cfg.LeaseLinger > 0 {
		idle = min(idle, lg.cfg.LeaseLinger)
		interval = min(interval, max(lg.cfg.LeaseLinger/2, 10*time.Millisecond))
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-t.wake:
		}
		drop, ended := lg.sweepLeases(lg.cfg.Now(), idle)
		if ended {
			return
		}
		for _, l := range drop {
			lg.releaseLease(context.Background(), l)
		}
	}
}

// sweepLeases retires the leases idle since idle before now and returns those to release;
// ended reports that no lease is left, and the janitor is to return.
func (lg *Ledger) sweepLeases(now time.Time, idle time.Duration) (drop []*lease, ended bool) {
	t := lg.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.all) == 0 || t.closed {
		t.janitor = false
		return nil, true
	}
	for l := range t.all {
		if !l.retired && now.Sub(l.lastAdmit) >= idle {
			t.retire(l)
		}
		// A lingering lease is current, not retired: it stays until idle.
		if l.unsettled == 0 && !l.gone && !l.releasing && (l.retired || lg.cfg.LeaseLinger <= 0) {
			t.retire(l)
			l.releasing = true
			drop = append(drop, l)
		}
	}
	for k, until := range t.refused {
		if !now.Before(until) {
			delete(t.refused, k)
		}
	}
	return drop, false
}

// reportPanic logs a panic recovered from one of the Ledger's background goroutines;
// zap.Error logs a *background.Panic's stack as errorVerbose.
func (lg *Ledger) reportPanic(err error) {
	lg.cfg.Logger.Error("background goroutine panicked", zap.Error(err))
}

// Close releases every lease of the Ledger: those with nothing in flight now, the others
// when their last request settles. Requests after Close reserve for themselves. Call it
// when the Ledger is retired (a config reload, a shutdown) so that no hold outlives it.
func (lg *Ledger) Close() error {
	t := lg.leases
	if t == nil {
		return nil
	}
	t.mu.Lock()
	t.closed = true
	var drop []*lease
	for l := range t.all {
		t.retire(l)
		if l.unsettled == 0 && !l.gone && !l.releasing {
			l.releasing = true
			drop = append(drop, l)
		}
	}
	done := t.janitorDone
	t.wakeJanitor()
	t.mu.Unlock()
	// A renewal finishing now finds the table closed and releases what it took.
	t.renewals.Wait()
	for _, l := range drop {
		lg.releaseLease(context.Background(), l)
	}
	if done != nil {
		<-done
	}
	lg.unsure.close()
	lg.closeJournal()
	return nil
}

// LeaseStats is a snapshot of the Ledger's leases, for tests and diagnostics.
type LeaseStats struct {
	// Leases counts the leases whose reservation still exists; HeldNanos sums what they
	// hold (their remaining credit and the worst cases of their calls in flight).
	Leases    int
	HeldNanos int64
	// InFlightNanos sums the worst cases of their calls in flight.
	InFlightNanos int64
	// CurrentNanos sums the amounts of the leases currently admitting.
	CurrentNanos int64
	// Acquiring counts the keys whose next lease is being taken; SmallKeys those whose
	// wallet is known to be too small for a full lease.
	Acquiring, SmallKeys int
	// JanitorRunning tells whether the janitor goroutine runs.
	JanitorRunning bool
}

// LeaseStats returns a snapshot of the Ledger's leases.
func (lg *Ledger) LeaseStats() LeaseStats {
	t := lg.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	s := LeaseStats{Acquiring: len(t.acquiring), SmallKeys: len(t.small), JanitorRunning: t.janitor}
	for l := range t.all {
		if !l.gone {
			s.Leases++
			s.HeldNanos += l.remaining + l.inflightNanos
			s.InFlightNanos += l.inflightNanos
		}
	}
	for _, l := range t.cur {
		s.CurrentNanos += l.amount
	}
	return s
}

// RetireLeases stops every lease admitting: the next call of each key takes a new one.
// The retired leases keep serving their calls in flight.
func (lg *Ledger) RetireLeases() {
	t := lg.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	for l := range t.all {
		t.retire(l)
	}
}
