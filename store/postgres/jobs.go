package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// Jobs (store.Jobs) are stored as store.JobFields lists them: JSON as JSONB, unset times
// and JSON as NULL. Every write of a job notifies the schema's channel (changeChannel) in
// its transaction, so the change reaches every store listening on the schema once, and
// only once, it is committed (watch.go).

// jobValue is a field of a job as it is written (store.JobValue).
func jobValue(field any) any { return store.JobValue(field, func(t time.Time) any { return t }) }

// scanJob reads a row of store.JobColumns.
func scanJob(row pgx.Row) (store.Job, error) {
	var j store.Job
	var dest [len(store.JobFields)]any
	var raws [len(store.JobFields)][]byte
	var times [len(store.JobFields)]*time.Time
	for i, f := range store.JobFields {
		switch p := f.Addr(&j).(type) {
		case *json.RawMessage:
			dest[i] = &raws[i]
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
			if raws[i] != nil {
				*p = json.RawMessage(raws[i])
			}
		case *time.Time:
			if times[i] != nil {
				*p = utc(*times[i])
			}
		}
	}
	return j, nil
}

// insertJobStatement inserts one job.
var insertJobStatement = func() string {
	params := make([]string, len(store.JobFields))
	for i := range params {
		params[i] = "$" + strconv.Itoa(i+1)
	}
	return `INSERT INTO jobs (` + store.JobColumns + `) VALUES (` + strings.Join(params, ", ") + `)`
}()

// changeChannel is the channel the job changes of the current schema are notified on: a
// digest of the schema's name, since a channel name is at most 63 bytes.
const changeChannel = `'mgw_jobs_' || md5(COALESCE(current_schema(), ''))`

// notifyChange notifies change c on the schema's channel within tx: listeners hear it when
// tx commits.
func notifyChange(ctx context.Context, tx pgx.Tx, c store.JobChange) error {
	payload, err := json.Marshal(c)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `SELECT pg_notify(`+changeChannel+`, $1)`, string(payload))
	return err
}

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
	err = s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, insertJobStatement, args...); err != nil {
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
		return notifyChange(ctx, tx, store.ChangeOf(&j))
	})
	if err != nil {
		return fmt.Errorf("creating job %q: %w", j.ID, err)
	}
	return nil
}

// jobWriteError names the errors of a write of a job or of its deliveries.
func jobWriteError(err error) error {
	switch {
	case isConflict(err):
		return store.ErrConflict
	case pgCode(err) == "23503": // foreign_key_violation
		return fmt.Errorf("workspace: %w", store.ErrNotFound)
	}
	return err
}

// GetJob returns a job of the workspace.
func (s *Store) GetJob(ctx context.Context, workspaceID, id string) (store.Job, error) {
	var j store.Job
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		var err error
		j, err = scanJob(conn.QueryRow(ctx, `SELECT `+store.JobColumns+` FROM jobs WHERE workspace_id = $1 AND id = $2`, workspaceID, id))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Job{}, fmt.Errorf("job %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Job{}, fmt.Errorf("getting job %q: %w", id, err)
	}
	return j, nil
}

// UnpolledJobs returns up to limit live jobs with no poll queued, oldest first.
func (s *Store) UnpolledJobs(ctx context.Context, limit int) ([]store.Job, error) {
	var out []store.Job
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, `SELECT `+store.JobColumns+` FROM jobs j WHERE completed_at IS NULL
			AND NOT EXISTS (SELECT 1 FROM queue_items q WHERE q.queue = 'jobs.' || j.kind AND q.id = j.id)
			ORDER BY created_at, id LIMIT $1`, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		out = out[:0]
		for rows.Next() {
			j, err := scanJob(rows)
			if err != nil {
				return err
			}
			out = append(out, j)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("finding unpolled jobs: %w", err)
	}
	return out, nil
}

// ListJobs returns a page of the jobs q selects.
func (s *Store) ListJobs(ctx context.Context, q store.JobQuery) ([]store.Job, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	l := listing{table: "jobs", columns: store.JobColumns, where: `workspace_id = $1`, args: []any{q.WorkspaceID},
		scope: `workspace_id = $1`, scopeArgs: []any{q.WorkspaceID}, desc: q.Descending()}
	if q.Kind != "" {
		l.args = append(l.args, q.Kind)
		l.where += ` AND kind = $` + strconv.Itoa(len(l.args))
	}
	if len(q.Statuses) > 0 {
		l.args = append(l.args, q.Statuses)
		l.where += ` AND status = ANY($` + strconv.Itoa(len(l.args)) + `)`
	}
	var out []store.Job
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		var err error
		out, err = readListing(ctx, conn, l, q.Page, scanJob)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing jobs: %w", err)
	}
	return out, nil
}

// DeleteJob removes a job of the workspace and its queued polls, in one transaction.
func (s *Store) DeleteJob(ctx context.Context, workspaceID, id string) error {
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var kind string
		err := tx.QueryRow(ctx, `DELETE FROM jobs WHERE workspace_id = $1 AND id = $2 RETURNING kind`, workspaceID, id).Scan(&kind)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("job %q: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM queue_items WHERE queue = $1 AND id = $2`, store.JobQueue(kind), id)
		return err
	})
	if err != nil {
		return fmt.Errorf("deleting job %q: %w", id, err)
	}
	return nil
}

// AdvanceJob applies u to the job of claim c, enqueues events, and completes or requeues
// the claim, in one transaction.
func (s *Store) AdvanceJob(ctx context.Context, c store.Claim, u store.JobUpdate, events []store.Event, next time.Time) error {
	if err := store.ValidateAdvance(c, u, events); err != nil {
		return err
	}
	now := s.stamp(time.Time{})
	stmt := `UPDATE jobs SET updated_at = $1`
	args := []any{now}
	for _, set := range u.Sets() {
		args = append(args, jobValue(set.Value))
		stmt += `, ` + set.Column + ` = $` + strconv.Itoa(len(args))
	}
	args = append(args, c.ID)
	stmt += ` WHERE id = $` + strconv.Itoa(len(args)) + ` RETURNING workspace_id, kind, status`
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var err error
		if next.IsZero() {
			err = completeTx(ctx, tx, c)
		} else {
			err = s.requeueTx(ctx, tx, c, next)
		}
		if err != nil {
			return err
		}
		j := store.Job{ID: c.ID, UpdatedAt: now}
		err = tx.QueryRow(ctx, stmt, args...).Scan(&j.WorkspaceID, &j.Kind, &j.Status)
		if errors.Is(err, pgx.ErrNoRows) {
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
		return notifyChange(ctx, tx, store.ChangeOf(&j))
	})
	if err != nil {
		return fmt.Errorf("advancing job %q: %w", c.ID, err)
	}
	return nil
}
