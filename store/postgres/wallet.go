package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// AddCredits appends a credit (or, for a negative amount, an adjustment) to the ledger and
// moves the balance with it. A debit that would take the balance below zero is refused
// with store.ErrInsufficientFunds.
func (s *Store) AddCredits(ctx context.Context, workspaceID string, amountNanos int64, note string) (store.Balance, error) {
	kind := store.CreditKind(amountNanos)
	now := s.stamp(time.Time{})
	var out store.Balance
	err := s.tx(ctx, func(tx pgx.Tx) error {
		was, err := lockWallet(ctx, tx, workspaceID)
		if err != nil {
			return err
		}
		b, err := store.ApplyCredit(was, amountNanos)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO ledger (workspace_id, amount_nanos, kind, note, created_at)
			VALUES ($1, $2, $3, $4, $5)`, workspaceID, amountNanos, kind, note, now); err != nil {
			return fmt.Errorf("appending to ledger: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE wallets SET balance_nanos = $1 WHERE workspace_id = $2`,
			b.BalanceNanos, workspaceID); err != nil {
			return fmt.Errorf("updating wallet: %w", err)
		}
		out = b
		return nil
	})
	if err != nil {
		return store.Balance{}, fmt.Errorf("adding credits to workspace %q: %w", workspaceID, err)
	}
	return out, nil
}

// GetBalance returns a workspace's wallet.
func (s *Store) GetBalance(ctx context.Context, workspaceID string) (store.Balance, error) {
	b := store.Balance{WorkspaceID: workspaceID}
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT balance_nanos, reserved_nanos FROM wallets WHERE workspace_id = $1`, workspaceID).
			Scan(&b.BalanceNanos, &b.ReservedNanos)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Balance{}, fmt.Errorf("wallet of workspace %q: %w", workspaceID, store.ErrNotFound)
	}
	if err != nil {
		return store.Balance{}, fmt.Errorf("getting balance of workspace %q: %w", workspaceID, err)
	}
	return b, nil
}

// lockWallet reads a wallet and locks its row until the transaction ends, so no other
// transaction, in this process or another, can move it in between.
func lockWallet(ctx context.Context, tx pgx.Tx, workspaceID string) (store.Balance, error) {
	b := store.Balance{WorkspaceID: workspaceID}
	err := tx.QueryRow(ctx, `SELECT balance_nanos, reserved_nanos FROM wallets WHERE workspace_id = $1 FOR UPDATE`, workspaceID).
		Scan(&b.BalanceNanos, &b.ReservedNanos)
	if errors.Is(err, pgx.ErrNoRows) {
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
	err = s.tx(ctx, func(tx pgx.Tx) error {
		b, err := lockWallet(ctx, tx, p.WorkspaceID)
		if err != nil {
			return err
		}
		if err := store.CheckFunds(b, p); err != nil {
			return err
		}
		if p.KeyID != "" {
			if err := checkKeyLimit(ctx, tx, p.WorkspaceID, p.KeyID, p.AmountNanos, r.CreatedAt); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, `INSERT INTO reservations (id, workspace_id, key_id, owner, amount_nanos, created_at, expires_at, generation_id, endpoint, model)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, r.ID, r.WorkspaceID, p.KeyID, p.Owner, r.AmountNanos, r.CreatedAt, r.ExpiresAt,
			p.GenerationID, p.Endpoint, p.Model)
		if isConflict(err) {
			return fmt.Errorf("reservation %q: %w", r.ID, store.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("inserting reservation: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE wallets SET reserved_nanos = reserved_nanos + $1 WHERE workspace_id = $2`,
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
	in, err := store.PrepareSettle(p, s.now)
	if err != nil {
		return store.Generation{}, err
	}
	now := s.stamp(time.Time{})

	var out store.Generation
	err = s.tx(ctx, func(tx pgx.Tx) error {
		// Reservation row before wallet row, as in ReleaseExpired: one lock order, no deadlocks.
		if p.ReservationID != "" {
			var wsID string
			var amount int64
			err := tx.QueryRow(ctx, `DELETE FROM reservations WHERE id = $1 RETURNING workspace_id, amount_nanos`,
				p.ReservationID).Scan(&wsID, &amount)
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("reservation %q: %w", p.ReservationID, store.ErrNotFound)
			}
			if err != nil {
				return fmt.Errorf("releasing reservation %q: %w", p.ReservationID, err)
			}
			if wsID != in.WorkspaceID {
				// Not this workspace's to settle; the rollback puts it back.
				return fmt.Errorf("reservation %q of workspace %q: %w", p.ReservationID, in.WorkspaceID, store.ErrNotFound)
			}
			if _, err := tx.Exec(ctx, `UPDATE wallets SET reserved_nanos = reserved_nanos - $1 WHERE workspace_id = $2`,
				amount, wsID); err != nil {
				return fmt.Errorf("releasing reservation %q: %w", p.ReservationID, err)
			}
		}
		b, err := lockWallet(ctx, tx, in.WorkspaceID)
		if err != nil {
			return err
		}
		g := in
		charge, err := recordCharge(ctx, tx, &g, in.CostNanos, b.BalanceNanos, now)
		if err != nil {
			return err
		}
		if charge > 0 {
			if _, err := tx.Exec(ctx, `UPDATE wallets SET balance_nanos = balance_nanos - $1 WHERE workspace_id = $2`,
				charge, g.WorkspaceID); err != nil {
				return fmt.Errorf("updating wallet: %w", err)
			}
		}
		out = g
		return nil
	})
	if err != nil {
		if stored, ok := s.settledAlready(ctx, &in, err); ok {
			return stored, nil
		}
		return store.Generation{}, fmt.Errorf("settling generation %q: %w", in.ID, err)
	}
	return out, nil
}

// ReleaseExpired drops reservations that expired before now and gives their credit back.
func (s *Store) ReleaseExpired(ctx context.Context, now time.Time) (int, error) {
	cutoff := now.UTC().Truncate(time.Millisecond)
	var n int
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var err error
		n, err = releaseWhere(ctx, tx, `expires_at < $1`, cutoff)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("releasing expired reservations: %w", err)
	}
	return n, nil
}

// releaseWhere drops the reservations that match cond (a WHERE clause of args) and gives
// their credit back, in tx; it returns how many it dropped. Reservation rows are locked
// before wallet rows, as everywhere. A reservation of a request's own is released
// unsettled: the request is recorded as interrupted.
func releaseWhere(ctx context.Context, tx pgx.Tx, cond string, args ...any) (int, error) {
	rows, err := tx.Query(ctx, `DELETE FROM reservations WHERE `+cond+`
		RETURNING workspace_id, amount_nanos, generation_id, key_id, endpoint, model, created_at`, args...)
	if err != nil {
		return 0, err
	}
	released := map[string]int64{}
	count := 0
	var amount int64
	var f store.InFlight
	var interrupted []store.InFlight
	_, err = pgx.ForEachRow(rows, []any{&f.WorkspaceID, &amount, &f.GenerationID, &f.KeyID, &f.Endpoint, &f.Model, &f.StartedAt}, func() error {
		released[f.WorkspaceID] += amount
		count++
		if f.GenerationID != "" {
			interrupted = append(interrupted, f)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	// Wallets in a fixed order, so two instances releasing at once cannot deadlock.
	workspaces := make([]string, 0, len(released))
	for ws := range released {
		workspaces = append(workspaces, ws)
	}
	slices.Sort(workspaces)
	for _, ws := range workspaces {
		if _, err := tx.Exec(ctx, `UPDATE wallets SET reserved_nanos = reserved_nanos - $1 WHERE workspace_id = $2`,
			released[ws], ws); err != nil {
			return 0, err
		}
	}
	for _, f := range interrupted {
		if err := recordInterrupted(ctx, tx, f); err != nil {
			return 0, err
		}
	}
	return count, nil
}

// checkKeyLimit refuses amount with a *store.KeyLimitError if the key's spending in the
// current period, its open reservations and amount together exceed its limit.
//
// The caller holds the wallet's row lock, and every reservation and charge of the key
// takes that lock too (a key belongs to one workspace), so the sums cannot move before
// this transaction commits; the key's row is locked as well so that a concurrent
// UpdateKey cannot change the limit in between. Under READ COMMITTED each statement
// sees what committed before it, so the sums include everything that held the locks
// before us. The lock order is wallet then key, in Reserve only.
func checkKeyLimit(ctx context.Context, tx pgx.Tx, workspaceID, keyID string, amount int64, now time.Time) error {
	k := store.Key{ID: keyID}
	err := tx.QueryRow(ctx, `SELECT limit_nanos, limit_reset FROM api_keys WHERE id = $1 AND workspace_id = $2 FOR UPDATE`,
		keyID, workspaceID).Scan(&k.LimitNanos, &k.LimitReset)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("key %q of workspace %q: %w", keyID, workspaceID, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("reading key %q: %w", keyID, err)
	}
	return store.CheckKeyLimit(k, amount, now, func(since time.Time) (store.KeySpend, error) {
		return keySpend(ctx, tx, keyID, since)
	})
}

func keySpend(ctx context.Context, q querier, keyID string, since time.Time) (store.KeySpend, error) {
	var sp store.KeySpend
	err := q.QueryRow(ctx, `SELECT
			(SELECT COALESCE(-SUM(amount_nanos), 0)::BIGINT FROM ledger WHERE key_id = $1 AND kind = 'charge' AND created_at >= $2),
			(SELECT COALESCE(SUM(amount_nanos), 0)::BIGINT FROM reservations WHERE key_id = $1)`,
		keyID, since).Scan(&sp.SpentNanos, &sp.ReservedNanos)
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
	var sp store.KeySpend
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		var err error
		sp, err = keySpend(ctx, conn, keyID, since)
		return err
	})
	return sp, err
}

// SettleLease charges the generation's cost capped at the balance, records the generation
// and shrinks the lease's reservation by what was charged (at most p.HeldNanos), or drops
// it when p.Release is set, all in one transaction.
func (s *Store) SettleLease(ctx context.Context, p store.SettleLeaseParams) (store.Generation, error) {
	in, err := store.PrepareSettleLease(p, s.now)
	if err != nil {
		return store.Generation{}, err
	}
	now := s.stamp(time.Time{})

	var out store.Generation
	err = s.tx(ctx, func(tx pgx.Tx) error {
		// Reservation row before wallet row, as in Settle and ReleaseExpired: one lock order.
		var wsID string
		var amount int64
		err := tx.QueryRow(ctx, `SELECT workspace_id, amount_nanos FROM reservations WHERE id = $1 FOR UPDATE`,
			p.ReservationID).Scan(&wsID, &amount)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && wsID != in.WorkspaceID) {
			return fmt.Errorf("reservation %q: %w", p.ReservationID, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("reading reservation %q: %w", p.ReservationID, err)
		}
		b, err := lockWallet(ctx, tx, in.WorkspaceID)
		if err != nil {
			return err
		}
		g := in
		charge, err := recordCharge(ctx, tx, &g, in.CostNanos, b.BalanceNanos, now)
		if err != nil {
			return err
		}
		unreserve := store.LeaseUnreserve(charge, p.HeldNanos, amount, p.Release)
		if p.Release {
			if _, err := tx.Exec(ctx, `DELETE FROM reservations WHERE id = $1`, p.ReservationID); err != nil {
				return fmt.Errorf("releasing reservation %q: %w", p.ReservationID, err)
			}
		} else if unreserve > 0 {
			if _, err := tx.Exec(ctx, `UPDATE reservations SET amount_nanos = amount_nanos - $1 WHERE id = $2`,
				unreserve, p.ReservationID); err != nil {
				return fmt.Errorf("shrinking reservation %q: %w", p.ReservationID, err)
			}
		}
		if charge > 0 || unreserve > 0 {
			if _, err := tx.Exec(ctx, `UPDATE wallets SET balance_nanos = balance_nanos - $1, reserved_nanos = reserved_nanos - $2 WHERE workspace_id = $3`,
				charge, unreserve, g.WorkspaceID); err != nil {
				return fmt.Errorf("updating wallet: %w", err)
			}
		}
		out = g
		return nil
	})
	if err != nil {
		if stored, ok := s.settledAlready(ctx, &in, err); ok {
			return stored, nil
		}
		return store.Generation{}, fmt.Errorf("settling generation %q: %w", in.ID, err)
	}
	return out, nil
}

// ReleaseReservation drops a reservation and gives its credit back.
func (s *Store) ReleaseReservation(ctx context.Context, id string) (int64, error) {
	var amount int64
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var ws string
		err := tx.QueryRow(ctx, `DELETE FROM reservations WHERE id = $1 RETURNING workspace_id, amount_nanos`, id).Scan(&ws, &amount)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("reservation %q: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE wallets SET reserved_nanos = reserved_nanos - $1 WHERE workspace_id = $2`, amount, ws); err != nil {
			return fmt.Errorf("updating wallet: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("releasing reservation %q: %w", id, err)
	}
	return amount, nil
}

// recordCharge is what every settlement does: it charges cost capped at the balance (the
// rest is recorded as unbilled, the balance never goes below zero), records the generation
// and appends the charge to the ledger. The caller updates the wallet row.
func recordCharge(ctx context.Context, tx pgx.Tx, g *store.Generation, cost, balance int64, now time.Time) (int64, error) {
	charge := store.Charge(g, cost, balance)
	if err := insertGeneration(ctx, tx, g); err != nil {
		return 0, err
	}
	if charge > 0 {
		if _, err := tx.Exec(ctx, `INSERT INTO ledger (workspace_id, amount_nanos, kind, generation_id, key_id, created_at)
			VALUES ($1, $2, 'charge', $3, $4, $5)`, g.WorkspaceID, -charge, g.ID, g.KeyID, now); err != nil {
			return 0, fmt.Errorf("appending to ledger: %w", err)
		}
	}
	return charge, nil
}

// settledAlready returns the record of an earlier settlement of g, when err, the failure
// of settling g, is that of a repeat (store.SettledAlready). The failed transaction waited
// for the rows it touched, so a concurrent first settlement has committed by now.
func (s *Store) settledAlready(ctx context.Context, g *store.Generation, err error) (store.Generation, bool) {
	if !store.MaySettleAgain(err) {
		return store.Generation{}, false
	}
	var stored store.Generation
	gerr := s.withConn(ctx, func(conn *pgx.Conn) error {
		var err error
		stored, err = scanGeneration(conn.QueryRow(ctx, `SELECT `+store.GenerationColumns+` FROM generations WHERE id = $1`, g.ID))
		return err
	})
	if gerr != nil || !store.SettledAlready(&stored, g) {
		return store.Generation{}, false
	}
	return stored, true
}
