package postgres

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// Webhook endpoints (store.WebhookEndpoints): events as TEXT[], secrets as BYTEA as the
// caller sealed them.

const webhookColumns = `id, workspace_id, name, url, events, status, secret, previous_secret, previous_until,
	created_by, created_at, updated_at, consecutive_failures, disabled_reason, deleted_at`

// scanWebhook reads a row of webhookColumns, dropping a previous secret expired at now.
func scanWebhook(row pgx.Row, now time.Time) (store.WebhookEndpoint, error) {
	var e store.WebhookEndpoint
	var until, deleted *time.Time
	if err := row.Scan(&e.ID, &e.WorkspaceID, &e.Name, &e.URL, &e.Events, &e.Status, &e.Secret, &e.PreviousSecret, &until,
		&e.CreatedBy, &e.CreatedAt, &e.UpdatedAt, &e.ConsecutiveFailures, &e.DisabledReason, &deleted); err != nil {
		return store.WebhookEndpoint{}, err
	}
	if e.Events == nil {
		e.Events = []string{}
	}
	e.CreatedAt, e.UpdatedAt = utc(e.CreatedAt), utc(e.UpdatedAt)
	if until != nil {
		e.PreviousUntil = utc(*until)
	}
	if deleted != nil {
		e.DeletedAt = utc(*deleted)
	}
	return store.ExpirePrevious(e, now), nil
}

func (s *Store) scanWebhookNow(row pgx.Row) (store.WebhookEndpoint, error) {
	return scanWebhook(row, s.now())
}

// CreateWebhookEndpoint stores e.
func (s *Store) CreateWebhookEndpoint(ctx context.Context, e store.WebhookEndpoint) (store.WebhookEndpoint, error) {
	e, err := store.PrepareWebhookEndpoint(e, s.now)
	if err != nil {
		return store.WebhookEndpoint{}, err
	}
	err = s.tx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO webhook_endpoints (`+webhookColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, NULL, $8, $9, $10, 0, '', NULL)`,
			e.ID, e.WorkspaceID, e.Name, e.URL, e.Events, e.Status, e.Secret, e.CreatedBy, e.CreatedAt, e.UpdatedAt)
		return jobWriteError(err)
	})
	if err != nil {
		return store.WebhookEndpoint{}, fmt.Errorf("creating webhook endpoint %q: %w", e.ID, err)
	}
	return e, nil
}

// GetWebhookEndpoint returns an endpoint of the workspace.
func (s *Store) GetWebhookEndpoint(ctx context.Context, workspaceID, id string) (store.WebhookEndpoint, error) {
	var e store.WebhookEndpoint
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		var err error
		e, err = s.scanWebhookNow(conn.QueryRow(ctx, `SELECT `+webhookColumns+` FROM webhook_endpoints
			WHERE workspace_id = $1 AND id = $2 AND deleted_at IS NULL`, workspaceID, id))
		return err
	})
	return e, recordError("webhook endpoint", id, "getting", err)
}

// ListWebhookEndpoints returns a page of the workspace's endpoints, oldest first.
func (s *Store) ListWebhookEndpoints(ctx context.Context, workspaceID string, p store.Page) ([]store.WebhookEndpoint, error) {
	var out []store.WebhookEndpoint
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		var err error
		out, err = readPage(ctx, conn, "webhook_endpoints", webhookColumns, `workspace_id = $1 AND deleted_at IS NULL`, []any{workspaceID}, p, s.scanWebhookNow)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing webhook endpoints: %w", err)
	}
	return out, nil
}

// UpdateWebhookEndpoint applies u to an endpoint of the workspace.
func (s *Store) UpdateWebhookEndpoint(ctx context.Context, workspaceID, id string, u store.WebhookEndpointUpdate) (store.WebhookEndpoint, error) {
	if err := store.ValidateWebhookUpdate(id, u); err != nil {
		return store.WebhookEndpoint{}, err
	}
	stmt := `UPDATE webhook_endpoints SET updated_at = $1`
	args := []any{s.stamp(time.Time{})}
	set := func(column string, v any) {
		args = append(args, v)
		stmt += `, ` + column + ` = $` + strconv.Itoa(len(args))
	}
	if u.Name != nil {
		set("name", *u.Name)
	}
	if u.URL != nil {
		set("url", *u.URL)
	}
	if u.Events != nil {
		set("events", u.Events)
	}
	if u.Status != nil {
		set("status", *u.Status)
		if *u.Status == store.WebhookActive {
			stmt += `, consecutive_failures = 0, disabled_reason = ''`
		}
	}
	n := len(args)
	stmt += ` WHERE workspace_id = $` + strconv.Itoa(n+1) + ` AND id = $` + strconv.Itoa(n+2) + ` AND deleted_at IS NULL RETURNING ` + webhookColumns
	return s.writeWebhook(ctx, id, "updating", stmt, append(args, workspaceID, id))
}

// writeWebhook runs stmt, a write of endpoint id that returns its row, in a transaction.
func (s *Store) writeWebhook(ctx context.Context, id, doing, stmt string, args []any) (store.WebhookEndpoint, error) {
	var e store.WebhookEndpoint
	err := s.tx(ctx, func(tx pgx.Tx) error {
		got, err := s.scanWebhookNow(tx.QueryRow(ctx, stmt, args...))
		if err == nil {
			e = got
		}
		return err
	})
	return e, recordError("webhook endpoint", id, doing, err)
}

// DeleteWebhookEndpoint marks an endpoint of the workspace deleted, keeping its row.
func (s *Store) DeleteWebhookEndpoint(ctx context.Context, workspaceID, id string) (store.WebhookEndpoint, error) {
	now := s.stamp(time.Time{})
	return s.writeWebhook(ctx, id, "deleting", `UPDATE webhook_endpoints SET status = $1, deleted_at = $2, updated_at = $2
		WHERE workspace_id = $3 AND id = $4 AND deleted_at IS NULL RETURNING `+webhookColumns,
		[]any{store.WebhookDeleted, now, workspaceID, id})
}

// RotateWebhookSecret makes sealed the endpoint's secret, its secret until now the
// previous one, in one statement: SET reads the row as it was before the update.
func (s *Store) RotateWebhookSecret(ctx context.Context, workspaceID, id string, sealed []byte, previousUntil time.Time) (store.WebhookEndpoint, error) {
	if err := store.ValidateRotation(id, sealed, previousUntil); err != nil {
		return store.WebhookEndpoint{}, err
	}
	return s.writeWebhook(ctx, id, "rotating the secret of", `UPDATE webhook_endpoints
		SET previous_secret = secret, previous_until = $1, secret = $2, updated_at = $3
		WHERE workspace_id = $4 AND id = $5 AND deleted_at IS NULL RETURNING `+webhookColumns,
		[]any{s.stamp(previousUntil), sealed, s.stamp(time.Time{}), workspaceID, id})
}

// RecordWebhookOutcome counts a delivery to an endpoint, in one statement: SET reads the
// row as it was, so the failure count and the test for disabling agree.
func (s *Store) RecordWebhookOutcome(ctx context.Context, workspaceID, id string, o store.WebhookOutcome) (store.WebhookEndpoint, error) {
	if err := o.Validate(); err != nil {
		return store.WebhookEndpoint{}, err
	}
	const disables = `(NOT $1 AND $2 > 0 AND status = 'active' AND consecutive_failures + 1 >= $2)`
	return s.writeWebhook(ctx, id, "counting a delivery to", `UPDATE webhook_endpoints SET
		status = CASE WHEN `+disables+` THEN 'disabled' ELSE status END,
		disabled_reason = CASE WHEN `+disables+` THEN $3 ELSE disabled_reason END,
		updated_at = CASE WHEN `+disables+` THEN $4 ELSE updated_at END,
		consecutive_failures = CASE WHEN $1 THEN 0 ELSE consecutive_failures + 1 END
		WHERE workspace_id = $5 AND id = $6 AND deleted_at IS NULL RETURNING `+webhookColumns,
		[]any{o.Delivered, o.DisableAfter, o.Reason, s.stamp(time.Time{}), workspaceID, id})
}
