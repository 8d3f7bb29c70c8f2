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

// Notifications (store.Notifications): targets as BYTEA as the caller sealed them.

const destinationColumns = `id, workspace_id, kind, name, target, preview, status, created_by, created_at, updated_at,
	deleted_at, last_delivered_at, last_failure_at, last_status`

func scanDestination(row pgx.Row) (store.NotificationDestination, error) {
	var d store.NotificationDestination
	var deleted, delivered, failed *time.Time
	if err := row.Scan(&d.ID, &d.WorkspaceID, &d.Kind, &d.Name, &d.Target, &d.Preview, &d.Status, &d.CreatedBy,
		&d.CreatedAt, &d.UpdatedAt, &deleted, &delivered, &failed, &d.LastStatus); err != nil {
		return store.NotificationDestination{}, err
	}
	d.CreatedAt, d.UpdatedAt = utc(d.CreatedAt), utc(d.UpdatedAt)
	d.DeletedAt, d.LastDeliveredAt, d.LastFailureAt = utcOrZero(deleted), utcOrZero(delivered), utcOrZero(failed)
	return d, nil
}

// utcOrZero is the time a nullable column holds, zero for NULL.
func utcOrZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return utc(*t)
}

// CreateNotificationDestination stores d.
func (s *Store) CreateNotificationDestination(ctx context.Context, d store.NotificationDestination) (store.NotificationDestination, error) {
	d, err := store.PrepareNotificationDestination(d, s.now)
	if err != nil {
		return store.NotificationDestination{}, err
	}
	err = s.tx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO notification_destinations (`+destinationColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, NULL, NULL, NULL, 0)`,
			d.ID, d.WorkspaceID, d.Kind, d.Name, d.Target, d.Preview, d.Status, d.CreatedBy, d.CreatedAt, d.UpdatedAt)
		return jobWriteError(err)
	})
	if err != nil {
		return store.NotificationDestination{}, fmt.Errorf("creating notification destination %q: %w", d.ID, err)
	}
	return d, nil
}

// GetNotificationDestination returns a live destination of the workspace.
func (s *Store) GetNotificationDestination(ctx context.Context, workspaceID, id string) (store.NotificationDestination, error) {
	var d store.NotificationDestination
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		var err error
		d, err = scanDestination(conn.QueryRow(ctx, `SELECT `+destinationColumns+` FROM notification_destinations
			WHERE workspace_id = $1 AND id = $2 AND deleted_at IS NULL`, workspaceID, id))
		return err
	})
	return d, recordError("notification destination", id, "getting", err)
}

// ListNotificationDestinations returns a page of the workspace's live destinations.
func (s *Store) ListNotificationDestinations(ctx context.Context, workspaceID string, p store.Page) ([]store.NotificationDestination, error) {
	var out []store.NotificationDestination
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		var err error
		out, err = readPage(ctx, conn, "notification_destinations", destinationColumns, `workspace_id = $1 AND deleted_at IS NULL`, []any{workspaceID}, p, scanDestination)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing notification destinations: %w", err)
	}
	return out, nil
}

// UpdateNotificationDestination applies u to a live destination of the workspace.
func (s *Store) UpdateNotificationDestination(ctx context.Context, workspaceID, id string, u store.NotificationDestinationUpdate) (store.NotificationDestination, error) {
	if err := store.ValidateDestinationUpdate(id, u); err != nil {
		return store.NotificationDestination{}, err
	}
	stmt := `UPDATE notification_destinations SET updated_at = $1`
	args := []any{s.stamp(time.Time{})}
	set := func(column string, v any) {
		args = append(args, v)
		stmt += `, ` + column + ` = $` + strconv.Itoa(len(args))
	}
	if u.Name != nil {
		set("name", *u.Name)
	}
	if u.Target != nil {
		set("target", u.Target)
		set("preview", *u.Preview)
	}
	if u.Status != nil {
		set("status", *u.Status)
	}
	args = append(args, workspaceID, id)
	stmt += ` WHERE workspace_id = $` + strconv.Itoa(len(args)-1) + ` AND id = $` + strconv.Itoa(len(args)) +
		` AND deleted_at IS NULL RETURNING ` + destinationColumns
	var d store.NotificationDestination
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var err error
		d, err = scanDestination(tx.QueryRow(ctx, stmt, args...))
		return err
	})
	return d, recordError("notification destination", id, "updating", err)
}

// DeleteNotificationDestination marks a destination deleted and takes it out of every
// route, in one transaction.
func (s *Store) DeleteNotificationDestination(ctx context.Context, workspaceID, id string) (store.NotificationDestination, error) {
	now := s.stamp(time.Time{})
	var d store.NotificationDestination
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var err error
		d, err = scanDestination(tx.QueryRow(ctx, `UPDATE notification_destinations SET deleted_at = $1, updated_at = $1
			WHERE workspace_id = $2 AND id = $3 AND deleted_at IS NULL RETURNING `+destinationColumns, now, workspaceID, id))
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM notification_routes WHERE workspace_id = $1 AND destination_id = $2`, workspaceID, id)
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
	return s.tx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE notification_destinations SET `+column+` = $1, last_status = $2
			WHERE workspace_id = $3 AND id = $4 AND deleted_at IS NULL`, s.stamp(o.At), o.Status, workspaceID, id)
		if err != nil {
			return recordError("notification destination", id, "recording a delivery to", err)
		}
		if tag.RowsAffected() == 0 {
			return recordError("notification destination", id, "", pgx.ErrNoRows)
		}
		return nil
	})
}

// NotificationRoutes returns the workspace's routes.
func (s *Store) NotificationRoutes(ctx context.Context, workspaceID string) (map[string][]string, error) {
	out := map[string][]string{}
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		clear(out)
		rows, err := conn.Query(ctx, `SELECT event, destination_id FROM notification_routes
			WHERE workspace_id = $1 ORDER BY event, position`, workspaceID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var event, id string
			if err := rows.Scan(&event, &id); err != nil {
				return err
			}
			out[event] = append(out[event], id)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("reading notification routes: %w", err)
	}
	return out, nil
}

// SetNotificationRoute replaces the destinations of an event. The destinations are locked
// as they are checked (FOR SHARE), so that a delete racing the route waits for it, and
// then takes the route's rows away with its own.
func (s *Store) SetNotificationRoute(ctx context.Context, workspaceID, event string, ids []string) error {
	ids, err := store.ValidateRoute(workspaceID, event, ids)
	if err != nil {
		return err
	}
	err = s.tx(ctx, func(tx pgx.Tx) error {
		for _, id := range ids {
			var one int
			err := tx.QueryRow(ctx, `SELECT 1 FROM notification_destinations
				WHERE workspace_id = $1 AND id = $2 AND deleted_at IS NULL FOR SHARE`, workspaceID, id).Scan(&one)
			if errors.Is(err, pgx.ErrNoRows) {
				return &store.MissingDestinationError{ID: id}
			}
			if err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `DELETE FROM notification_routes WHERE workspace_id = $1 AND event = $2`, workspaceID, event); err != nil {
			return err
		}
		for i, id := range ids {
			if _, err := tx.Exec(ctx, `INSERT INTO notification_routes (workspace_id, event, destination_id, position)
				VALUES ($1, $2, $3, $4)`, workspaceID, event, id, i); err != nil {
				return err
			}
		}
		return nil
	})
	var missing *store.MissingDestinationError
	if err != nil && !errors.As(err, &missing) {
		return fmt.Errorf("setting the notification route of %q: %w", event, err)
	}
	return err
}

const settingsColumns = `workspace_id, low_balance_threshold_nanos, low_balance_armed, low_balance_fired_at, updated_at`

func scanSettings(row pgx.Row) (store.NotificationSettings, error) {
	var st store.NotificationSettings
	var fired *time.Time
	if err := row.Scan(&st.WorkspaceID, &st.LowBalanceThresholdNanos, &st.LowBalanceArmed, &fired, &st.UpdatedAt); err != nil {
		return store.NotificationSettings{}, err
	}
	st.LowBalanceFiredAt, st.UpdatedAt = utcOrZero(fired), utc(st.UpdatedAt)
	return st, nil
}

// NotificationSettings returns the workspace's settings.
func (s *Store) NotificationSettings(ctx context.Context, workspaceID string) (store.NotificationSettings, error) {
	var st store.NotificationSettings
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		var err error
		st, err = scanSettings(conn.QueryRow(ctx, `SELECT `+settingsColumns+` FROM notification_settings WHERE workspace_id = $1`, workspaceID))
		return err
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return store.NotificationSettings{WorkspaceID: workspaceID}, nil
	case err != nil:
		return store.NotificationSettings{}, fmt.Errorf("reading notification settings: %w", err)
	}
	return st, nil
}

// SetLowBalanceThreshold sets the threshold and arms the alert.
func (s *Store) SetLowBalanceThreshold(ctx context.Context, workspaceID string, thresholdNanos *int64) (store.NotificationSettings, error) {
	if err := store.ValidateThreshold(thresholdNanos); err != nil {
		return store.NotificationSettings{}, err
	}
	var st store.NotificationSettings
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var err error
		st, err = scanSettings(tx.QueryRow(ctx, `INSERT INTO notification_settings
			(workspace_id, low_balance_threshold_nanos, low_balance_armed, low_balance_fired_at, updated_at)
			VALUES ($1, $2, TRUE, NULL, $3)
			ON CONFLICT (workspace_id) DO UPDATE SET low_balance_threshold_nanos = $2, low_balance_armed = TRUE, updated_at = $3
			RETURNING `+settingsColumns, workspaceID, thresholdNanos, s.stamp(time.Time{})))
		return jobWriteError(err)
	})
	if err != nil {
		return store.NotificationSettings{}, fmt.Errorf("setting the low-balance threshold: %w", err)
	}
	return st, nil
}

// FireLowBalance arms again the alerts whose balance recovered, then fires those that
// crossed, in one transaction. Two instances racing update the same rows: the second
// waits on the first's row locks and, under READ COMMITTED, tests its WHERE again against
// the rows as the first left them (disarmed, fired now), so a crossing fires once.
func (s *Store) FireLowBalance(ctx context.Context, cooldown time.Duration) ([]store.LowBalance, error) {
	if err := store.ValidateCooldown(cooldown); err != nil {
		return nil, err
	}
	now := s.stamp(time.Time{})
	var out []store.LowBalance
	err := s.tx(ctx, func(tx pgx.Tx) error {
		out = out[:0]
		if _, err := tx.Exec(ctx, `UPDATE notification_settings n SET low_balance_armed = TRUE
			FROM wallets w
			WHERE w.workspace_id = n.workspace_id AND n.low_balance_threshold_nanos IS NOT NULL
			AND NOT n.low_balance_armed AND w.balance_nanos >= n.low_balance_threshold_nanos`); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `UPDATE notification_settings n SET low_balance_armed = FALSE, low_balance_fired_at = $1
			FROM wallets w
			WHERE w.workspace_id = n.workspace_id AND n.low_balance_threshold_nanos IS NOT NULL
			AND w.balance_nanos < n.low_balance_threshold_nanos
			AND (n.low_balance_armed OR n.low_balance_fired_at IS NULL OR n.low_balance_fired_at <= $2)
			RETURNING n.workspace_id, w.balance_nanos, n.low_balance_threshold_nanos`, now, now.Add(-cooldown))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			lb := store.LowBalance{FiredAt: now}
			if err := rows.Scan(&lb.WorkspaceID, &lb.BalanceNanos, &lb.ThresholdNanos); err != nil {
				return err
			}
			out = append(out, lb)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("firing low-balance alerts: %w", err)
	}
	return out, nil
}
