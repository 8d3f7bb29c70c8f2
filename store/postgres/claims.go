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
// take the same item. Extend, Complete, Retry and Requeue match the claim's owner and token in
// their WHERE clause, under the row's lock: a claim taken over in between changes nothing.
//
// Times are the database server's clock (now()), so that instances on hosts whose clocks
// disagree agree on leases; a store opened WithClock follows that clock instead, for tests.

// Enqueue adds an item to a queue, due at p.RunAt (now when zero).
func (s *Store) Enqueue(ctx context.Context, p store.EnqueueParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	err := s.tx(ctx, func(tx pgx.Tx) error { return s.enqueueTx(ctx, tx, p) })
	if err != nil {
		return fmt.Errorf("enqueuing %q in queue %q: %w", p.ID, p.Queue, err)
	}
	return nil
}

// enqueueTx inserts the item p into its queue within tx.
func (s *Store) enqueueTx(ctx context.Context, tx pgx.Tx, p store.EnqueueParams) error {
	payload := p.Payload
	if payload == nil {
		payload = []byte{}
	}
	_, err := tx.Exec(ctx, `INSERT INTO queue_items (queue, id, grp, payload, run_at, created_at)
		VALUES ($1, $2, $3, $4, COALESCE($5, $6, date_trunc('milliseconds', now())), COALESCE($6, date_trunc('milliseconds', now())))`,
		p.Queue, p.ID, p.Group, payload, optionalTime(p.RunAt), s.clock())
	if isConflict(err) {
		return store.ErrConflict
	}
	return err
}

// optionalTime is t at the precision the store keeps, or nil (NULL) when t is zero.
func optionalTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC().Truncate(time.Millisecond)
	return &t
}

// Claim leases up to p.Limit due items of p.Queue to p.Owner. With a group cap, the
// candidates are each group's first due items up to what its leased items leave of the
// cap, found without locks (window functions and FOR UPDATE do not mix), then locked with
// SKIP LOCKED: claimers racing for a group contend for the same first items, so together
// they never lease more of it than the cap.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) ([]store.ClaimedItem, error) {
	n, err := p.Validate()
	if err != nil {
		return nil, err
	}
	candidates := `queue_items WHERE queue = $1 AND run_at <= COALESCE($2, now())`
	args := []any{p.Queue, s.clock(), n, p.Owner, p.Lease.Milliseconds()}
	if p.GroupCap > 0 {
		candidates = `queue_items WHERE (queue, id) IN (
				SELECT d.queue, d.id FROM (
					SELECT queue, id, grp, ROW_NUMBER() OVER (PARTITION BY grp ORDER BY run_at, id) AS rank
					FROM queue_items WHERE queue = $1 AND run_at <= COALESCE($2, now())
				) d LEFT JOIN (
					SELECT grp, COUNT(*) AS n FROM queue_items
					WHERE queue = $1 AND owner <> '' AND run_at > COALESCE($2, now()) AND grp <> '' GROUP BY grp
				) leased ON leased.grp = d.grp
				WHERE d.grp = '' OR d.rank + COALESCE(leased.n, 0) <= $6
			) AND run_at <= COALESCE($2, now())`
		args = append(args, p.GroupCap)
	}
	var out []store.ClaimedItem
	err = s.tx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `WITH due AS (
				SELECT queue, id, run_at FROM `+candidates+`
				ORDER BY run_at, id
				LIMIT $3
				FOR UPDATE SKIP LOCKED
			)
			UPDATE queue_items q SET owner = $4, attempts = q.attempts + (q.owner <> '')::int, claims = q.claims + 1,
				run_at = date_trunc('milliseconds', COALESCE($2, now()) + $5::bigint * interval '1 millisecond')
			FROM due WHERE q.queue = due.queue AND q.id = due.id
			RETURNING q.id, q.grp, q.payload, q.attempts, q.claims, q.run_at, q.created_at, q.last_error, due.run_at`,
			args...)
		if err != nil {
			return err
		}
		type claimed struct {
			store.ClaimedItem
			due time.Time
		}
		items, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (claimed, error) {
			c := claimed{ClaimedItem: store.ClaimedItem{Claim: store.Claim{Queue: p.Queue, Owner: p.Owner}}}
			err := row.Scan(&c.ID, &c.Group, &c.Payload, &c.Attempt, &c.Token, &c.LeaseExpires, &c.EnqueuedAt, &c.LastError, &c.due)
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
			c.Attempt++
			c.LeaseExpires, c.EnqueuedAt = utc(c.LeaseExpires), utc(c.EnqueuedAt)
			out[i] = c.ClaimedItem
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claiming from queue %q: %w", p.Queue, err)
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

// Retry ends claim c as failed and makes its item due at runAt (now when zero).
func (s *Store) Retry(ctx context.Context, c store.Claim, runAt time.Time, reason string) error {
	if err := c.Validate(); err != nil {
		return err
	}
	err := s.tx(ctx, func(tx pgx.Tx) error { return s.retryTx(ctx, tx, c, runAt, reason) })
	if err != nil {
		return fmt.Errorf("retrying: %w", err)
	}
	return nil
}

// retryTx ends claim c as failed within tx (onClaimTx).
func (s *Store) retryTx(ctx context.Context, tx pgx.Tx, c store.Claim, runAt time.Time, reason string) error {
	return onClaimTx(ctx, tx, c, `UPDATE queue_items SET run_at = COALESCE($5, $6, date_trunc('milliseconds', now())), owner = '',
		attempts = attempts + 1, last_error = $7`, optionalTime(runAt), s.clock(), reason)
}

// Requeue ends claim c as planned and makes its item due at runAt (now when zero).
func (s *Store) Requeue(ctx context.Context, c store.Claim, runAt time.Time) error {
	if err := c.Validate(); err != nil {
		return err
	}
	err := s.tx(ctx, func(tx pgx.Tx) error { return s.requeueTx(ctx, tx, c, runAt) })
	if err != nil {
		return fmt.Errorf("requeuing: %w", err)
	}
	return nil
}

// requeueTx ends claim c as planned within tx (onClaimTx).
func (s *Store) requeueTx(ctx context.Context, tx pgx.Tx, c store.Claim, runAt time.Time) error {
	return onClaimTx(ctx, tx, c, `UPDATE queue_items SET run_at = COALESCE($5, $6, date_trunc('milliseconds', now())), owner = ''`,
		optionalTime(runAt), s.clock())
}

// completeTx removes the item of claim c within tx (onClaimTx).
func completeTx(ctx context.Context, tx pgx.Tx, c store.Claim) error {
	return onClaimTx(ctx, tx, c, `DELETE FROM queue_items`)
}

// Remove takes item id out of queue, claimed or not.
func (s *Store) Remove(ctx context.Context, queue, id string) error {
	if err := store.ValidateQueueItem("removing", queue, id); err != nil {
		return err
	}
	if err := s.onItem(ctx, queue, id, `DELETE FROM queue_items`); err != nil {
		return fmt.Errorf("removing %q from queue %q: %w", id, queue, err)
	}
	return nil
}

// Reschedule makes item id of queue due at runAt (now when zero), claimed or not.
func (s *Store) Reschedule(ctx context.Context, queue, id string, runAt time.Time) error {
	if err := store.ValidateQueueItem("rescheduling", queue, id); err != nil {
		return err
	}
	err := s.onItem(ctx, queue, id, `UPDATE queue_items SET run_at = COALESCE($3, $4, date_trunc('milliseconds', now())), owner = ''`,
		optionalTime(runAt), s.clock())
	if err != nil {
		return fmt.Errorf("rescheduling %q in queue %q: %w", id, queue, err)
	}
	return nil
}

// onItem runs stmt (an UPDATE or DELETE of queue_items whose parameters are numbered from
// $3) on item id of queue: store.ErrNotFound if there is none.
func (s *Store) onItem(ctx context.Context, queue, id, stmt string, args ...any) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, stmt+` WHERE queue = $1 AND id = $2`, append([]any{queue, id}, args...)...)
		if err == nil && tag.RowsAffected() == 0 {
			err = store.ErrNotFound
		}
		return err
	})
}

// onClaim runs stmt on the item of claim c, if c still holds it, in a transaction of its
// own (onClaimTx).
func (s *Store) onClaim(ctx context.Context, c store.Claim, stmt, returning string, dest []any, args ...any) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, stmt+claimCondition+returning, append([]any{c.Queue, c.ID, c.Owner, c.Token}, args...)...).Scan(dest...)
		if errors.Is(err, pgx.ErrNoRows) {
			return c.Lost()
		}
		return err
	})
}

// claimCondition selects the item of a claim (queue $1, id $2, owner $3, token $4) while
// the claim holds it.
const claimCondition = ` WHERE queue = $1 AND id = $2 AND owner = $3 AND claims = $4 `

// onClaimTx runs stmt (an UPDATE or DELETE of queue_items whose parameters are numbered
// from $5) on the item of claim c within tx, if c still holds it: c.Lost() otherwise.
func onClaimTx(ctx context.Context, tx pgx.Tx, c store.Claim, stmt string, args ...any) error {
	tag, err := tx.Exec(ctx, stmt+claimCondition, append([]any{c.Queue, c.ID, c.Owner, c.Token}, args...)...)
	if err == nil && tag.RowsAffected() == 0 {
		err = c.Lost()
	}
	return err
}
