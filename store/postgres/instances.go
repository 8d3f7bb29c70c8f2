package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// Instances.
//
// Heartbeats are stamped, and judged stale, by the database server's clock (now()), so
// that instances on hosts whose clocks disagree do not take each other for dead; a store
// opened WithClock follows that clock instead, for tests. A sweep locks the rows of the
// instances it finds dead before it releases their reservations: a heartbeat racing with
// it waits, then finds the instance unregistered (store.ErrNotFound) and knows its holds
// are gone, rather than carrying on with reservations that no longer exist.

// clock is the time to stamp: nil (the server's now()) unless the store has a test clock.
func (s *Store) clock() *time.Time {
	if !s.clocked {
		return nil
	}
	t := s.stamp(time.Time{})
	return &t
}

// Ping checks that the server answers on a pooled connection.
func (s *Store) Ping(ctx context.Context) error {
	err := s.withConn(ctx, func(conn *pgx.Conn) error { return conn.Ping(ctx) })
	if err != nil {
		return fmt.Errorf("pinging: %w", err)
	}
	return nil
}

// RegisterInstance records instance id as alive.
func (s *Store) RegisterInstance(ctx context.Context, id string) error {
	if err := store.ValidateInstanceID(id); err != nil {
		return fmt.Errorf("registering instance: %w", err)
	}
	now := s.clock()
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `INSERT INTO instances (id, started_at, heartbeat_at)
			VALUES ($1, COALESCE($2, now()), COALESCE($2, now()))
			ON CONFLICT (id) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at`, id, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("registering instance %q: %w", id, err)
	}
	return nil
}

// Heartbeat records that instance id is alive; store.ErrNotFound if it is not registered.
func (s *Store) Heartbeat(ctx context.Context, id string) error {
	now := s.clock()
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		tag, err := conn.Exec(ctx, `UPDATE instances SET heartbeat_at = COALESCE($2, now()) WHERE id = $1`, id, now)
		if err == nil && tag.RowsAffected() == 0 {
			return fmt.Errorf("instance %q: %w", id, store.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	return nil
}

// ReleaseOrphaned releases the reservations of instances whose heartbeat is older than
// timeout and, for reservations older than timeout, of owners that are not registered.
func (s *Store) ReleaseOrphaned(ctx context.Context, self string, timeout time.Duration) (int, error) {
	now := s.clock()
	var n int
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var stale time.Time
		if err := tx.QueryRow(ctx, `SELECT COALESCE($1, now()) - $2::float8 * interval '1 second'`, now, timeout.Seconds()).Scan(&stale); err != nil {
			return err
		}
		// In id order, so that two sweeps lock them in the same order.
		rows, err := tx.Query(ctx, `SELECT id FROM instances WHERE id <> $1 AND heartbeat_at < $2 ORDER BY id FOR UPDATE`, self, stale)
		if err != nil {
			return err
		}
		dead, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		released := 0
		if len(dead) > 0 {
			k, err := releaseWhere(ctx, tx, `owner = ANY($1)`, dead)
			if err != nil {
				return err
			}
			released += k
			if err := interruptInFlight(ctx, tx, `owner = ANY($1)`, dead); err != nil {
				return err
			}
			if err := freeClaims(ctx, tx, dead, now); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `DELETE FROM instances WHERE id = ANY($1)`, dead); err != nil {
				return err
			}
		}
		k, err := releaseWhere(ctx, tx, `owner <> '' AND owner <> $1 AND created_at < $2
			AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.id = reservations.owner)`, self, stale)
		if err != nil {
			return err
		}
		if err := interruptInFlight(ctx, tx, `owner <> $1 AND started_at < $2
			AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.id = inflight.owner)`, self, stale); err != nil {
			return err
		}
		n = released + k
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("releasing the reservations of dead instances: %w", err)
	}
	return n, nil
}

// freeClaims makes the items the instances ids hold claimed due now (the store's clock:
// now, or the server's), as if their leases had run out: the instances are gone, so their
// claims need not wait out their leases (a job's poll, minutes) before another instance
// takes them. The next claim counts an attempt.
func freeClaims(ctx context.Context, tx pgx.Tx, ids []string, now *time.Time) error {
	_, err := tx.Exec(ctx, `UPDATE queue_items SET run_at = date_trunc('milliseconds', COALESCE($2, now()))
		WHERE owner = ANY($1) AND run_at > COALESCE($2, now())`, ids, now)
	return err
}

// RetireInstance releases what instance id holds and unregisters it.
func (s *Store) RetireInstance(ctx context.Context, id string) (int, error) {
	var n int
	err := s.tx(ctx, func(tx pgx.Tx) error {
		// The instance's row first, as a sweep locks it.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM instances WHERE id = $1 FOR UPDATE`, id); err != nil {
			return err
		}
		k, err := releaseWhere(ctx, tx, `owner = $1`, id)
		if err != nil {
			return err
		}
		if err := interruptInFlight(ctx, tx, `owner = $1`, id); err != nil {
			return err
		}
		if err := freeClaims(ctx, tx, []string{id}, s.clock()); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM instances WHERE id = $1`, id); err != nil {
			return err
		}
		n = k
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("retiring instance %q: %w", id, err)
	}
	return n, nil
}
