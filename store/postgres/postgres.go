// Package postgres is the store.Store backend for several gateway instances sharing one
// PostgreSQL database (github.com/jackc/pgx/v5). It passes the same conformance suite as
// store/sqlite.
//
// Wallet operations lock the wallet row (SELECT ... FOR UPDATE) inside their transaction,
// so concurrent reservations from any number of processes are serialised per workspace
// and can never overspend. Migrations are embedded and run under a transaction-level
// advisory lock, so instances starting together take turns instead of colliding.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/internal/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Store is a store.Store over PostgreSQL. It is safe for concurrent use.
type Store struct {
	pool *pool
	now  func() time.Time
}

// Open connects to the database at dsn (a postgres:// URL or key=value string, as
// accepted by pgx) and applies pending migrations to the first schema on the search_path.
// The pgxpool setting pool_max_conns caps open connections (default: the larger of 4 and
// the number of CPUs); other pool_* settings are accepted and ignored. Open fails with an
// error wrapping store.ErrSchemaTooNew if a newer gateway has already migrated the schema.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx redacts the password from this error.
		return nil, fmt.Errorf("opening postgres store: %w", err)
	}
	maxConns := max(4, runtime.NumCPU())
	for k, v := range cfg.RuntimeParams {
		if !strings.HasPrefix(k, "pool_") {
			continue
		}
		// Sent on to the server these would fail the connection as unknown parameters.
		delete(cfg.RuntimeParams, k)
		if k == "pool_max_conns" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("opening postgres store: pool_max_conns must be a positive integer, got %q", v)
			}
			maxConns = n
		}
	}

	s := &Store{pool: newPool(cfg, maxConns), now: time.Now}
	conn, err := s.pool.acquire(ctx)
	if err != nil {
		s.pool.close()
		return nil, fmt.Errorf("opening postgres store: connecting: %w", err)
	}
	s.pool.release(conn)
	if err := s.migrate(ctx); err != nil {
		s.pool.close()
		return nil, fmt.Errorf("opening postgres store: %w", err)
	}
	return s, nil
}

// Close closes the store's connections.
func (s *Store) Close() error {
	s.pool.close()
	return nil
}

// migrate applies each pending migration in its own transaction. The advisory lock is
// keyed by the schema, so instances migrating the same schema take turns while tests in
// separate schemas do not wait for each other; the version is read after taking it, so a
// later instance sees what an earlier one applied.
func (s *Store) migrate(ctx context.Context) error {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	migrations, err := migrate.Load(sub)
	if err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	latest := migrations[len(migrations)-1].Version
	for _, m := range migrations {
		err := s.tx(ctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('caddy-modelgateway/store'), hashtext(COALESCE(current_schema(), '')))`); err != nil {
				return fmt.Errorf("taking migration lock: %w", err)
			}
			if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
				version    INTEGER PRIMARY KEY,
				applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
			)`); err != nil {
				return err
			}
			var current int
			if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_version`).Scan(&current); err != nil {
				return err
			}
			switch {
			case current > latest:
				return fmt.Errorf("database is at version %d, this gateway knows up to %d: %w", current, latest, store.ErrSchemaTooNew)
			case current >= m.Version:
				return nil
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_version (version) VALUES ($1)`, m.Version)
			return err
		})
		if err != nil {
			return fmt.Errorf("migration %s: %w", m.Name, err)
		}
	}
	return nil
}

// txAttempts bounds retries of a transaction the server aborted to break a deadlock or
// a serialization conflict; such a transaction changed nothing and is safe to rerun.
const txAttempts = 5

// tx runs fn in a transaction and commits if fn succeeds. fn may run more than once, so
// it must derive everything from its inputs and assign results only on success.
func (s *Store) tx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := s.tryTx(ctx, fn)
		if err == nil || attempt == txAttempts || !retryable(err) || ctx.Err() != nil {
			return err
		}
	}
}

func (s *Store) tryTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	conn, err := s.pool.acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquiring connection: %w", err)
	}
	defer s.pool.release(conn)
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("beginning transaction: %w", err)
	}
	if err := fn(tx); err != nil {
		// Roll back even if ctx is done, so the connection can be reused.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = tx.Rollback(rctx)
		cancel()
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}

// withConn runs fn on a pooled connection, for reads that need no transaction.
func (s *Store) withConn(ctx context.Context, fn func(conn *pgx.Conn) error) error {
	conn, err := s.pool.acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquiring connection: %w", err)
	}
	defer s.pool.release(conn)
	return fn(conn)
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func retryable(err error) bool {
	switch pgCode(err) {
	case "40001", "40P01": // serialization_failure, deadlock_detected
		return true
	}
	return false
}

func isConflict(err error) bool { return pgCode(err) == "23505" } // unique_violation

// stamp returns t, or now if t is zero, at the millisecond precision both backends keep.
func (s *Store) stamp(t time.Time) time.Time {
	if t.IsZero() {
		t = s.now()
	}
	return t.UTC().Truncate(time.Millisecond)
}

func utc(t time.Time) time.Time { return t.UTC() }

var _ store.Store = (*Store)(nil)
