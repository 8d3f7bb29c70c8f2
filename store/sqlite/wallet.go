package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// AddCredits appends a credit (or, for a negative amount, an adjustment) to the ledger and
// moves the balance with it. A debit that would take the balance below zero is refused
// with store.ErrInsufficientFunds.
func (s *Store) AddCredits(ctx context.Context, workspaceID string, amountNanos int64, note string) (store.Balance, error) {
	kind := store.CreditKind(amountNanos)
	now := s.now()
	var b store.Balance
	// Money paid in (or taken back) is made to survive a power cut even with
	// DurableProcess: writer.go flushes the WAL before answering (onDisk).
	err := s.write(ctx, &writeOp{onDisk: true, fn: func(ctx context.Context, tx *sql.Tx) error {
		was, err := wallet(ctx, tx, workspaceID)
		if err != nil {
			return err
		}
		if b, err = store.ApplyCredit(was, amountNanos); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO ledger (workspace_id, amount_nanos, kind, note, created_at)
			VALUES (?, ?, ?, ?, ?)`, workspaceID, amountNanos, kind, note, millis(now)); err != nil {
			return fmt.Errorf("appending to ledger: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE wallets SET balance_nanos = ? WHERE workspace_id = ?`,
			b.BalanceNanos, workspaceID); err != nil {
			return fmt.Errorf("updating wallet: %w", err)
		}
		return nil
	}})
	if err != nil {
		return store.Balance{}, fmt.Errorf("adding credits to workspace %q: %w", workspaceID, err)
	}
	return b, nil
}

// GetBalance returns a workspace's wallet.
func (s *Store) GetBalance(ctx context.Context, workspaceID string) (store.Balance, error) {
	if err := s.caughtUp(ctx); err != nil {
		return store.Balance{}, fmt.Errorf("getting balance of workspace %q: %w", workspaceID, err)
	}
	b := store.Balance{WorkspaceID: workspaceID}
	err := s.r.QueryRowContext(ctx, `SELECT balance_nanos, reserved_nanos FROM wallets WHERE workspace_id = ?`, workspaceID).
		Scan(&b.BalanceNanos, &b.ReservedNanos)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Balance{}, fmt.Errorf("wallet of workspace %q: %w", workspaceID, store.ErrNotFound)
	}
	if err != nil {
		return store.Balance{}, fmt.Errorf("getting balance of workspace %q: %w", workspaceID, err)
	}
	return b, nil
}

// wallet reads a wallet inside a write transaction, which BEGIN IMMEDIATE has already
// made exclusive: no other writer can move it before this transaction ends.
func wallet(ctx context.Context, tx *sql.Tx, workspaceID string) (store.Balance, error) {
	b := store.Balance{WorkspaceID: workspaceID}
	err := tx.QueryRowContext(ctx, `SELECT balance_nanos, reserved_nanos FROM wallets WHERE workspace_id = ?`, workspaceID).
		Scan(&b.BalanceNanos, &b.ReservedNanos)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Balance{}, fmt.Errorf("wallet of workspace %q: %w", workspaceID, store.ErrNotFound)
	}
	if err != nil {
		return store.Balance{}, fmt.Errorf("reading wallet: %w", err)
	}
	return b, nil
}

// Reserve holds p.AmountNanos of the available balance for one request.
func (s *Store) Reserve(ctx context.Context, p store.ReserveParams) (store.Reservation, error) {
	r, err := store.NewReservation(p, s.now)
	if err != nil {
		return store.Reservation{}, err
	}
	err = s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		b, err := wallet(ctx, tx, p.WorkspaceID)
		if err != nil {
			return err
		}
		if err := store.CheckFunds(b, p); err != nil {
			return err
		}
		if p.KeyID != "" {
			// BEGIN IMMEDIATE already made this transaction the only writer: no other
			// reservation or charge of the key can land between the check and the insert.
			if err := checkKeyLimit(ctx, tx, p.WorkspaceID, p.KeyID, p.AmountNanos, r.CreatedAt); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO reservations (id, workspace_id, key_id, owner, amount_nanos, created_at, expires_at, generation_id, endpoint, model)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, r.ID, r.WorkspaceID, p.KeyID, p.Owner, r.AmountNanos, millis(r.CreatedAt), millis(r.ExpiresAt),
			p.GenerationID, p.Endpoint, p.Model)
		if isConflict(err) {
			return fmt.Errorf("reservation %q: %w", r.ID, store.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("inserting reservation: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE wallets SET reserved_nanos = reserved_nanos + ? WHERE workspace_id = ?`,
			r.AmountNanos, r.WorkspaceID); err != nil {
			return fmt.Errorf("updating wallet: %w", err)
		}
		return nil
	})
	if err != nil {
		return store.Reservation{}, fmt.Errorf("reserving for workspace %q: %w", p.WorkspaceID, err)
	}
	return r, nil
}

// Settle releases the reservation (if any), charges the generation's cost capped at the
// balance, and records the generation, all in one transaction.
func (s *Store) Settle(ctx context.Context, p store.SettleParams) (store.Generation, error) {
	g, err := store.PrepareSettle(p, s.now)
	if err != nil {
		return store.Generation{}, err
	}
	req := &settleReq{g: &g, cost: g.CostNanos, reservationID: p.ReservationID, now: s.now()}
	err = s.write(ctx, &writeOp{settle: req})
	if p.ReservationID != "" {
		s.known.forget(p.ReservationID)
	}
	if err != nil {
		if stored, ok := s.settledAlready(ctx, &g, err); ok {
			return stored, nil
		}
		return store.Generation{}, fmt.Errorf("settling generation %q: %w", g.ID, err)
	}
	return g, nil
}

// settledAlready returns the record of an earlier settlement of g, when err, the failure
// of settling g, is that of a repeat (store.SettledAlready). The write that failed was
// committed with everything queued before it, so the earlier settlement, journaled or
// not, is in the database by now.
func (s *Store) settledAlready(ctx context.Context, g *store.Generation, err error) (store.Generation, bool) {
	if !store.MaySettleAgain(err) {
		return store.Generation{}, false
	}
	stored, gerr := scanGeneration(s.r.QueryRowContext(ctx, `SELECT `+store.GenerationColumns+` FROM generations WHERE id = ?`, g.ID))
	if gerr != nil || !store.SettledAlready(&stored, g) {
		return store.Generation{}, false
	}
	return stored, true
}

// ReleaseExpired drops reservations that expired before now and gives their credit back.
func (s *Store) ReleaseExpired(ctx context.Context, now time.Time) (int, error) {
	var n int
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		n, err = s.releaseWhere(ctx, tx, `expires_at < ?`, millis(now))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("releasing expired reservations: %w", err)
	}
	return n, nil
}

// releaseWhere drops the reservations that match the condition cond (a WHERE clause of
// its args) and gives their credit back, in tx; it returns how many it dropped. A
// reservation of a request's own is released unsettled: the request is recorded as
// interrupted.
func (s *Store) releaseWhere(ctx context.Context, tx *sql.Tx, cond string, args ...any) (int, error) {
	rows, err := tx.QueryContext(ctx, `DELETE FROM reservations WHERE `+cond+`
		RETURNING id, workspace_id, amount_nanos, generation_id, key_id, endpoint, model, created_at`, args...)
	if err != nil {
		return 0, err
	}
	n := 0
	released := map[string]int64{}
	var interrupted []store.InFlight
	for rows.Next() {
		var id string
		var amount, created int64
		var f store.InFlight
		if err := rows.Scan(&id, &f.WorkspaceID, &amount, &f.GenerationID, &f.KeyID, &f.Endpoint, &f.Model, &created); err != nil {
			_ = rows.Close()
			return 0, err
		}
		s.known.forget(id)
		released[f.WorkspaceID] += amount
		if f.GenerationID != "" {
			f.StartedAt = fromMillis(created)
			interrupted = append(interrupted, f)
		}
		n++
	}
	if err := rows.Close(); err != nil {
		return 0, err
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for ws, amount := range released {
		if _, err := tx.ExecContext(ctx, `UPDATE wallets SET reserved_nanos = reserved_nanos - ? WHERE workspace_id = ?`,
			amount, ws); err != nil {
			return 0, err
		}
	}
	for _, f := range interrupted {
		if err := recordInterrupted(ctx, tx, f); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// recordInterrupted records the request f as interrupted, unless its generation exists.
func recordInterrupted(ctx context.Context, tx *sql.Tx, f store.InFlight) error {
	g := store.Interrupted(f)
	err := insertGeneration(ctx, tx, &g)
	if errors.Is(err, store.ErrConflict) {
		return nil
	}
	return err
}

// checkKeyLimit refuses amount with a *store.KeyLimitError if the key's spending in the
// current period, its open reservations and amount together exceed its limit.
func checkKeyLimit(ctx context.Context, tx *sql.Tx, workspaceID, keyID string, amount int64, now time.Time) error {
	k := store.Key{ID: keyID}
	err := tx.QueryRowContext(ctx, `SELECT limit_nanos, limit_reset FROM api_keys WHERE id = ? AND workspace_id = ?`,
		keyID, workspaceID).Scan(&k.LimitNanos, &k.LimitReset)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("key %q of workspace %q: %w", keyID, workspaceID, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("reading key %q: %w", keyID, err)
	}
	return store.CheckKeyLimit(k, amount, now, func(since time.Time) (store.KeySpend, error) {
		return keySpend(ctx, tx, keyID, since)
	})
}

// rowQuerier is what *sql.DB and *sql.Tx have in common.
type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func keySpend(ctx context.Context, q rowQuerier, keyID string, since time.Time) (store.KeySpend, error) {
	var sp store.KeySpend
	err := q.QueryRowContext(ctx, `SELECT
			(SELECT COALESCE(-SUM(amount_nanos), 0) FROM ledger WHERE key_id = ? AND kind = 'charge' AND created_at >= ?),
			(SELECT COALESCE(SUM(amount_nanos), 0) FROM reservations WHERE key_id = ?)`,
		keyID, millis(since), keyID).Scan(&sp.SpentNanos, &sp.ReservedNanos)
	if err != nil {
		return store.KeySpend{}, fmt.Errorf("summing the spend of key %q: %w", keyID, err)
	}
	return sp, nil
}

// KeySpend returns what a key was charged since the given time and what its open
// reservations hold.
func (s *Store) KeySpend(ctx context.Context, keyID string, since time.Time) (store.KeySpend, error) {
	if err := store.ValidateKeySpend(keyID); err != nil {
		return store.KeySpend{}, err
	}
	if err := s.caughtUp(ctx); err != nil {
		return store.KeySpend{}, fmt.Errorf("key spend: %w", err)
	}
	return keySpend(ctx, s.r, keyID, since)
}

// SettleLease charges the generation's cost capped at the balance, records the generation
// and shrinks the lease's reservation by what was charged (at most p.HeldNanos), or drops
// it when p.Release is set, all in one transaction.
func (s *Store) SettleLease(ctx context.Context, p store.SettleLeaseParams) (store.Generation, error) {
	g, err := store.PrepareSettleLease(p, s.now)
	if err != nil {
		return store.Generation{}, err
	}
	now := s.now()
	cost := g.CostNanos

	// The writer's generation is the caller's, which the store owns from the call on
	// (store.SettleLeaseParams): the writer fills in the charge there. g, the answer, is a
	// copy, so that a journaled settlement's answer does not race with the writer applying it.
	gen := p.Generation
	*gen = g
	so := &settleOp{req: settleReq{g: gen, cost: cost, reservationID: p.ReservationID, lease: true, held: p.HeldNanos, release: p.Release, now: now}}
	// A repeat (journal.go) is settled synchronously, to be answered with the stored record.
	repeat := s.jr != nil && (!s.jr.fresh(g.ID) || s.jr.seen(g.ID))
	deferrable := s.jr != nil && !repeat && cost <= p.HeldNanos && s.known.has(p.ReservationID, g.WorkspaceID)
	if p.Release {
		s.known.forget(p.ReservationID)
	}
	if deferrable {
		// See journal.go: the lease holds HeldNanos for this request, so the charge is the cost.
		g.CostNanos, g.UnbilledNanos = cost, 0
		gen.CostNanos, gen.UnbilledNanos = cost, 0
		if err := s.deferSettle(so); err == nil {
			return g, nil
		}
		// The journal could not take it: settle synchronously.
	}
	so.op.settle = &so.req
	err = s.write(ctx, &so.op)
	if err == nil && !p.Release {
		s.known.add(p.ReservationID, g.WorkspaceID)
	}
	if err != nil {
		if stored, ok := s.settledAlready(ctx, &g, err); ok {
			return stored, nil
		}
		return store.Generation{}, fmt.Errorf("settling generation %q: %w", g.ID, err)
	}
	return *gen, nil
}

// ReleaseReservation drops a reservation and gives its credit back.
func (s *Store) ReleaseReservation(ctx context.Context, id string) (int64, error) {
	var amount int64
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var ws string
		err := tx.QueryRowContext(ctx, `DELETE FROM reservations WHERE id = ? RETURNING workspace_id, amount_nanos`, id).Scan(&ws, &amount)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("reservation %q: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE wallets SET reserved_nanos = reserved_nanos - ? WHERE workspace_id = ?`, amount, ws); err != nil {
			return fmt.Errorf("updating wallet: %w", err)
		}
		return nil
	})
	s.known.forget(id)
	if err != nil {
		return 0, fmt.Errorf("releasing reservation %q: %w", id, err)
	}
	return amount, nil
}

// recordCharge is what every settlement does: it charges cost capped at the balance (the
// rest is recorded as unbilled, the balance never goes below zero), records the generation
// and appends the charge to the ledger. The caller updates the wallet row.
func recordCharge(ctx context.Context, tx *sql.Tx, g *store.Generation, cost, balance int64, now time.Time) (int64, error) {
	charge := store.Charge(g, cost, balance)
	if err := insertGeneration(ctx, tx, g); err != nil {
		return 0, err
	}
	if charge > 0 {
		if _, err := tx.ExecContext(ctx, `INSERT INTO ledger (workspace_id, amount_nanos, kind, generation_id, key_id, created_at)
			VALUES (?, ?, 'charge', ?, ?, ?)`, g.WorkspaceID, -charge, g.ID, g.KeyID, millis(now)); err != nil {
			return 0, fmt.Errorf("appending to ledger: %w", err)
		}
	}
	return charge, nil
}

// apply is the settlement as one write of its own (see settlebatch.go for the same
// settlement applied together with others): Settle, or SettleLease when r.lease.
func (r *settleReq) apply(ctx context.Context, tx *sql.Tx) error {
	g := r.g
	if !r.lease {
		if r.reservationID != "" {
			var wsID string
			var amount int64
			err := tx.QueryRowContext(ctx, `DELETE FROM reservations WHERE id = ? RETURNING workspace_id, amount_nanos`,
				r.reservationID).Scan(&wsID, &amount)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("reservation %q: %w", r.reservationID, store.ErrNotFound)
			}
			if err != nil {
				return fmt.Errorf("releasing reservation %q: %w", r.reservationID, err)
			}
			if wsID != g.WorkspaceID {
				// Not this workspace's to settle; the rollback puts it back.
				return fmt.Errorf("reservation %q of workspace %q: %w", r.reservationID, g.WorkspaceID, store.ErrNotFound)
			}
			if _, err := tx.ExecContext(ctx, `UPDATE wallets SET reserved_nanos = reserved_nanos - ? WHERE workspace_id = ?`,
				amount, wsID); err != nil {
				return fmt.Errorf("releasing reservation %q: %w", r.reservationID, err)
			}
		}
		b, err := wallet(ctx, tx, g.WorkspaceID)
		if err != nil {
			return err
		}
		charge, err := recordCharge(ctx, tx, g, r.cost, b.BalanceNanos, r.now)
		if err != nil || charge == 0 {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE wallets SET balance_nanos = balance_nanos - ? WHERE workspace_id = ?`,
			charge, g.WorkspaceID); err != nil {
			return fmt.Errorf("updating wallet: %w", err)
		}
		return nil
	}

	var wsID string
	var amount int64
	err := tx.QueryRowContext(ctx, `SELECT workspace_id, amount_nanos FROM reservations WHERE id = ?`,
		r.reservationID).Scan(&wsID, &amount)
	held := err == nil && wsID == g.WorkspaceID
	switch {
	case err != nil && !errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("reading reservation %q: %w", r.reservationID, err)
	case !held && !r.deferred:
		return fmt.Errorf("reservation %q: %w", r.reservationID, store.ErrNotFound)
	}
	// A journaled settlement whose reservation is gone (released by its expiry, after a
	// crash) was acknowledged all the same: it is charged from the balance.
	b, err := wallet(ctx, tx, g.WorkspaceID)
	if err != nil {
		return err
	}
	charge, err := recordCharge(ctx, tx, g, r.cost, b.BalanceNanos, r.now)
	if err != nil {
		if r.deferred && errors.Is(err, store.ErrConflict) {
			return repeatedSettlement(ctx, tx, g, err)
		}
		return err
	}
	var unreserve int64
	switch {
	case !held:
	case r.release:
		if _, err := tx.ExecContext(ctx, `DELETE FROM reservations WHERE id = ?`, r.reservationID); err != nil {
			return fmt.Errorf("releasing reservation %q: %w", r.reservationID, err)
		}
		unreserve = amount
	default:
		if unreserve = store.LeaseUnreserve(charge, r.held, amount, false); unreserve > 0 {
			if _, err := tx.ExecContext(ctx, `UPDATE reservations SET amount_nanos = amount_nanos - ? WHERE id = ?`,
				unreserve, r.reservationID); err != nil {
				return fmt.Errorf("shrinking reservation %q: %w", r.reservationID, err)
			}
		}
	}
	if charge > 0 || unreserve > 0 {
		if _, err := tx.ExecContext(ctx, `UPDATE wallets SET balance_nanos = balance_nanos - ?, reserved_nanos = reserved_nanos - ? WHERE workspace_id = ?`,
			charge, unreserve, g.WorkspaceID); err != nil {
			return fmt.Errorf("updating wallet: %w", err)
		}
	}
	return nil
}

// errSettledAlready fails a journaled settlement that repeats one the database holds
// (store.SettledAlready): the failure rolls it back, so it charges nothing again, and
// it is no lost record to report.
var errSettledAlready = errors.New("settled already")

// repeatedSettlement is the failure of the journaled settlement of g whose insert failed
// with err, a taken id: errSettledAlready when the record under that id is an earlier
// settlement of g, err otherwise.
func repeatedSettlement(ctx context.Context, tx *sql.Tx, g *store.Generation, err error) error {
	stored, gerr := scanGeneration(tx.QueryRowContext(ctx, `SELECT `+store.GenerationColumns+` FROM generations WHERE id = ?`, g.ID))
	if gerr == nil && store.SettledAlready(&stored, g) {
		return fmt.Errorf("generation %q: %w", g.ID, errSettledAlready)
	}
	return err
}
