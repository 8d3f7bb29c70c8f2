// Package sqlite is the embedded store.Store backend: one SQLite file in WAL mode through
// mattn/go-sqlite3 (cgo), with zero set-up. It suits one gateway process; several
// processes may share the file, but PostgreSQL (store/postgres) is the backend for
// several instances behind a load balancer.
//
// Writes go through a single connection, so concurrent writers in this process queue in Go
// rather than spin on SQLITE_BUSY, and every write transaction starts with BEGIN IMMEDIATE,
// so a transaction that reads the wallet and then updates it can never deadlock against
// another process doing the same. Reads use a separate pool and never wait for writers.
//
// Writes are group-committed: concurrent writes queue to one writer goroutine that runs
// whatever has queued in one transaction, a savepoint per write, and commits once before
// answering any of them. Each write still succeeds or fails on its own, sees the writes
// queued before it, and returns only once durable; writer.go describes the guarantees,
// including what a cancelled context does. Settlements next to each other in a batch are
// applied together (settlebatch.go).
//
// Durable means what the store's Durability says: DurableProcess (the default) survives
// the process (synchronous=NORMAL; lease settlements are acknowledged from the settlement
// journal, journal.go), DurablePower also survives a power cut (synchronous=FULL, one
// fsync per batch).
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/internal/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// writerDriver is the driver of the writer's connection: mattn's, with temporary data in
// memory. The writer runs every run of settlements inside a savepoint (settlebatch.go), and
// SQLite keeps a savepoint's copies of the pages it changes in a sub-journal that spills to
// a temporary file beyond 64 KiB: at temp_store=FILE, nearly every batch created, wrote and
// deleted a file (a fifth of the writer's time per settlement at 27 per transaction).
// Readers keep the default, so that a large sort cannot take the process's memory.
const writerDriver = "sqlite3_gateway_writer"

func init() {
	sql.Register(writerDriver, &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		_, err := c.Exec("PRAGMA temp_store = MEMORY", nil)
		return err
	}})
}

// busyTimeout is how long a connection waits for another one's lock.
const busyTimeout = 10 * time.Second

// Store is a store.Store over one SQLite file. It is safe for concurrent use.
type Store struct {
	// w has exactly one connection: SQLite allows one writer at a time anyway.
	w *sql.DB
	// r serves single-statement reads, which WAL lets run beside the writer.
	r   *sql.DB
	now func() time.Time
	// wr queues writes for the writer goroutine, which owns w once Open returns.
	wr         *writer
	batchLimit int
	gather     time.Duration

	durability  Durability
	deferredErr func(error)
	// backgroundErr is told about failures of the store's background goroutines (a panic
	// of the writer or the journal's); nil: they are written to the standard error.
	backgroundErr func(error)
	// jr is the settlement journal (nil with DurablePower, or when another process holds
	// it); pending counts journaled settlements not yet applied; known holds the lease
	// reservations settlements may be journaled for (journal.go).
	jr       *journal
	replayed int // records the journal's replay applied at Open
	// interrupted counts the requests in flight of a dead run the replay recorded as interrupted.
	interrupted int
	pending     atomic.Int64
	known       knownReservations

	// path is the database file and file what it was at Open (Ping checks it is still
	// there); locks are the instance locks this store holds (instances.go).
	path  string
	file  os.FileInfo
	locks instanceLocks

	// changes is the change feed of jobs (jobs.go).
	changes store.ChangeHub
}

// Option adjusts a Store as it opens.
type Option func(*Store)

// WithClock makes the store read the time from now instead of the system clock: the
// times it stamps and the spending-limit periods it computes. Tests use it.
func WithClock(now func() time.Time) Option {
	return func(s *Store) {
		if now != nil {
			s.now = now
		}
	}
}

// withGatherDelay sets how long journaled settlements gather (benchmarks; default
// gatherDelay).
func withGatherDelay(d time.Duration) Option {
	return func(s *Store) { s.gather = d }
}

// withBatchLimit bounds the writes one transaction holds (tests and benchmarks; 1 turns
// group commit off).
func withBatchLimit(n int) Option {
	return func(s *Store) { s.batchLimit = n }
}

// Open opens (creating if needed) the SQLite database at path, creating its parent
// directory if missing, and applies pending migrations. It fails with an error wrapping
// store.ErrSchemaTooNew if a newer gateway has already migrated the file.
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	if path == "" {
		return nil, errors.New("opening sqlite store: empty path")
	}
	// Each pooled connection would get its own private in-memory database.
	if path == ":memory:" {
		return nil, errors.New("opening sqlite store: in-memory databases are not supported, use a file (t.TempDir() in tests)")
	}
	// mattn/go-sqlite3 cuts the file name at the first '?' to read its options.
	if strings.ContainsRune(path, '?') {
		return nil, fmt.Errorf("opening sqlite store: path %q must not contain '?'", path)
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("opening sqlite store: creating directory: %w", err)
		}
	}

	s := &Store{now: time.Now, batchLimit: batchLimit, gather: gatherDelay, path: path}
	for _, o := range opts {
		o(s)
	}
	// synchronous=FULL (DurablePower) makes a commit survive a power cut; NORMAL
	// (DurableProcess) makes it survive the process, WAL or not.
	// _stmt_cache_size: the same few statements run on every request; preparing them each
	// time was a quarter of the writer's CPU.
	common := url.Values{
		"_busy_timeout":    {strconv.FormatInt(busyTimeout.Milliseconds(), 10)},
		"_foreign_keys":    {"1"},
		"_stmt_cache_size": {"64"},
	}
	wopts := cloneValues(common)
	wopts.Set("_journal_mode", "WAL")
	wopts.Set("_synchronous", s.synchronous())
	wopts.Set("_txlock", "immediate")
	w, err := sql.Open(writerDriver, path+"?"+wopts.Encode())
	if err != nil {
		return nil, fmt.Errorf("opening sqlite store: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := connect(ctx, w); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("opening sqlite store %q: %w", path, err)
	}

	s.w = w
	if s.file, err = os.Stat(path); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("opening sqlite store %q: %w", path, err)
	}
	if err := s.migrate(ctx); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("opening sqlite store %q: %w", path, err)
	}

	ropts := cloneValues(common)
	ropts.Set("_query_only", "1")
	r, err := sql.Open("sqlite3", path+"?"+ropts.Encode())
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("opening sqlite store: %w", err)
	}
	r.SetMaxOpenConns(max(4, runtime.NumCPU()))
	s.r = r
	s.wr = newWriter(s.batchLimit, s.gather)
	go s.runWriter()
	if s.durability == DurableProcess {
		if err := s.openJournal(ctx, path+"-settlements"); err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("opening sqlite store %q: %w", path, err)
		}
	}
	return s, nil
}

// connect makes w's first connection. Turning a new file to WAL takes an exclusive lock, and
// SQLite answers SQLITE_BUSY at once, without waiting, to a connection that would deadlock
// waiting for it: when several processes (or stores) open one new file together, the losers
// try again until the busy timeout.
func connect(ctx context.Context, w *sql.DB) error {
	deadline := time.Now().Add(busyTimeout)
	for {
		err := w.PingContext(ctx)
		var se sqlite3.Error
		if err == nil || !errors.As(err, &se) || se.Code != sqlite3.ErrBusy || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (s *Store) synchronous() string {
	if s.durability == DurablePower {
		return "FULL"
	}
	return "NORMAL"
}

func cloneValues(v url.Values) url.Values {
	out := make(url.Values, len(v))
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

// Close closes the database. Writes already queued are run and committed first (their
// callers get their answers); writes made after Close fail.
func (s *Store) Close() error {
	if s.wr != nil {
		s.wr.stop()
	}
	if s.jr != nil {
		s.jr.close()
	}
	// An instance registered here and not retired now counts as dead (instances.go).
	s.locks.releaseAll()
	s.changes.Close()
	var errs []error
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	errs = append(errs, s.w.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("closing sqlite store: %w", err)
	}
	return nil
}

// migrate applies each pending migration in its own transaction. BEGIN IMMEDIATE makes
// two processes opening the same new file take turns, and the version is re-read inside
// each transaction, so the loser sees the winner's work and skips it.
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
		err := s.ownTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
				version    INTEGER PRIMARY KEY,
				applied_at INTEGER NOT NULL
			) STRICT`); err != nil {
				return err
			}
			var current int
			if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_version`).Scan(&current); err != nil {
				return err
			}
			switch {
			case current > latest:
				return fmt.Errorf("database is at version %d, this gateway knows up to %d: %w", current, latest, store.ErrSchemaTooNew)
			case current >= m.Version:
				return nil
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO schema_version (version, applied_at) VALUES (?, ?)`, m.Version, s.now().UnixMilli())
			return err
		})
		if err != nil {
			return fmt.Errorf("migration %s: %w", m.Name, err)
		}
	}
	return nil
}

// ownTx runs fn in a write transaction of its own (BEGIN IMMEDIATE) on the calling
// goroutine and commits if fn succeeds. Only migrate uses it, before the writer goroutine
// starts; every other write goes through tx (writer.go).
func (s *Store) ownTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("beginning transaction: %w", err)
	}
	if err := fn(ctx, tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}

// isConflict reports a primary key or unique constraint violation.
func isConflict(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) &&
		(se.ExtendedCode == sqlite3.ErrConstraintPrimaryKey || se.ExtendedCode == sqlite3.ErrConstraintUnique)
}

// markUnavailable wraps in store.ErrUnavailable the errors of a database that cannot be
// reached for now: a lock held by another process past the busy timeout, a file that
// cannot be opened, an I/O error, a full disk. Anything else (a constraint, a bug) is
// returned as it is.
func markUnavailable(err error) error {
	var se sqlite3.Error
	if !errors.As(err, &se) {
		return err
	}
	switch se.Code {
	case sqlite3.ErrBusy, sqlite3.ErrLocked, sqlite3.ErrCantOpen, sqlite3.ErrIoErr, sqlite3.ErrFull, sqlite3.ErrProtocol:
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}

func millis(t time.Time) int64 { return t.UnixMilli() }

func fromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// stamp returns t, or now if t is zero, at the millisecond precision the database keeps.
func (s *Store) stamp(t time.Time) time.Time { return store.Stamp(t, s.now) }

// scanner is what *sql.Row and *sql.Rows have in common.
type scanner interface{ Scan(dest ...any) error }

var _ store.Store = (*Store)(nil)

// recordError names the error of reading or writing the record id of what ("file",
// "webhook endpoint"...), doing what: no row is store.ErrNotFound.
func recordError(what, id, doing string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("%s %q: %w", what, id, store.ErrNotFound)
	}
	return fmt.Errorf("%s %s %q: %w", doing, what, id, markUnavailable(err))
}
