package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// Notifications (store.Notifications): targets as the caller sealed them, times as Unix
// milliseconds.

const destinationColumns = `id, workspace_id, kind, name, target, preview, status, created_by, created_at, updated_at,
	deleted_at, last_delivered_at, last_failure_at, last_status`

func scanDestination(row scanner) (store.NotificationDestination, error) {
	var d store.NotificationDestination
	var created, updated int64
	var deleted, delivered, failed sql.NullInt64
	if err := row.Scan(&d.ID, &d.WorkspaceID, &d.Kind, &d.Name, &d.Target, &d.Preview, &d.Status, &d.CreatedBy,
		&created, &updated, &deleted, &delivered, &failed, &d.LastStatus); err != nil {
		return store.NotificationDestination{}, err
	}
	d.CreatedAt, d.UpdatedAt = fromMillis(created), fromMillis(updated)
	d.DeletedAt, d.LastDeliveredAt, d.LastFailureAt = timeOfMillis(deleted), timeOfMillis(delivered), timeOfMillis(failed)
	return d, nil
}

// timeOfMillis is the time a nullable column of Unix milliseconds holds, zero for NULL.
func timeOfMillis(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMillis(v.Int64)
}

// CreateNotificationDestination stores d.
func (s *Store) CreateNotificationDestination(ctx context.Context, d store.NotificationDestination) (store.NotificationDestination, error) {
	d, err := store.PrepareNotificationDestination(d, s.now)
	if err != nil {
		return store.NotificationDestination{}, err
	}
	err = s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO notification_destinations (`+destinationColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL, 0)`,
			d.ID, d.WorkspaceID, d.Kind, d.Name, d.Target, d.Preview, d.Status, d.CreatedBy, millis(d.CreatedAt), millis(d.UpdatedAt))
		return jobWriteError(err)
	})
	if err != nil {
		return store.NotificationDestination{}, fmt.Errorf("creating notification destination %q: %w", d.ID, markUnavailable(err))
	}
	return d, nil
}

// GetNotificationDestination returns a live destination of the workspace.
func (s *Store) GetNotificationDestination(ctx context.Context, workspaceID, id string) (store.NotificationDestination, error) {
	d, err := scanDestination(s.r.QueryRowContext(ctx, `SELECT `+destinationColumns+` FROM notification_destinations
		WHERE workspace_id = ? AND id = ? AND deleted_at IS NULL`, workspaceID, id))
	return d, recordError("notification destination", id, "getting", err)
}

// ListNotificationDestinations returns a page of the workspace's live destinations.
func (s *Store) ListNotificationDestinations(ctx context.Context, workspaceID string, p store.Page) ([]store.NotificationDestination, error) {
	out, err := readPage(ctx, s.r, "notification_destinations", destinationColumns, `workspace_id = ? AND deleted_at IS NULL`, []any{workspaceID}, p, scanDestination)
	if err != nil {
		return nil, fmt.Errorf("listing notification destinations: %w", markUnavailable(err))
	}
	return out, nil
}

// UpdateNotificationDestination applies u to a live destination of the workspace.
func (s *Store) UpdateNotificationDestination(ctx context.Context, workspaceID, id string, u store.NotificationDestinationUpdate) (store.NotificationDestination, error) {
	if err := store.ValidateDestinationUpdate(id, u); err != nil {
		return store.NotificationDestination{}, err
	}
	stmt := `UPDATE notification_destinations SET updated_at = ?`
	args := []any{millis(s.stamp(time.Time{}))}
	if u.Name != nil {
		stmt += `, name = ?`
		args = append(args, *u.Name)
	}
	if u.Target != nil {
		stmt += `, target = ?, preview = ?`
		args = append(args, u.Target, *u.Preview)
	}
	if u.Status != nil {
		stmt += `, status = ?`
		args = append(args, *u.Status)
	}
	stmt += ` WHERE workspace_id = ? AND id = ? AND deleted_at IS NULL RETURNING ` + destinationColumns
	args = append(args, workspaceID, id)
	var d store.NotificationDestination
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		d, err = scanDestination(tx.QueryRowContext(ctx, stmt, args...))
		return err
	})
	return d, recordError("notification destination", id, "updating", err)
}

// DeleteNotificationDestination marks a destination deleted and takes it out of every
// route, in one transaction.
func (s *Store) DeleteNotificationDestination(ctx context.Context, workspaceID, id string) (store.NotificationDestination, error) {
	now := millis(s.stamp(time.Time{}))
	var d store.NotificationDestination
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		d, err = scanDestination(tx.QueryRowContext(ctx, `UPDATE notification_destinations SET deleted_at = ?, updated_at = ?
			WHERE workspace_id = ? AND id = ? AND deleted_at IS NULL RETURNING `+destinationColumns, now, now, workspaceID, id))
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM notification_routes WHERE workspace_id = ? AND destination_id = ?`, workspaceID, id)
		return err
	})
	return d, recordError("notification destination", id, "deleting", err)
}

// RecordNotificationOutcome stamps the end of a delivery to a live destination.
func (s *Store) RecordNotificationOutcome(ctx context.Context, workspaceID, id string, o store.NotificationOutcome) error {
	column := "last_failure_at"
	if o.Delivered {
		column = "last_delivered_at"
	}
	return s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE notification_destinations SET `+column+` = ?, last_status = ?
			WHERE workspace_id = ? AND id = ? AND deleted_at IS NULL`, millis(s.stamp(o.At)), o.Status, workspaceID, id)
		if err != nil {
			return recordError("notification destination", id, "recording a delivery to", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return recordError("notification destination", id, "", sql.ErrNoRows)
		}
		return nil
	})
}

// NotificationRoutes returns the workspace's routes.
func (s *Store) NotificationRoutes(ctx context.Context, workspaceID string) (map[string][]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT event, destination_id FROM notification_routes
		WHERE workspace_id = ? ORDER BY event, position`, workspaceID)
	if err != nil {
		return nil, fmt.Errorf("reading notification routes: %w", markUnavailable(err))
	}
	defer func() { _ = rows.Close() }()
	out := map[string][]string{}
	for rows.Next() {
		var event, id string
		if err := rows.Scan(&event, &id); err != nil {
			return nil, fmt.Errorf("reading notification routes: %w", markUnavailable(err))
		}
		out[event] = append(out[event], id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading notification routes: %w", markUnavailable(err))
	}
	return out, nil
}

// SetNotificationRoute replaces the destinations of an event, checking in the same
// transaction that each is a live destination of the workspace.
func (s *Store) SetNotificationRoute(ctx context.Context, workspaceID, event string, ids []string) error {
	ids, err := store.ValidateRoute(workspaceID, event, ids)
	if err != nil {
		return err
	}
	err = s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		for _, id := range ids {
			var one int
			err := tx.QueryRowContext(ctx, `SELECT 1 FROM notification_destinations
				WHERE workspace_id = ? AND id = ? AND deleted_at IS NULL`, workspaceID, id).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return &store.MissingDestinationError{ID: id}
			}
			if err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM notification_routes WHERE workspace_id = ? AND event = ?`, workspaceID, event); err != nil {
			return err
		}
		for i, id := range ids {
			if _, err := tx.ExecContext(ctx, `INSERT INTO notification_routes (workspace_id, event, destination_id, position)
				VALUES (?, ?, ?, ?)`, workspaceID, event, id, i); err != nil {
				return err
			}
		}
		return nil
	})
	var missing *store.MissingDestinationError
	if err != nil && !errors.As(err, &missing) {
		return fmt.Errorf("setting the notification route of %q: %w", event, markUnavailable(err))
	}
	return err
}

const settingsColumns = `workspace_id, low_balance_threshold_nanos, low_balance_armed, low_balance_fired_at, updated_at`

func scanSettings(row scanner) (store.NotificationSettings, error) {
	var st store.NotificationSettings
	var threshold, fired sql.NullInt64
	var updated int64
	if err := row.Scan(&st.WorkspaceID, &threshold, &st.LowBalanceArmed, &fired, &updated); err != nil {
		return store.NotificationSettings{}, err
	}
	if threshold.Valid {
		st.LowBalanceThresholdNanos = &threshold.Int64
	}
	st.LowBalanceFiredAt, st.UpdatedAt = timeOfMillis(fired), fromMillis(updated)
	return st, nil
}

// NotificationSettings returns the workspace's settings.
func (s *Store) NotificationSettings(ctx context.Context, workspaceID string) (store.NotificationSettings, error) {
	st, err := scanSettings(s.r.QueryRowContext(ctx, `SELECT `+settingsColumns+` FROM notification_settings WHERE workspace_id = ?`, workspaceID))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.NotificationSettings{WorkspaceID: workspaceID}, nil
	case err != nil:
		return store.NotificationSettings{}, fmt.Errorf("reading notification settings: %w", markUnavailable(err))
	}
	return st, nil
}

// SetLowBalanceThreshold sets the threshold and arms the alert.
func (s *Store) SetLowBalanceThreshold(ctx context.Context, workspaceID string, thresholdNanos *int64) (store.NotificationSettings, error) {
	if err := store.ValidateThreshold(thresholdNanos); err != nil {
		return store.NotificationSettings{}, err
	}
	var st store.NotificationSettings
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		st, err = scanSettings(tx.QueryRowContext(ctx, `INSERT INTO notification_settings
			(workspace_id, low_balance_threshold_nanos, low_balance_armed, low_balance_fired_at, updated_at)
			VALUES (?1, ?2, 1, NULL, ?3)
			ON CONFLICT (workspace_id) DO UPDATE SET low_balance_threshold_nanos = ?2, low_balance_armed = 1, updated_at = ?3
			RETURNING `+settingsColumns, workspaceID, thresholdNanos, millis(s.stamp(time.Time{}))))
		return jobWriteError(err)
	})
	if err != nil {
		return store.NotificationSettings{}, fmt.Errorf("setting the low-balance threshold: %w", markUnavailable(err))
	}
	return st, nil
}

// FireLowBalance arms again the alerts whose balance recovered, then fires those that
// crossed, in one transaction (SQLite's one writer keeps two callers from both firing).
func (s *Store) FireLowBalance(ctx context.Context, cooldown time.Duration) ([]store.LowBalance, error) {
	if err := store.ValidateCooldown(cooldown); err != nil {
		return nil, err
	}
	now := s.stamp(time.Time{})
	var out []store.LowBalance
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		out = out[:0]
		if _, err := tx.ExecContext(ctx, `UPDATE notification_settings SET low_balance_armed = 1
			WHERE low_balance_threshold_nanos IS NOT NULL AND low_balance_armed = 0
			AND (SELECT balance_nanos FROM wallets w WHERE w.workspace_id = notification_settings.workspace_id) >= low_balance_threshold_nanos`); err != nil {
			return err
		}
		// RETURNING may name only the updated table's columns: the balances are read after.
		rows, err := tx.QueryContext(ctx, `UPDATE notification_settings SET low_balance_armed = 0, low_balance_fired_at = ?1
			WHERE low_balance_threshold_nanos IS NOT NULL
			AND (SELECT balance_nanos FROM wallets w WHERE w.workspace_id = notification_settings.workspace_id) < low_balance_threshold_nanos
			AND (low_balance_armed = 1 OR low_balance_fired_at IS NULL OR low_balance_fired_at <= ?2)
			RETURNING workspace_id, low_balance_threshold_nanos`,
			millis(now), millis(now.Add(-cooldown)))
		if err != nil {
			return err
		}
		for rows.Next() {
			lb := store.LowBalance{FiredAt: now}
			if err := rows.Scan(&lb.WorkspaceID, &lb.ThresholdNanos); err != nil {
				_ = rows.Close()
				return err
			}
			out = append(out, lb)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		for i := range out {
			if err := tx.QueryRowContext(ctx, `SELECT balance_nanos FROM wallets WHERE workspace_id = ?`, out[i].WorkspaceID).Scan(&out[i].BalanceNanos); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("firing low-balance alerts: %w", markUnavailable(err))
	}
	return out, nil
}
