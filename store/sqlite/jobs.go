package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// Jobs (store.Jobs) are stored as store.JobFields lists them: times as Unix milliseconds
// and JSON as text, both NULL when unset. The change feed is in-process: a change is
// published once the write that made it committed (ChangeHub).

// jobValue is a field of a job as it is written (store.JobValue).
func jobValue(field any) any {
	return store.JobValue(field, func(t time.Time) any { return millis(t) })
}

// scanJob reads a row of store.JobColumns.
func scanJob(row scanner) (store.Job, error) {
	var j store.Job
	var dest [len(store.JobFields)]any
	var texts [len(store.JobFields)]sql.NullString
	var times [len(store.JobFields)]sql.NullInt64
	for i, f := range store.JobFields {
		switch p := f.Addr(&j).(type) {
		case *json.RawMessage:
			dest[i] = &texts[i]
		case *time.Time:
			dest[i] = &times[i]
		default:
			dest[i] = p
		}
	}
	if err := row.Scan(dest[:]...); err != nil {
		return store.Job{}, err
	}
	for i, f := range store.JobFields {
		switch p := f.Addr(&j).(type) {
		case *json.RawMessage:
			if texts[i].Valid {
				*p = json.RawMessage(texts[i].String)
			}
		case *time.Time:
			if times[i].Valid {
				*p = fromMillis(times[i].Int64)
			}
		}
	}
	return j, nil
}

// insertJobStatement inserts one job.
var insertJobStatement = `INSERT INTO jobs (` + store.JobColumns + `) VALUES (` +
	strings.TrimSuffix(strings.Repeat("?, ", len(store.JobFields)), ", ") + `)`

// CreateJob stores job j and enqueues its first poll and events, in one transaction.
func (s *Store) CreateJob(ctx context.Context, j store.Job, firstPoll time.Time, events []store.Event) error {
	j, err := store.PrepareJob(j, events, s.now)
	if err != nil {
		return err
	}
	now := s.stamp(time.Time{})
	args := make([]any, len(store.JobFields))
	for i, f := range store.JobFields {
		args[i] = jobValue(f.Addr(&j))
	}
	err = s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, insertJobStatement, args...); err != nil {
			return jobWriteError(err)
		}
		if err := s.enqueueTx(ctx, tx, store.JobEnqueue(j, firstPoll)); err != nil {
			return err
		}
		for _, e := range events {
			if err := s.insertDelivery(ctx, tx, store.NewDelivery(&j, e, now)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("creating job %q: %w", j.ID, err)
	}
	s.changes.Publish(store.ChangeOf(&j))
	return nil
}

// jobWriteError names the errors of a write of a job or of its deliveries.
func jobWriteError(err error) error {
	var se sqlite3.Error
	switch {
	case isConflict(err):
		return store.ErrConflict
	case errors.As(err, &se) && se.ExtendedCode == sqlite3.ErrConstraintForeignKey:
		return fmt.Errorf("workspace: %w", store.ErrNotFound)
	}
	return err
}

// GetJob returns a job of the workspace.
func (s *Store) GetJob(ctx context.Context, workspaceID, id string) (store.Job, error) {
	j, err := scanJob(s.r.QueryRowContext(ctx, `SELECT `+store.JobColumns+` FROM jobs WHERE workspace_id = ? AND id = ?`, workspaceID, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Job{}, fmt.Errorf("job %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Job{}, fmt.Errorf("getting job %q: %w", id, markUnavailable(err))
	}
	return j, nil
}

// ListJobs returns a page of the jobs q selects.
func (s *Store) ListJobs(ctx context.Context, q store.JobQuery) ([]store.Job, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	l := listing{table: "jobs", columns: store.JobColumns, where: `workspace_id = ?`, args: []any{q.WorkspaceID},
		scope: `workspace_id = ?`, scopeArgs: []any{q.WorkspaceID}, desc: q.Descending()}
	if q.Kind != "" {
		l.where += ` AND kind = ?`
		l.args = append(l.args, q.Kind)
	}
	if len(q.Statuses) > 0 {
		l.where += ` AND status IN (` + strings.TrimSuffix(strings.Repeat("?, ", len(q.Statuses)), ", ") + `)`
		for _, st := range q.Statuses {
			l.args = append(l.args, st)
		}
	}
	out, err := readListing(ctx, s.r, l, q.Page, scanJob)
	if err != nil {
		return nil, fmt.Errorf("listing jobs: %w", markUnavailable(err))
	}
	return out, nil
}

// UnpolledJobs returns up to limit live jobs with no poll queued, oldest first.
func (s *Store) UnpolledJobs(ctx context.Context, limit int) ([]store.Job, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+store.JobColumns+` FROM jobs j WHERE completed_at IS NULL
		AND NOT EXISTS (SELECT 1 FROM queue_items q WHERE q.queue = 'jobs.' || j.kind AND q.id = j.id)
		ORDER BY created_at, id LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("finding unpolled jobs: %w", markUnavailable(err))
	}
	defer rows.Close()
	var out []store.Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, fmt.Errorf("finding unpolled jobs: %w", err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("finding unpolled jobs: %w", markUnavailable(err))
	}
	return out, nil
}

// AdvanceJob applies u to the job of claim c, enqueues events, and completes or requeues
// the claim, in one transaction.
func (s *Store) AdvanceJob(ctx context.Context, c store.Claim, u store.JobUpdate, events []store.Event, next time.Time) error {
	if err := store.ValidateAdvance(c, u, events); err != nil {
		return err
	}
	now := s.stamp(time.Time{})
	sets := u.Sets()
	stmt := `UPDATE jobs SET updated_at = ?`
	args := []any{millis(now)}
	for _, set := range sets {
		stmt += `, ` + set.Column + ` = ?`
		args = append(args, jobValue(set.Value))
	}
	stmt += ` WHERE id = ? RETURNING workspace_id, kind, status`
	args = append(args, c.ID)
	var change store.JobChange
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		if next.IsZero() {
			err = onClaimTx(ctx, tx, c, `DELETE FROM queue_items`)
		} else {
			err = onClaimTx(ctx, tx, c, requeueStatement, millis(s.stamp(next)))
		}
		if err != nil {
			return err
		}
		j := store.Job{ID: c.ID, UpdatedAt: now}
		err = tx.QueryRowContext(ctx, stmt, args...).Scan(&j.WorkspaceID, &j.Kind, &j.Status)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("job %q: %w", c.ID, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		for _, e := range events {
			if err := s.insertDelivery(ctx, tx, store.NewDelivery(&j, e, now)); err != nil {
				return err
			}
		}
		change = store.ChangeOf(&j)
		return nil
	})
	if err != nil {
		return fmt.Errorf("advancing job %q: %w", c.ID, err)
	}
	s.changes.Publish(change)
	return nil
}

// DeleteJob removes a job of the workspace and its queued polls, in one transaction.
func (s *Store) DeleteJob(ctx context.Context, workspaceID, id string) error {
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var kind string
		err := tx.QueryRowContext(ctx, `DELETE FROM jobs WHERE workspace_id = ? AND id = ? RETURNING kind`, workspaceID, id).Scan(&kind)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("job %q: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM queue_items WHERE queue = ? AND id = ?`, store.JobQueue(kind), id)
		return err
	})
	if err != nil {
		return fmt.Errorf("deleting job %q: %w", id, err)
	}
	return nil
}

// Watch returns the change feed of this store's writes.
func (s *Store) Watch(ctx context.Context) (<-chan store.JobChange, error) {
	return s.changes.Watch(ctx)
}
