package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// Deliveries (store.Deliveries): the outbox rows, and their attempts.

const deliveryColumns = `id, workspace_id, job_id, target, event_type, payload, status, attempts, next_at, created_at, updated_at`

// insertDelivery writes delivery d and enqueues it, within tx.
func (s *Store) insertDelivery(ctx context.Context, tx *sql.Tx, d store.Delivery) error {
	item, err := d.Enqueue()
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO deliveries (`+deliveryColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		d.ID, d.WorkspaceID, d.JobID, d.Target, d.EventType, string(d.Payload), d.Status, d.Attempts,
		millis(d.NextAt), millis(d.CreatedAt), millis(d.UpdatedAt))
	if err != nil {
		return fmt.Errorf("delivery %q: %w", d.ID, jobWriteError(err))
	}
	if err := s.enqueueTx(ctx, tx, item); err != nil {
		return fmt.Errorf("delivery %q: %w", d.ID, err)
	}
	return nil
}

func scanDelivery(row scanner) (store.Delivery, error) {
	var d store.Delivery
	var payload string
	var next sql.NullInt64
	var created, updated int64
	err := row.Scan(&d.ID, &d.WorkspaceID, &d.JobID, &d.Target, &d.EventType, &payload, &d.Status, &d.Attempts, &next, &created, &updated)
	if err != nil {
		return store.Delivery{}, err
	}
	d.Payload = []byte(payload)
	if next.Valid {
		d.NextAt = fromMillis(next.Int64)
	}
	d.CreatedAt, d.UpdatedAt = fromMillis(created), fromMillis(updated)
	return d, nil
}

// GetDelivery returns a delivery of the workspace.
func (s *Store) GetDelivery(ctx context.Context, workspaceID, id string) (store.Delivery, error) {
	d, err := scanDelivery(s.r.QueryRowContext(ctx, `SELECT `+deliveryColumns+` FROM deliveries WHERE workspace_id = ? AND id = ?`, workspaceID, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Delivery{}, fmt.Errorf("delivery %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Delivery{}, fmt.Errorf("getting delivery %q: %w", id, markUnavailable(err))
	}
	return d, nil
}

// RecordAttempt records attempt a at the delivery of claim c, and retries or completes
// the claim, in one transaction.
func (s *Store) RecordAttempt(ctx context.Context, c store.Claim, a store.DeliveryAttempt, next time.Time) error {
	a, err := store.ValidateAttempt(c, a, next, s.now)
	if err != nil {
		return err
	}
	now := s.stamp(time.Time{})
	var nextAt any
	if !a.NextAt.IsZero() {
		nextAt = millis(a.NextAt)
	}
	err = s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		if a.NextAt.IsZero() {
			err = onClaimTx(ctx, tx, c, `DELETE FROM queue_items`)
		} else {
			err = onClaimTx(ctx, tx, c, retryStatement, millis(a.NextAt), a.Error)
		}
		if err != nil {
			return err
		}
		var ws string
		err = tx.QueryRowContext(ctx, `UPDATE deliveries SET attempts = attempts + 1, status = ?, next_at = ?, updated_at = ?
			WHERE id = ? RETURNING workspace_id, job_id, event_type, attempts`,
			store.FinalStatus(a), nextAt, millis(now), c.ID).Scan(&ws, &a.JobID, &a.EventType, &a.Number)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("delivery %q: %w", c.ID, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO delivery_attempts (id, delivery_id, workspace_id, job_id, number, event_type,
				status_code, delivered, error, response_preview, duration_ms, next_at, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			store.AttemptID(c.ID, a.Number), c.ID, ws, a.JobID, a.Number, a.EventType,
			a.StatusCode, a.Delivered, a.Error, a.ResponsePreview, a.Duration.Milliseconds(), nextAt, millis(a.At))
		return err
	})
	if err != nil {
		return fmt.Errorf("recording an attempt at delivery %q: %w", c.ID, err)
	}
	return nil
}

// SkipDelivery completes claim c and ends its delivery as skipped, in one transaction.
func (s *Store) SkipDelivery(ctx context.Context, c store.Claim) error {
	if err := c.Validate(); err != nil {
		return err
	}
	now := s.stamp(time.Time{})
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := onClaimTx(ctx, tx, c, `DELETE FROM queue_items`); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE deliveries SET status = ?, next_at = NULL, updated_at = ? WHERE id = ?`,
			store.DeliverySkipped, millis(now), c.ID)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err == nil && n == 0 {
			err = fmt.Errorf("delivery %q: %w", c.ID, store.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("skipping delivery %q: %w", c.ID, err)
	}
	return nil
}

const attemptColumns = `id, delivery_id, job_id, event_type, number, status_code, delivered, error, response_preview, duration_ms, next_at, created_at`

func scanAttempt(row scanner) (store.DeliveryAttempt, error) {
	var a store.DeliveryAttempt
	var durationMs, at int64
	var next sql.NullInt64
	err := row.Scan(&a.ID, &a.DeliveryID, &a.JobID, &a.EventType, &a.Number, &a.StatusCode, &a.Delivered, &a.Error,
		&a.ResponsePreview, &durationMs, &next, &at)
	if err != nil {
		return store.DeliveryAttempt{}, err
	}
	a.Duration = time.Duration(durationMs) * time.Millisecond
	if next.Valid {
		a.NextAt = fromMillis(next.Int64)
	}
	a.At = fromMillis(at)
	return a, nil
}

// ListAttempts returns a page of the attempts q selects, oldest first.
func (s *Store) ListAttempts(ctx context.Context, q store.AttemptQuery) ([]store.DeliveryAttempt, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	l := listing{table: "delivery_attempts", columns: attemptColumns, where: `workspace_id = ?`, args: []any{q.WorkspaceID}, desc: q.Newest}
	if q.JobID != "" {
		l.where += ` AND job_id = ?`
		l.args = append(l.args, q.JobID)
	}
	if q.DeliveryID != "" {
		l.where += ` AND delivery_id = ?`
		l.args = append(l.args, q.DeliveryID)
	}
	out, err := readListing(ctx, s.r, l, q.Page, scanAttempt)
	if err != nil {
		return nil, fmt.Errorf("listing delivery attempts: %w", markUnavailable(err))
	}
	return out, nil
}

// JobDeliveryStats sums up the deliveries of a job and their attempts, in one statement
// (one snapshot) for the counts and one for the delivered types.
func (s *Store) JobDeliveryStats(ctx context.Context, workspaceID, jobID string) (store.DeliveryStats, error) {
	var st store.DeliveryStats
	var nextRetry, lastAttempt, lastDelivered, lastFailure sql.NullInt64
	err := s.r.QueryRowContext(ctx, `SELECT
			(SELECT COUNT(*) FROM deliveries WHERE workspace_id = ?1 AND job_id = ?2),
			(SELECT COUNT(*) FROM deliveries WHERE workspace_id = ?1 AND job_id = ?2 AND status = ?3),
			(SELECT COUNT(*) FROM deliveries WHERE workspace_id = ?1 AND job_id = ?2 AND status = ?4 AND attempts > 0),
			(SELECT MIN(next_at) FROM deliveries WHERE workspace_id = ?1 AND job_id = ?2 AND status = ?4 AND attempts > 0),
			(SELECT COUNT(*) FROM delivery_attempts WHERE workspace_id = ?1 AND job_id = ?2),
			(SELECT MAX(created_at) FROM delivery_attempts WHERE workspace_id = ?1 AND job_id = ?2),
			(SELECT MAX(created_at) FROM delivery_attempts WHERE workspace_id = ?1 AND job_id = ?2 AND delivered = 1),
			(SELECT MAX(created_at) FROM delivery_attempts WHERE workspace_id = ?1 AND job_id = ?2 AND delivered = 0),
			COALESCE((SELECT status_code FROM delivery_attempts WHERE workspace_id = ?1 AND job_id = ?2
				ORDER BY created_at DESC, id DESC LIMIT 1), 0),
			COALESCE((SELECT error FROM delivery_attempts WHERE workspace_id = ?1 AND job_id = ?2 AND delivered = 0
				ORDER BY created_at DESC, id DESC LIMIT 1), '')`,
		workspaceID, jobID, store.DeliveryDelivered, store.DeliveryPending).Scan(
		&st.Events, &st.DeliveredEvents, &st.PendingRetries, &nextRetry, &st.TotalAttempts,
		&lastAttempt, &lastDelivered, &lastFailure, &st.LastStatusCode, &st.LastError)
	if err != nil {
		return store.DeliveryStats{}, fmt.Errorf("summing up the deliveries of job %q: %w", jobID, markUnavailable(err))
	}
	for _, t := range []struct {
		v   sql.NullInt64
		dst *time.Time
	}{{nextRetry, &st.NextRetryAt}, {lastAttempt, &st.LastAttemptAt}, {lastDelivered, &st.LastDeliveredAt}, {lastFailure, &st.LastFailureAt}} {
		if t.v.Valid {
			*t.dst = fromMillis(t.v.Int64)
		}
	}
	if st.DeliveredEvents == 0 {
		return st, nil
	}
	rows, err := s.r.QueryContext(ctx, `SELECT DISTINCT event_type FROM deliveries
		WHERE workspace_id = ? AND job_id = ? AND status = ? ORDER BY event_type`, workspaceID, jobID, store.DeliveryDelivered)
	if err == nil {
		st.DeliveredEventTypes, err = scanStrings(rows)
	}
	if err != nil {
		return store.DeliveryStats{}, fmt.Errorf("listing the delivered event types of job %q: %w", jobID, markUnavailable(err))
	}
	return st, nil
}

func scanStrings(rows *sql.Rows) ([]string, error) {
	defer func() { _ = rows.Close() }()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
