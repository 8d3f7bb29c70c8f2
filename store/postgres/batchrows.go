package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// Batch rows (store.BatchRows): a row's body as JSON text.

const batchRowColumns = `batch_id, idx, custom_id, status_code, request_id, body, error_code, error_message, cost_nanos, created_at`

// RecordBatchRow stores a row's outcome once.
func (s *Store) RecordBatchRow(ctx context.Context, r store.BatchRow) (bool, error) {
	r, err := store.PrepareBatchRow(r, s.now)
	if err != nil {
		return false, err
	}
	var body *string
	if r.Body != nil {
		b := string(r.Body)
		body = &b
	}
	inserted := false
	err = s.tx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO batch_rows (`+batchRowColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
			ON CONFLICT (batch_id, idx) DO NOTHING`,
			r.BatchID, r.Index, r.CustomID, r.StatusCode, r.RequestID, body, r.ErrorCode, r.ErrorMessage, r.CostNanos, r.CreatedAt)
		inserted = err == nil && tag.RowsAffected() == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("recording row %d of batch %q: %w", r.Index, r.BatchID, err)
	}
	return inserted, nil
}

// BatchRowsDone returns the recorded indexes in [from, to).
func (s *Store) BatchRowsDone(ctx context.Context, batchID string, from, to int) ([]int, error) {
	var out []int
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		out = nil
		rows, err := conn.Query(ctx, `SELECT idx FROM batch_rows WHERE batch_id = $1 AND idx >= $2 AND idx < $3 ORDER BY idx`, batchID, from, to)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var i int
			if err := rows.Scan(&i); err != nil {
				return err
			}
			out = append(out, i)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("listing the rows done of batch %q: %w", batchID, err)
	}
	return out, nil
}

// CountBatchRows counts a batch's recorded rows.
func (s *Store) CountBatchRows(ctx context.Context, batchID string) (store.BatchRowCounts, error) {
	var c store.BatchRowCounts
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT COUNT(*),
			COALESCE(SUM(CASE WHEN status_code >= 200 AND status_code < 300 THEN 1 ELSE 0 END), 0),
			COALESCE(SUM(cost_nanos), 0)::BIGINT FROM batch_rows WHERE batch_id = $1`, batchID).Scan(&c.Done, &c.Completed, &c.CostNanos)
	})
	if err != nil {
		return c, fmt.Errorf("counting the rows of batch %q: %w", batchID, err)
	}
	c.Failed = c.Done - c.Completed
	return c, nil
}

// ListBatchRows returns a page of a batch's recorded rows in index order.
func (s *Store) ListBatchRows(ctx context.Context, batchID string, after, limit int) ([]store.BatchRow, error) {
	var out []store.BatchRow
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		out = nil
		rows, err := conn.Query(ctx, `SELECT `+batchRowColumns+` FROM batch_rows WHERE batch_id = $1 AND idx > $2 ORDER BY idx LIMIT $3`,
			batchID, after, store.ClampBatchRowPage(limit))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r store.BatchRow
			var body *string
			if err := rows.Scan(&r.BatchID, &r.Index, &r.CustomID, &r.StatusCode, &r.RequestID, &body, &r.ErrorCode, &r.ErrorMessage,
				&r.CostNanos, &r.CreatedAt); err != nil {
				return err
			}
			if body != nil {
				r.Body = []byte(*body)
			}
			r.CreatedAt = utc(r.CreatedAt)
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("listing the rows of batch %q: %w", batchID, err)
	}
	return out, nil
}

// DeleteBatchRows removes a batch's recorded rows.
func (s *Store) DeleteBatchRows(ctx context.Context, batchID string) error {
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM batch_rows WHERE batch_id = $1`, batchID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM batch_cancels WHERE batch_id = $1`, batchID)
		return err
	})
	if err != nil {
		return fmt.Errorf("deleting the rows of batch %q: %w", batchID, err)
	}
	return nil
}

// RequestBatchCancel records a batch's cancellation once.
func (s *Store) RequestBatchCancel(ctx context.Context, batchID string) (time.Time, error) {
	now := s.stamp(time.Time{})
	var at time.Time
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO batch_cancels (batch_id, requested_at) VALUES ($1, $2)
			ON CONFLICT (batch_id) DO NOTHING`, batchID, now); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT requested_at FROM batch_cancels WHERE batch_id = $1`, batchID).Scan(&at)
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("cancelling batch %q: %w", batchID, err)
	}
	return utc(at), nil
}

// BatchCancelRequested returns when a batch's cancellation was asked.
func (s *Store) BatchCancelRequested(ctx context.Context, batchID string) (time.Time, error) {
	var at time.Time
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT requested_at FROM batch_cancels WHERE batch_id = $1`, batchID).Scan(&at)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return time.Time{}, nil
	case err != nil:
		return time.Time{}, fmt.Errorf("reading the cancellation of batch %q: %w", batchID, err)
	}
	return utc(at), nil
}
