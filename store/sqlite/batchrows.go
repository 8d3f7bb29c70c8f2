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

// RecordBatchRows stores rows' outcomes, each once, in one write op: the rows of a batch's
// chunk gathered while they were answered share a savepoint and a commit.
func (s *Store) RecordBatchRows(ctx context.Context, rows []store.BatchRow) (int, error) {
	prepared := make([]store.BatchRow, len(rows))
	for i, r := range rows {
		p, err := store.PrepareBatchRow(r, s.now)
		if err != nil {
			return 0, err
		}
		prepared[i] = p
	}
	if len(prepared) == 0 {
		return 0, nil
	}
	inserted := 0
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		inserted = 0
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO batch_rows (`+batchRowColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (batch_id, idx) DO NOTHING`)
		if err != nil {
			return err
		}
		defer func() { _ = stmt.Close() }()
		for _, r := range prepared {
			var body sql.NullString
			if r.Body != nil {
				body = sql.NullString{String: string(r.Body), Valid: true}
			}
			res, err := stmt.ExecContext(ctx, r.BatchID, r.Index, r.CustomID, r.StatusCode, r.RequestID, body, r.ErrorCode, r.ErrorMessage, r.CostNanos, millis(r.CreatedAt))
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			inserted += int(n)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("recording %d rows of batch %q: %w", len(prepared), prepared[0].BatchID, markUnavailable(err))
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

// CountBatchRows reads a batch's counts, kept by the triggers of batch_rows (migration
// 15).
func (s *Store) CountBatchRows(ctx context.Context, batchID string) (store.BatchRowCounts, error) {
	var c store.BatchRowCounts
	err := s.r.QueryRowContext(ctx, `SELECT done, completed, cost_nanos FROM batch_row_counts WHERE batch_id = ?`, batchID).
		Scan(&c.Done, &c.Completed, &c.CostNanos)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.BatchRowCounts{}, nil
	case err != nil:
		return store.BatchRowCounts{}, fmt.Errorf("counting the rows of batch %q: %w", batchID, markUnavailable(err))
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

// DeleteBatchRows removes a batch's rows a page a write (the triggers of batch_rows take
// them off the counts), then its counts and its cancellation.
func (s *Store) DeleteBatchRows(ctx context.Context, batchID string) error {
	for {
		last := false
		err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, `DELETE FROM batch_rows WHERE batch_id = ? AND idx IN
				(SELECT idx FROM batch_rows WHERE batch_id = ? ORDER BY idx LIMIT ?)`, batchID, batchID, store.BatchRowDeletePage)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if last = n < store.BatchRowDeletePage; err != nil || !last {
				return err
			}
			// No row is left: the one writer makes that exact within this write.
			if _, err := tx.ExecContext(ctx, `DELETE FROM batch_row_counts WHERE batch_id = ?`, batchID); err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, `DELETE FROM batch_cancels WHERE batch_id = ?`, batchID)
			return err
		})
		if err != nil {
			return fmt.Errorf("deleting the rows of batch %q: %w", batchID, markUnavailable(err))
		}
		if last {
			return nil
		}
	}
}

// EndedBatchesWithRows lists the batches ended before endedBefore that still have rows
// (their counts) or a cancellation.
func (s *Store) EndedBatchesWithRows(ctx context.Context, endedBefore time.Time, limit int) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT b.batch_id FROM
		(SELECT batch_id FROM batch_row_counts UNION SELECT batch_id FROM batch_cancels) b
		JOIN jobs j ON j.id = b.batch_id
		WHERE j.kind = ? AND j.completed_at < ? ORDER BY j.completed_at, b.batch_id LIMIT ?`,
		store.JobBatch, millis(endedBefore), store.ClampBatchRowPage(limit))
	if err != nil {
		return nil, fmt.Errorf("listing the ended batches with rows: %w", markUnavailable(err))
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("listing the ended batches with rows: %w", err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing the ended batches with rows: %w", markUnavailable(err))
	}
	return out, nil
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
