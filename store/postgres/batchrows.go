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

// Batch rows (store.BatchRows): a row's body as JSON text.

const batchRowColumns = `batch_id, idx, custom_id, status_code, request_id, body, error_code, error_message, cost_nanos, created_at`

// insertBatchRow records a row unless its index is recorded: a row skipped fires none of
// the triggers that keep the counts.
const insertBatchRow = `INSERT INTO batch_rows (` + batchRowColumns + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
	ON CONFLICT (batch_id, idx) DO NOTHING`

// batchRowArgs are insertBatchRow's arguments for row r.
func batchRowArgs(r store.BatchRow) []any {
	var body *string
	if r.Body != nil {
		b := string(r.Body)
		body = &b
	}
	return []any{r.BatchID, r.Index, r.CustomID, r.StatusCode, r.RequestID, body, r.ErrorCode, r.ErrorMessage, r.CostNanos, r.CreatedAt}
}

// RecordBatchRow stores a row's outcome once.
func (s *Store) RecordBatchRow(ctx context.Context, r store.BatchRow) (bool, error) {
	r, err := store.PrepareBatchRow(r, s.now)
	if err != nil {
		return false, err
	}
	inserted := false
	err = s.tx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, insertBatchRow, batchRowArgs(r)...)
		inserted = err == nil && tag.RowsAffected() == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("recording row %d of batch %q: %w", r.Index, r.BatchID, err)
	}
	return inserted, nil
}

// RecordBatchRows stores rows' outcomes, each once, in one transaction, the rows of one
// batch after another's in the order of the batches' ids: the batches' counts, which the
// triggers of batch_rows lock at the commit in the order the rows went in, are then taken
// in that order by every write, so that two writes never wait for each other's. The
// inserts, a row each as RecordBatchRow's, go to the server together (a pgx batch), in
// one round trip rather than one a row.
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
	slices.SortStableFunc(prepared, func(a, b store.BatchRow) int { return strings.Compare(a.BatchID, b.BatchID) })
	inserted := 0
	err := s.tx(ctx, func(tx pgx.Tx) error {
		inserted = 0
		inserts := &pgx.Batch{}
		for _, r := range prepared {
			inserts.Queue(insertBatchRow, batchRowArgs(r)...)
		}
		results := tx.SendBatch(ctx, inserts)
		for range prepared {
			tag, err := results.Exec()
			if err != nil {
				_ = results.Close()
				return err
			}
			inserted += int(tag.RowsAffected())
		}
		return results.Close()
	})
	if err != nil {
		return 0, fmt.Errorf("recording %d rows of batch %q: %w", len(prepared), prepared[0].BatchID, err)
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

// CountBatchRows reads a batch's counts, kept by the triggers of batch_rows (migration
// 15).
func (s *Store) CountBatchRows(ctx context.Context, batchID string) (store.BatchRowCounts, error) {
	var c store.BatchRowCounts
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT done, completed, cost_nanos FROM batch_row_counts WHERE batch_id = $1`, batchID).
			Scan(&c.Done, &c.Completed, &c.CostNanos)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return store.BatchRowCounts{}, nil
	case err != nil:
		return store.BatchRowCounts{}, fmt.Errorf("counting the rows of batch %q: %w", batchID, err)
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

// DeleteBatchRows removes a batch's rows a page a transaction, then its counts and its
// cancellation.
func (s *Store) DeleteBatchRows(ctx context.Context, batchID string) error {
	for {
		last := false
		err := s.tx(ctx, func(tx pgx.Tx) error {
			// The counts first, locked, made if the batch has none (its rows all deleted
			// while a write recorded more): a write recording rows of the batch takes them
			// at its commit (the triggers of batch_rows), so every write either committed
			// before this took them, and each of this transaction's statements sees its
			// rows and counts, or waits until this commits and then counts its rows on
			// what this left. The triggers take the rows deleted off the counts.
			if _, err := tx.Exec(ctx, `INSERT INTO batch_row_counts (batch_id, done, completed, cost_nanos) VALUES ($1, 0, 0, 0)
				ON CONFLICT (batch_id) DO UPDATE SET done = batch_row_counts.done`, batchID); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, `DELETE FROM batch_rows WHERE batch_id = $1 AND idx IN
				(SELECT idx FROM batch_rows WHERE batch_id = $1 ORDER BY idx LIMIT $2)`, batchID, store.BatchRowDeletePage)
			if err != nil {
				return err
			}
			if last = tag.RowsAffected() < store.BatchRowDeletePage; !last {
				return nil
			}
			if _, err := tx.Exec(ctx, `DELETE FROM batch_row_counts WHERE batch_id = $1`, batchID); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `DELETE FROM batch_cancels WHERE batch_id = $1`, batchID)
			return err
		})
		if err != nil {
			return fmt.Errorf("deleting the rows of batch %q: %w", batchID, err)
		}
		if last {
			return nil
		}
	}
}

// EndedBatchesWithRows lists the batches ended before endedBefore that still have rows
// (their counts) or a cancellation.
func (s *Store) EndedBatchesWithRows(ctx context.Context, endedBefore time.Time, limit int) ([]string, error) {
	var out []string
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		out = nil
		rows, err := conn.Query(ctx, `SELECT b.batch_id FROM
			(SELECT batch_id FROM batch_row_counts UNION SELECT batch_id FROM batch_cancels) b
			JOIN jobs j ON j.id = b.batch_id
			WHERE j.kind = $1 AND j.completed_at < $2 ORDER BY j.completed_at, b.batch_id LIMIT $3`,
			store.JobBatch, endedBefore, store.ClampBatchRowPage(limit))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			out = append(out, id)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("listing the ended batches with rows: %w", err)
	}
	return out, nil
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
