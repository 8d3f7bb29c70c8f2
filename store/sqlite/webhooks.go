package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// Webhook endpoints (store.WebhookEndpoints): events as a JSON array, secrets as the
// caller sealed them, times as Unix milliseconds.

const webhookColumns = `id, workspace_id, name, url, events, status, secret, previous_secret, previous_until,
	created_by, created_at, updated_at, consecutive_failures, disabled_reason, deleted_at`

// scanWebhook reads a row of webhookColumns, dropping a previous secret expired at now.
func scanWebhook(row scanner, now time.Time) (store.WebhookEndpoint, error) {
	var e store.WebhookEndpoint
	var events string
	var until, deleted sql.NullInt64
	var created, updated int64
	if err := row.Scan(&e.ID, &e.WorkspaceID, &e.Name, &e.URL, &events, &e.Status, &e.Secret, &e.PreviousSecret, &until,
		&e.CreatedBy, &created, &updated, &e.ConsecutiveFailures, &e.DisabledReason, &deleted); err != nil {
		return store.WebhookEndpoint{}, err
	}
	if err := json.Unmarshal([]byte(events), &e.Events); err != nil || e.Events == nil {
		return store.WebhookEndpoint{}, fmt.Errorf("webhook endpoint %q: events are not a JSON array", e.ID)
	}
	e.CreatedAt, e.UpdatedAt = fromMillis(created), fromMillis(updated)
	if until.Valid {
		e.PreviousUntil = fromMillis(until.Int64)
	}
	if deleted.Valid {
		e.DeletedAt = fromMillis(deleted.Int64)
	}
	return store.ExpirePrevious(e, now), nil
}

func (s *Store) scanWebhookNow(row scanner) (store.WebhookEndpoint, error) {
	return scanWebhook(row, s.now())
}

// CreateWebhookEndpoint stores e.
func (s *Store) CreateWebhookEndpoint(ctx context.Context, e store.WebhookEndpoint) (store.WebhookEndpoint, error) {
	e, err := store.PrepareWebhookEndpoint(e, s.now)
	if err != nil {
		return store.WebhookEndpoint{}, err
	}
	events, err := json.Marshal(e.Events)
	if err != nil {
		return store.WebhookEndpoint{}, fmt.Errorf("creating webhook endpoint %q: %w", e.ID, err)
	}
	err = s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO webhook_endpoints (`+webhookColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, NULL, NULL, ?, ?, ?, 0, '', NULL)`,
			e.ID, e.WorkspaceID, e.Name, e.URL, string(events), e.Status, e.Secret, e.CreatedBy, millis(e.CreatedAt), millis(e.UpdatedAt))
		return jobWriteError(err)
	})
	if err != nil {
		return store.WebhookEndpoint{}, fmt.Errorf("creating webhook endpoint %q: %w", e.ID, markUnavailable(err))
	}
	return e, nil
}

// GetWebhookEndpoint returns an endpoint of the workspace.
func (s *Store) GetWebhookEndpoint(ctx context.Context, workspaceID, id string) (store.WebhookEndpoint, error) {
	e, err := s.scanWebhookNow(s.r.QueryRowContext(ctx, `SELECT `+webhookColumns+` FROM webhook_endpoints
		WHERE workspace_id = ? AND id = ? AND deleted_at IS NULL`, workspaceID, id))
	return e, recordError("webhook endpoint", id, "getting", err)
}

// ListWebhookEndpoints returns a page of the workspace's endpoints, oldest first.
func (s *Store) ListWebhookEndpoints(ctx context.Context, workspaceID string, p store.Page) ([]store.WebhookEndpoint, error) {
	out, err := readPage(ctx, s.r, "webhook_endpoints", webhookColumns, `workspace_id = ? AND deleted_at IS NULL`, []any{workspaceID}, p, s.scanWebhookNow)
	if err != nil {
		return nil, fmt.Errorf("listing webhook endpoints: %w", markUnavailable(err))
	}
	return out, nil
}

// UpdateWebhookEndpoint applies u to an endpoint of the workspace.
func (s *Store) UpdateWebhookEndpoint(ctx context.Context, workspaceID, id string, u store.WebhookEndpointUpdate) (store.WebhookEndpoint, error) {
	if err := store.ValidateWebhookUpdate(id, u); err != nil {
		return store.WebhookEndpoint{}, err
	}
	stmt := `UPDATE webhook_endpoints SET updated_at = ?`
	args := []any{millis(s.stamp(time.Time{}))}
	if u.Name != nil {
		stmt += `, name = ?`
		args = append(args, *u.Name)
	}
	if u.URL != nil {
		stmt += `, url = ?`
		args = append(args, *u.URL)
	}
	if u.Events != nil {
		events, err := json.Marshal(u.Events)
		if err != nil {
			return store.WebhookEndpoint{}, fmt.Errorf("updating webhook endpoint %q: %w", id, err)
		}
		stmt += `, events = ?`
		args = append(args, string(events))
	}
	if u.Status != nil {
		stmt += `, status = ?`
		args = append(args, *u.Status)
		if *u.Status == store.WebhookActive {
			stmt += `, consecutive_failures = 0, disabled_reason = ''`
		}
	}
	stmt += ` WHERE workspace_id = ? AND id = ? AND deleted_at IS NULL RETURNING ` + webhookColumns
	args = append(args, workspaceID, id)
	return s.writeWebhook(ctx, id, "updating", stmt, args)
}

// writeWebhook runs stmt, a write of endpoint id that returns its row, in a transaction.
func (s *Store) writeWebhook(ctx context.Context, id, doing, stmt string, args []any) (store.WebhookEndpoint, error) {
	var e store.WebhookEndpoint
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		e, err = s.scanWebhookNow(tx.QueryRowContext(ctx, stmt, args...))
		return err
	})
	return e, recordError("webhook endpoint", id, doing, err)
}

// DeleteWebhookEndpoint marks an endpoint of the workspace deleted, keeping its row.
func (s *Store) DeleteWebhookEndpoint(ctx context.Context, workspaceID, id string) (store.WebhookEndpoint, error) {
	now := millis(s.stamp(time.Time{}))
	return s.writeWebhook(ctx, id, "deleting", `UPDATE webhook_endpoints SET status = ?, deleted_at = ?, updated_at = ?
		WHERE workspace_id = ? AND id = ? AND deleted_at IS NULL RETURNING `+webhookColumns,
		[]any{store.WebhookDeleted, now, now, workspaceID, id})
}

// RotateWebhookSecret makes sealed the endpoint's secret, its secret until now the
// previous one, in one statement: SET reads the row as it was before the update.
func (s *Store) RotateWebhookSecret(ctx context.Context, workspaceID, id string, sealed []byte, previousUntil time.Time) (store.WebhookEndpoint, error) {
	if err := store.ValidateRotation(id, sealed, previousUntil); err != nil {
		return store.WebhookEndpoint{}, err
	}
	return s.writeWebhook(ctx, id, "rotating the secret of", `UPDATE webhook_endpoints
		SET previous_secret = secret, previous_until = ?, secret = ?, updated_at = ?
		WHERE workspace_id = ? AND id = ? AND deleted_at IS NULL RETURNING `+webhookColumns,
		[]any{millis(s.stamp(previousUntil)), sealed, millis(s.stamp(time.Time{})), workspaceID, id})
}

// RecordWebhookOutcome counts a delivery to an endpoint, in one statement: SET reads the
// row as it was, so the failure count and the test for disabling agree.
func (s *Store) RecordWebhookOutcome(ctx context.Context, workspaceID, id string, o store.WebhookOutcome) (store.WebhookEndpoint, error) {
	if err := o.Validate(); err != nil {
		return store.WebhookEndpoint{}, err
	}
	const disables = `(NOT ?1 AND ?2 > 0 AND status = 'active' AND consecutive_failures + 1 >= ?2)`
	return s.writeWebhook(ctx, id, "counting a delivery to", `UPDATE webhook_endpoints SET
		status = CASE WHEN `+disables+` THEN 'disabled' ELSE status END,
		disabled_reason = CASE WHEN `+disables+` THEN ?3 ELSE disabled_reason END,
		updated_at = CASE WHEN `+disables+` THEN ?4 ELSE updated_at END,
		consecutive_failures = CASE WHEN ?1 THEN 0 ELSE consecutive_failures + 1 END
		WHERE workspace_id = ?5 AND id = ?6 AND deleted_at IS NULL RETURNING `+webhookColumns,
		[]any{o.Delivered, o.DisableAfter, o.Reason, millis(s.stamp(time.Time{})), workspaceID, id})
}
