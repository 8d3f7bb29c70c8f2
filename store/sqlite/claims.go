package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// Claims (store.Claims). Every claim runs in one write transaction, and SQLite has one
// writer at a time (this process's writer goroutine, and BEGIN IMMEDIATE against other
// processes on the file): a claim reads the due items and leases them before any other
// claim reads, so no two claims take the same item. Times are the store's clock.
//
// queue_items.claims is the fence (store.Claim.Token) and attempts the failures: a Claim
// counts a failure for an item whose owner is still set, since only a lease that ran out
// leaves one on a due item (Retry, Requeue and Reschedule clear it).

// Enqueue adds an item to a queue, due at p.RunAt (now when zero).
func (s *Store) Enqueue(ctx context.Context, p store.EnqueueParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return s.enqueueTx(ctx, tx, p)
	})
	if err != nil {
		return fmt.Errorf("enqueuing %q in queue %q: %w", p.ID, p.Queue, err)
	}
	return nil
}

// enqueueTx inserts the item p into its queue within tx.
func (s *Store) enqueueTx(ctx context.Context, tx *sql.Tx, p store.EnqueueParams) error {
	now := s.stamp(time.Time{})
	runAt := s.stamp(p.RunAt)
	if p.RunAt.IsZero() {
		runAt = now
	}
	payload := p.Payload
	if payload == nil {
		payload = []byte{}
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO queue_items (queue, id, grp, payload, run_at, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
		p.Queue, p.ID, p.Group, payload, millis(runAt), millis(now))
	if isConflict(err) {
		return store.ErrConflict
	}
	return err
}

// Claim leases up to p.Limit due items of p.Queue to p.Owner.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) ([]store.ClaimedItem, error) {
	n, err := p.Validate()
	if err != nil {
		return nil, err
	}
	now := s.stamp(time.Time{})
	until := now.Add(p.Lease).Truncate(time.Millisecond)
	// Uncapped, the due items in order; capped, each group's first items up to what its
	// leased items leave of the cap.
	due := `SELECT id, run_at FROM queue_items WHERE queue = ?1 AND run_at <= ?2`
	args := []any{p.Queue, millis(now), n}
	if p.GroupCap > 0 {
		args = append(args, p.GroupCap)
		due = `SELECT d.id, d.run_at FROM (
				SELECT id, grp, run_at, ROW_NUMBER() OVER (PARTITION BY grp ORDER BY run_at, id) AS rank
				FROM queue_items WHERE queue = ?1 AND run_at <= ?2
			) d LEFT JOIN (
				SELECT grp, COUNT(*) AS n FROM queue_items
				WHERE queue = ?1 AND owner <> '' AND run_at > ?2 AND grp <> '' GROUP BY grp
			) leased ON leased.grp = d.grp
			WHERE d.grp = '' OR d.rank + COALESCE(leased.n, 0) <= ?4`
	}
	var out []store.ClaimedItem
	err = s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		out = nil
		rows, err := tx.QueryContext(ctx, `SELECT q.id, q.grp, q.payload, q.attempts + (q.owner <> ''), q.claims + 1, q.created_at, q.last_error
			FROM (`+due+`) due JOIN queue_items q ON q.queue = ?1 AND q.id = due.id
			ORDER BY due.run_at, due.id LIMIT ?3`, args...)
		if err != nil {
			return err
		}
		ids := make([]string, 0, n)
		for rows.Next() {
			it := store.ClaimedItem{Claim: store.Claim{Queue: p.Queue, Owner: p.Owner}, LeaseExpires: until}
			var created int64
			if err := rows.Scan(&it.ID, &it.Group, &it.Payload, &it.Attempt, &it.Token, &created, &it.LastError); err != nil {
				_ = rows.Close()
				return err
			}
			it.Attempt++
			it.EnqueuedAt = fromMillis(created)
			out = append(out, it)
			ids = append(ids, it.ID)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil || len(ids) == 0 {
			return err
		}
		list, err := json.Marshal(ids)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE queue_items SET owner = ?, attempts = attempts + (owner <> ''), claims = claims + 1, run_at = ?
			WHERE queue = ? AND id IN (SELECT value FROM json_each(?))`, p.Owner, millis(until), p.Queue, string(list))
		return err
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
	until := s.stamp(time.Time{}).Add(lease).Truncate(time.Millisecond)
	if err := s.onClaim(ctx, c, `UPDATE queue_items SET run_at = ?5`, millis(until)); err != nil {
		return time.Time{}, fmt.Errorf("extending: %w", err)
	}
	return until, nil
}

// Complete removes the item of claim c.
func (s *Store) Complete(ctx context.Context, c store.Claim) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if err := s.onClaim(ctx, c, `DELETE FROM queue_items`); err != nil {
		return fmt.Errorf("completing: %w", err)
	}
	return nil
}

// Retry ends claim c as failed and makes its item due at runAt (now when zero).
func (s *Store) Retry(ctx context.Context, c store.Claim, runAt time.Time, reason string) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if err := s.onClaim(ctx, c, retryStatement, millis(s.stamp(runAt)), reason); err != nil {
		return fmt.Errorf("retrying: %w", err)
	}
	return nil
}

// retryStatement ends a claim as failed (onClaim): due at ?5, with the reason ?6.
const retryStatement = `UPDATE queue_items SET run_at = ?5, owner = '', attempts = attempts + 1, last_error = ?6`

// requeueStatement ends a claim as planned (onClaim): due at ?5.
const requeueStatement = `UPDATE queue_items SET run_at = ?5, owner = ''`

// Requeue ends claim c as planned and makes its item due at runAt (now when zero).
func (s *Store) Requeue(ctx context.Context, c store.Claim, runAt time.Time) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if err := s.onClaim(ctx, c, requeueStatement, millis(s.stamp(runAt))); err != nil {
		return fmt.Errorf("requeuing: %w", err)
	}
	return nil
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
	if err := s.onItem(ctx, queue, id, `UPDATE queue_items SET run_at = ?3, owner = ''`, millis(s.stamp(runAt))); err != nil {
		return fmt.Errorf("rescheduling %q in queue %q: %w", id, queue, err)
	}
	return nil
}

// onItem runs stmt (an UPDATE or DELETE of queue_items whose parameters are numbered from
// ?3) on item id of queue: store.ErrNotFound if there is none.
func (s *Store) onItem(ctx context.Context, queue, id, stmt string, args ...any) error {
	return s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, stmt+` WHERE queue = ?1 AND id = ?2`, append([]any{queue, id}, args...)...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err == nil && n == 0 {
			err = store.ErrNotFound
		}
		return err
	})
}

// onClaim runs stmt on the item of claim c, if c still holds it, in a write of its own
// (onClaimTx).
func (s *Store) onClaim(ctx context.Context, c store.Claim, stmt string, args ...any) error {
	return s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return onClaimTx(ctx, tx, c, stmt, args...)
	})
}

// onClaimTx runs stmt (an UPDATE or DELETE of queue_items whose parameters are numbered
// from ?5) on the item of claim c within tx, if c still holds it: c.Lost() otherwise.
func onClaimTx(ctx context.Context, tx *sql.Tx, c store.Claim, stmt string, args ...any) error {
	res, err := tx.ExecContext(ctx, stmt+` WHERE queue = ?1 AND id = ?2 AND owner = ?3 AND claims = ?4`,
		append([]any{c.Queue, c.ID, c.Owner, c.Token}, args...)...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err == nil && n == 0 {
		err = c.Lost()
	}
	return err
}
