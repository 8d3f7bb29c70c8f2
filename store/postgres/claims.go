package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// Claims (store.Claims). A claim locks the due items it takes with FOR UPDATE SKIP
// LOCKED and leases them in the same statement: claimers on any number of instances skip
// the rows another claim holds instead of waiting for them, and a row whose lease another
// claim renewed while this one waited for it is no longer due when its lock is granted
// (READ COMMITTED checks the condition again on the row's new version), so no two claims
// take the same item. Extend, Complete and Retry match the claim's owner and attempt in
// their WHERE clause, under the row's lock: a claim taken over in between changes nothing.
//
// Times are the database server's clock (now()), so that instances on hosts whose clocks
// disagree agree on leases; a store opened WithClock follows that clock instead, for tests.

// Enqueue adds item id to queue, due at runAt (now when zero).
func (s *Store) Enqueue(ctx context.Context, queue, id string, payload []byte, runAt time.Time) error {
	if err := store.ValidateEnqueue(queue, id); err != nil {
		return err
	}
	if payload == nil {
		payload = []byte{}
	}
	err := s.tx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO queue_items (queue, id, payload, run_at, created_at)
			VALUES ($1, $2, $3, COALESCE($4, $5, date_trunc('milliseconds', now())), COALESCE($5, date_trunc('milliseconds', now())))`,
			queue, id, payload, optionalTime(runAt), s.clock())
		if isConflict(err) {
			return store.ErrConflict
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("enqueuing %q in queue %q: %w", id, queue, err)
	}
	return nil
}

// optionalTime is t at the precision the store keeps, or nil (NULL) when t is zero.
func optionalTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC().Truncate(time.Millisecond)
	return &t
}

// Claim leases up to limit due items of queue to owner.
func (s *Store) Claim(ctx context.Context, queue, owner string, lease time.Duration, limit int) ([]store.ClaimedItem, error) {
	n, err := store.ValidateClaim(queue, owner, lease, limit)
	if err != nil {
		return nil, err
	}
	var out []store.ClaimedItem
	err = s.tx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `WITH due AS (
				SELECT queue, id, run_at FROM queue_items
				WHERE queue = $1 AND run_at <= COALESCE($2, now())
				ORDER BY run_at, id
				LIMIT $3
				FOR UPDATE SKIP LOCKED
			)
			UPDATE queue_items q SET owner = $4, attempts = q.attempts + 1,
				run_at = date_trunc('milliseconds', COALESCE($2, now()) + $5::bigint * interval '1 millisecond')
			FROM due WHERE q.queue = due.queue AND q.id = due.id
			RETURNING q.id, q.payload, q.attempts, q.run_at, q.created_at, q.last_error, due.run_at`,
			queue, s.clock(), n, owner, lease.Milliseconds())
		if err != nil {
			return err
		}
		type claimed struct {
			store.ClaimedItem
			due time.Time
		}
		items, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (claimed, error) {
			c := claimed{ClaimedItem: store.ClaimedItem{Claim: store.Claim{Queue: queue, Owner: owner}}}
			err := row.Scan(&c.ID, &c.Payload, &c.Attempt, &c.LeaseExpires, &c.EnqueuedAt, &c.LastError, &c.due)
			return c, err
		})
		if err != nil {
			return err
		}
		// RETURNING follows no order: longest due first, as they were chosen.
		slices.SortFunc(items, func(a, b claimed) int {
			if c := a.due.Compare(b.due); c != 0 {
				return c
			}
			return strings.Compare(a.ID, b.ID)
		})
		out = make([]store.ClaimedItem, len(items))
		for i, c := range items {
			c.LeaseExpires, c.EnqueuedAt = utc(c.LeaseExpires), utc(c.EnqueuedAt)
			out[i] = c.ClaimedItem
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claiming from queue %q: %w", queue, err)
	}
	return out, nil
}

// Extend renews the lease of claim c.
func (s *Store) Extend(ctx context.Context, c store.Claim, lease time.Duration) (time.Time, error) {
	if err := c.Validate(); err != nil {
		return time.Time{}, err
	}
	if err := store.ValidateLease(lease); err != nil {
		return time.Time{}, err
	}
	var until time.Time
	err := s.onClaim(ctx, c, `UPDATE queue_items SET run_at = date_trunc('milliseconds', COALESCE($5, now()) + $6::bigint * interval '1 millisecond')`,
		`RETURNING run_at`, []any{&until}, s.clock(), lease.Milliseconds())
	if err != nil {
		return time.Time{}, fmt.Errorf("extending: %w", err)
	}
	return utc(until), nil
}

// Complete removes the item of claim c.
func (s *Store) Complete(ctx context.Context, c store.Claim) error {
	if err := c.Validate(); err != nil {
		return err
	}
	var one int
	if err := s.onClaim(ctx, c, `DELETE FROM queue_items`, `RETURNING 1`, []any{&one}); err != nil {
		return fmt.Errorf("completing: %w", err)
	}
	return nil
}

// Retry ends claim c and makes its item due at runAt (now when zero).
func (s *Store) Retry(ctx context.Context, c store.Claim, runAt time.Time, reason string) error {
	if err := c.Validate(); err != nil {
		return err
	}
	var one int
	err := s.onClaim(ctx, c, `UPDATE queue_items SET run_at = COALESCE($5, $6, date_trunc('milliseconds', now())), owner = '', last_error = $7`,
		`RETURNING 1`, []any{&one}, optionalTime(runAt), s.clock(), reason)
	if err != nil {
		return fmt.Errorf("retrying: %w", err)
	}
	return nil
}

// onClaim runs stmt (an UPDATE or DELETE of queue_items whose parameters are numbered from
// $5) on the item of claim c, if c still holds it, and scans what returning returns into
// dest: c.Lost() if it is not held.
func (s *Store) onClaim(ctx context.Context, c store.Claim, stmt, returning string, dest []any, args ...any) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, stmt+` WHERE queue = $1 AND id = $2 AND owner = $3 AND attempts = $4 `+returning,
			append([]any{c.Queue, c.ID, c.Owner, c.Attempt}, args...)...).Scan(dest...)
		if errors.Is(err, pgx.ErrNoRows) {
			return c.Lost()
		}
		return err
	})
}
