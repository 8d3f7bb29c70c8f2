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
	"io"
	"io/fs"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/internal/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// errClosed is returned by a store used after Close.
var errClosed = store.ErrClosed

// Store is a store.Store over PostgreSQL. It is safe for concurrent use.
type Store struct {
	pool   *pgxpool.Pool
	closed atomic.Bool
	now    func() time.Time
	// clocked is set when now is a test's clock: heartbeats then follow it instead of the
	// server's (instances.go).
	clocked bool
	// inflight are the traces of requests in flight from leases (inflight.go).
	inflight inflightTraces
	// backgroundErr is told about failures of the store's background work; nil: they
	// are written to the standard error (background.Report).
	backgroundErr func(error)
	// feed is the change feed of jobs (watch.go).
	feed changeFeed
}

// Open connects to the database at dsn (a postgres:// URL or key=value string, as
// accepted by pgxpool.ParseConfig) and applies pending migrations to the first schema on
// the search_path. The pgxpool settings (pool_max_conns, pool_min_conns,
// pool_max_conn_lifetime, ...) configure the connection pool; pool_max_conns defaults to
// the larger of 4 and the number of CPUs. Open fails with an error wrapping
// store.ErrSchemaTooNew if a newer gateway has already migrated the schema.
func Open(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgconn redacts the password from this error.
		return nil, fmt.Errorf("opening postgres store: %w", err)
	}
	return openConfig(ctx, cfg, opts...)
}

// Option adjusts a Store as it opens.
type Option func(*Store)

// WithClock makes the store read the time from now instead of the system clock: the
// times it stamps and the spending-limit periods it computes. Tests use it.
func WithClock(now func() time.Time) Option {
	return func(s *Store) {
		if now != nil {
			s.now, s.clocked = now, true
		}
	}
}

// WithBackgroundErrors sets a function told about failures of the store's background
// work, which goes on: a flush of the traces of requests in flight that failed (once per
// outage, not at every flush), the change feed's lost connections and unreadable
// notifications, and a panic in either (a *background.Panic, whose %+v shows its stack).
// Default: the standard error.
func WithBackgroundErrors(fn func(error)) Option {
	return func(s *Store) { s.backgroundErr = fn }
}

// openConfig is Open after parsing, so tests can adjust the pool's configuration.
func openConfig(ctx context.Context, cfg *pgxpool.Config, opts ...Option) (*Store, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("opening postgres store: %w", err)
	}
	s := &Store{pool: pool, now: time.Now}
	for _, o := range opts {
		o(s)
	}
	// pgxpool connects lazily; fail now rather than on first use.
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("opening postgres store: connecting: %w", err)
	}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("opening postgres store: %w", err)
	}
	return s, nil
}

// Close closes the store's connections, waiting for those in use to be released.
func (s *Store) Close() error {
	s.stopInFlight()
	s.closed.Store(true)
	// Before the pool closes: it waits for the listener's connection otherwise.
	s.stopFeed()
	s.pool.Close()
	return nil
}

// acquire takes a connection from the pool, reporting errClosed after Close.
func (s *Store) acquire(ctx context.Context) (*pgxpool.Conn, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		if s.closed.Load() {
			return nil, errClosed
		}
		return nil, fmt.Errorf("%w: acquiring connection: %w", store.ErrUnavailable, err)
	}
	return conn, nil
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
			return markUnavailable(err)
		}
	}
}

func (s *Store) tryTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	conn, err := s.acquire(ctx)
	if err != nil {
		return err
	}
	// Release closes, rather than reuses, a connection left mid-query or mid-transaction.
	defer conn.Release()
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
	conn, err := s.acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	return markUnavailable(fn(conn.Conn()))
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

// markUnavailable wraps in store.ErrUnavailable the errors of a server that cannot be
// reached or heard for now: a connection refused, lost or timed out, a server shutting
// down or out of connections. The server's answers to the statements themselves
// (constraints, a bug) are returned as they are.
func markUnavailable(err error) error {
	if err == nil || errors.Is(err, store.ErrUnavailable) || errors.Is(err, errClosed) {
		return err
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// 08: connection exception; 57P01-57P03: the server is shutting down or starting;
		// 53300: too many connections.
		if !strings.HasPrefix(pe.Code, "08") && !slices.Contains([]string{"57P01", "57P02", "57P03", "53300"}, pe.Code) {
			return err
		}
	} else {
		var ne net.Error
		var ce *pgconn.ConnectError
		if !errors.As(err, &ne) && !errors.As(err, &ce) && !pgconn.Timeout(err) && !pgconn.SafeToRetry(err) &&
			!errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
	return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
}

// stamp returns t, or now if t is zero, at the millisecond precision both backends keep.
func (s *Store) stamp(t time.Time) time.Time { return store.Stamp(t, s.now) }

func utc(t time.Time) time.Time { return t.UTC() }

var _ store.Store = (*Store)(nil)

// recordError names the error of reading or writing the record id of what ("file",
// "webhook endpoint"...), doing what: no row is store.ErrNotFound.
func recordError(what, id, doing string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%s %q: %w", what, id, store.ErrNotFound)
	}
	return fmt.Errorf("%s %s %q: %w", doing, what, id, err)
}
