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

// Enqueue adds item id to queue, due at runAt (now when zero).
func (s *Store) Enqueue(ctx context.Context, queue, id string, payload []byte, runAt time.Time) error {
	if err := store.ValidateEnqueue(queue, id); err != nil {
		return err
	}
	now := s.stamp(time.Time{})
	if runAt.IsZero() {
		runAt = now
	}
	if payload == nil {
		payload = []byte{}
	}
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO queue_items (queue, id, payload, run_at, created_at) VALUES (?, ?, ?, ?, ?)`,
			queue, id, payload, millis(runAt), millis(now))
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

// Claim leases up to limit due items of queue to owner.
func (s *Store) Claim(ctx context.Context, queue, owner string, lease time.Duration, limit int) ([]store.ClaimedItem, error) {
	n, err := store.ValidateClaim(queue, owner, lease, limit)
	if err != nil {
		return nil, err
	}
	now := s.stamp(time.Time{})
	until := now.Add(lease).Truncate(time.Millisecond)
	var out []store.ClaimedItem
	err = s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		out = nil
		rows, err := tx.QueryContext(ctx, `SELECT id, payload, attempts, created_at, last_error FROM queue_items
			WHERE queue = ? AND run_at <= ? ORDER BY run_at, id LIMIT ?`, queue, millis(now), n)
		if err != nil {
			return err
		}
		ids := make([]string, 0, n)
		for rows.Next() {
			it := store.ClaimedItem{Claim: store.Claim{Queue: queue, Owner: owner}, LeaseExpires: until}
			var created int64
			if err := rows.Scan(&it.ID, &it.Payload, &it.Attempt, &created, &it.LastError); err != nil {
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
		_, err = tx.ExecContext(ctx, `UPDATE queue_items SET owner = ?, attempts = attempts + 1, run_at = ?
			WHERE queue = ? AND id IN (SELECT value FROM json_each(?))`, owner, millis(until), queue, string(list))
		return err
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

// Retry ends claim c and makes its item due at runAt (now when zero).
func (s *Store) Retry(ctx context.Context, c store.Claim, runAt time.Time, reason string) error {
	if err := c.Validate(); err != nil {
		return err
	}
	runAt = s.stamp(runAt)
	if err := s.onClaim(ctx, c, `UPDATE queue_items SET run_at = ?5, owner = '', last_error = ?6`, millis(runAt), reason); err != nil {
		return fmt.Errorf("retrying: %w", err)
	}
	return nil
}

// onClaim runs stmt (an UPDATE or DELETE of queue_items whose parameters are numbered from
// ?5) on the item of claim c, if c still holds it: c.Lost() otherwise.
func (s *Store) onClaim(ctx context.Context, c store.Claim, stmt string, args ...any) error {
	return s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, stmt+` WHERE queue = ?1 AND id = ?2 AND owner = ?3 AND attempts = ?4`,
			append([]any{c.Queue, c.ID, c.Owner, c.Attempt}, args...)...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err == nil && n == 0 {
			err = c.Lost()
		}
		return err
	})
}
