package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// Deliveries (store.Deliveries): the outbox rows, and their attempts.

const deliveryColumns = `id, workspace_id, job_id, target, event_type, payload, status, attempts, next_at, created_at, updated_at`

// insertDelivery writes delivery d and enqueues it, within tx.
func (s *Store) insertDelivery(ctx context.Context, tx pgx.Tx, d store.Delivery) error {
	item, err := d.Enqueue()
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO deliveries (`+deliveryColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
		d.ID, d.WorkspaceID, d.JobID, d.Target, d.EventType, string(d.Payload), d.Status, d.Attempts,
		d.NextAt, d.CreatedAt, d.UpdatedAt)
	if err != nil {
		return fmt.Errorf("delivery %q: %w", d.ID, jobWriteError(err))
	}
	if err := s.enqueueTx(ctx, tx, item); err != nil {
		return fmt.Errorf("delivery %q: %w", d.ID, err)
	}
	return nil
}

func scanDelivery(row pgx.Row) (store.Delivery, error) {
	var d store.Delivery
	var next *time.Time
	err := row.Scan(&d.ID, &d.WorkspaceID, &d.JobID, &d.Target, &d.EventType, &d.Payload, &d.Status, &d.Attempts, &next, &d.CreatedAt, &d.UpdatedAt)
	if err != nil {
		return store.Delivery{}, err
	}
	if next != nil {
		d.NextAt = utc(*next)
	}
	d.CreatedAt, d.UpdatedAt = utc(d.CreatedAt), utc(d.UpdatedAt)
	return d, nil
}

// GetDelivery returns a delivery of the workspace.
func (s *Store) GetDelivery(ctx context.Context, workspaceID, id string) (store.Delivery, error) {
	var d store.Delivery
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		var err error
		d, err = scanDelivery(conn.QueryRow(ctx, `SELECT `+deliveryColumns+` FROM deliveries WHERE workspace_id = $1 AND id = $2`, workspaceID, id))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Delivery{}, fmt.Errorf("delivery %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Delivery{}, fmt.Errorf("getting delivery %q: %w", id, err)
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
	nextAt := optionalTime(a.NextAt)
	err = s.tx(ctx, func(tx pgx.Tx) error {
		var err error
		if nextAt == nil {
			err = completeTx(ctx, tx, c)
		} else {
			err = s.retryTx(ctx, tx, c, a.NextAt, a.Error)
		}
		if err != nil {
			return err
		}
		var ws string
		rec := a
		err = tx.QueryRow(ctx, `UPDATE deliveries SET attempts = attempts + 1, status = $1, next_at = $2, updated_at = $3
			WHERE id = $4 RETURNING workspace_id, job_id, event_type, attempts`,
			store.FinalStatus(a), nextAt, now, c.ID).Scan(&ws, &rec.JobID, &rec.EventType, &rec.Number)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("delivery %q: %w", c.ID, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO delivery_attempts (id, delivery_id, workspace_id, job_id, number, event_type,
				status_code, delivered, error, response_preview, duration_ms, next_at, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
			store.AttemptID(c.ID, rec.Number), c.ID, ws, rec.JobID, rec.Number, rec.EventType,
			rec.StatusCode, rec.Delivered, rec.Error, rec.ResponsePreview, rec.Duration.Milliseconds(), nextAt, rec.At)
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
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if err := completeTx(ctx, tx, c); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE deliveries SET status = $1, next_at = NULL, updated_at = $2 WHERE id = $3`,
			store.DeliverySkipped, now, c.ID)
		if err == nil && tag.RowsAffected() == 0 {
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

func scanAttempt(row pgx.Row) (store.DeliveryAttempt, error) {
	var a store.DeliveryAttempt
	var durationMs int64
	var next *time.Time
	err := row.Scan(&a.ID, &a.DeliveryID, &a.JobID, &a.EventType, &a.Number, &a.StatusCode, &a.Delivered, &a.Error,
		&a.ResponsePreview, &durationMs, &next, &a.At)
	if err != nil {
		return store.DeliveryAttempt{}, err
	}
	a.Duration = time.Duration(durationMs) * time.Millisecond
	if next != nil {
		a.NextAt = utc(*next)
	}
	a.At = utc(a.At)
	return a, nil
}

// ListAttempts returns a page of the attempts q selects, oldest first.
func (s *Store) ListAttempts(ctx context.Context, q store.AttemptQuery) ([]store.DeliveryAttempt, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	l := listing{table: "delivery_attempts", columns: attemptColumns, where: `workspace_id = $1`, args: []any{q.WorkspaceID}, desc: q.Newest}
	if q.JobID != "" {
		l.args = append(l.args, q.JobID)
		l.where += ` AND job_id = $` + strconv.Itoa(len(l.args))
	}
	if q.DeliveryID != "" {
		l.args = append(l.args, q.DeliveryID)
		l.where += ` AND delivery_id = $` + strconv.Itoa(len(l.args))
	}
	var out []store.DeliveryAttempt
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		var err error
		out, err = readListing(ctx, conn, l, q.Page, scanAttempt)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing delivery attempts: %w", err)
	}
	return out, nil
}

// JobDeliveryStats sums up the deliveries of a job and their attempts, in one statement
// (one snapshot) for the counts and one for the delivered types.
func (s *Store) JobDeliveryStats(ctx context.Context, workspaceID, jobID string) (store.DeliveryStats, error) {
	var st store.DeliveryStats
	var nextRetry, lastAttempt, lastDelivered, lastFailure *time.Time
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		err := conn.QueryRow(ctx, `SELECT
				(SELECT COUNT(*) FROM deliveries WHERE workspace_id = $1 AND job_id = $2),
				(SELECT COUNT(*) FROM deliveries WHERE workspace_id = $1 AND job_id = $2 AND status = $3),
				(SELECT COUNT(*) FROM deliveries WHERE workspace_id = $1 AND job_id = $2 AND status = $4 AND attempts > 0),
				(SELECT MIN(next_at) FROM deliveries WHERE workspace_id = $1 AND job_id = $2 AND status = $4 AND attempts > 0),
				(SELECT COUNT(*) FROM delivery_attempts WHERE workspace_id = $1 AND job_id = $2),
				(SELECT MAX(created_at) FROM delivery_attempts WHERE workspace_id = $1 AND job_id = $2),
				(SELECT MAX(created_at) FROM delivery_attempts WHERE workspace_id = $1 AND job_id = $2 AND delivered),
				(SELECT MAX(created_at) FROM delivery_attempts WHERE workspace_id = $1 AND job_id = $2 AND NOT delivered),
				COALESCE((SELECT status_code FROM delivery_attempts WHERE workspace_id = $1 AND job_id = $2
					ORDER BY created_at DESC, id DESC LIMIT 1), 0),
				COALESCE((SELECT error FROM delivery_attempts WHERE workspace_id = $1 AND job_id = $2 AND NOT delivered
					ORDER BY created_at DESC, id DESC LIMIT 1), '')`,
			workspaceID, jobID, store.DeliveryDelivered, store.DeliveryPending).Scan(
			&st.Events, &st.DeliveredEvents, &st.PendingRetries, &nextRetry, &st.TotalAttempts,
			&lastAttempt, &lastDelivered, &lastFailure, &st.LastStatusCode, &st.LastError)
		if err != nil || st.DeliveredEvents == 0 {
			return err
		}
		rows, err := conn.Query(ctx, `SELECT DISTINCT event_type FROM deliveries
			WHERE workspace_id = $1 AND job_id = $2 AND status = $3 ORDER BY event_type`, workspaceID, jobID, store.DeliveryDelivered)
		if err != nil {
			return err
		}
		st.DeliveredEventTypes, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return store.DeliveryStats{}, fmt.Errorf("summing up the deliveries of job %q: %w", jobID, err)
	}
	for _, t := range []struct {
		v   *time.Time
		dst *time.Time
	}{{nextRetry, &st.NextRetryAt}, {lastAttempt, &st.LastAttemptAt}, {lastDelivered, &st.LastDeliveredAt}, {lastFailure, &st.LastFailureAt}} {
		if t.v != nil {
			*t.dst = utc(*t.v)
		}
	}
	return st, nil
}
