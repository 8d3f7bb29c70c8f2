package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// Batch rows (store.BatchRows): times as Unix milliseconds, a row's body as JSON text.

const batchRowColumns = `batch_id, idx, custom_id, status_code, request_id, body, error_code, error_message, cost_nanos, created_at`

// RecordBatchRow stores a row's outcome once.
func (s *Store) RecordBatchRow(ctx context.Context, r store.BatchRow) (bool, error) {
	r, err := store.PrepareBatchRow(r, s.now)
	if err != nil {
		return false, err
	}
	var body sql.NullString
	if r.Body != nil {
		body = sql.NullString{String: string(r.Body), Valid: true}
	}
	inserted := false
	err = s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO batch_rows (`+batchRowColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (batch_id, idx) DO NOTHING`,
			r.BatchID, r.Index, r.CustomID, r.StatusCode, r.RequestID, body, r.ErrorCode, r.ErrorMessage, r.CostNanos, millis(r.CreatedAt))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		inserted = n == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("recording row %d of batch %q: %w", r.Index, r.BatchID, markUnavailable(err))
	}
	return inserted, nil
}

// BatchRowsDone returns the recorded indexes in [from, to).
func (s *Store) BatchRowsDone(ctx context.Context, batchID string, from, to int) ([]int, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT idx FROM batch_rows WHERE batch_id = ? AND idx >= ? AND idx < ? ORDER BY idx`, batchID, from, to)
	if err != nil {
		return nil, fmt.Errorf("listing the rows done of batch %q: %w", batchID, markUnavailable(err))
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var i int
		if err := rows.Scan(&i); err != nil {
			return nil, fmt.Errorf("listing the rows done of batch %q: %w", batchID, err)
		}
		out = append(out, i)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing the rows done of batch %q: %w", batchID, markUnavailable(err))
	}
	return out, nil
}

// CountBatchRows counts a batch's recorded rows.
func (s *Store) CountBatchRows(ctx context.Context, batchID string) (store.BatchRowCounts, error) {
	var c store.BatchRowCounts
	err := s.r.QueryRowContext(ctx, `SELECT COUNT(*),
		COALESCE(SUM(CASE WHEN status_code >= 200 AND status_code < 300 THEN 1 ELSE 0 END), 0),
		COALESCE(SUM(cost_nanos), 0) FROM batch_rows WHERE batch_id = ?`, batchID).Scan(&c.Done, &c.Completed, &c.CostNanos)
	if err != nil {
		return c, fmt.Errorf("counting the rows of batch %q: %w", batchID, markUnavailable(err))
	}
	c.Failed = c.Done - c.Completed
	return c, nil
}

// ListBatchRows returns a page of a batch's recorded rows in index order.
func (s *Store) ListBatchRows(ctx context.Context, batchID string, after, limit int) ([]store.BatchRow, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+batchRowColumns+` FROM batch_rows WHERE batch_id = ? AND idx > ? ORDER BY idx LIMIT ?`,
		batchID, after, store.ClampBatchRowPage(limit))
	if err != nil {
		return nil, fmt.Errorf("listing the rows of batch %q: %w", batchID, markUnavailable(err))
	}
	defer rows.Close()
	var out []store.BatchRow
	for rows.Next() {
		var r store.BatchRow
		var body sql.NullString
		var created int64
		if err := rows.Scan(&r.BatchID, &r.Index, &r.CustomID, &r.StatusCode, &r.RequestID, &body, &r.ErrorCode, &r.ErrorMessage,
			&r.CostNanos, &created); err != nil {
			return nil, fmt.Errorf("listing the rows of batch %q: %w", batchID, err)
		}
		if body.Valid {
			r.Body = []byte(body.String)
		}
		r.CreatedAt = fromMillis(created)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing the rows of batch %q: %w", batchID, markUnavailable(err))
	}
	return out, nil
}

// DeleteBatchRows removes a batch's recorded rows.
func (s *Store) DeleteBatchRows(ctx context.Context, batchID string) error {
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM batch_rows WHERE batch_id = ?`, batchID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM batch_cancels WHERE batch_id = ?`, batchID)
		return err
	})
	if err != nil {
		return fmt.Errorf("deleting the rows of batch %q: %w", batchID, markUnavailable(err))
	}
	return nil
}

// RequestBatchCancel records a batch's cancellation once.
func (s *Store) RequestBatchCancel(ctx context.Context, batchID string) (time.Time, error) {
	now := s.stamp(time.Time{})
	var at int64
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO batch_cancels (batch_id, requested_at) VALUES (?, ?)
			ON CONFLICT (batch_id) DO NOTHING`, batchID, millis(now)); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, `SELECT requested_at FROM batch_cancels WHERE batch_id = ?`, batchID).Scan(&at)
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("cancelling batch %q: %w", batchID, markUnavailable(err))
	}
	return fromMillis(at), nil
}

// BatchCancelRequested returns when a batch's cancellation was asked.
func (s *Store) BatchCancelRequested(ctx context.Context, batchID string) (time.Time, error) {
	var at int64
	err := s.r.QueryRowContext(ctx, `SELECT requested_at FROM batch_cancels WHERE batch_id = ?`, batchID).Scan(&at)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return time.Time{}, nil
	case err != nil:
		return time.Time{}, fmt.Errorf("reading the cancellation of batch %q: %w", batchID, markUnavailable(err))
	}
	return fromMillis(at), nil
}
