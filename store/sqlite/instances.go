package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// Instances.
//
// Besides its heartbeat, an instance registered through a Store holds an exclusive lock
// (flock) on a file of its own, <db>-instances/<id>.lock, while it is registered and the
// Store is open. The kernel drops the lock when the process ends, however it ends, so a
// sweep that can take an instance's lock knows its process is gone whatever its heartbeat
// says: a gateway restarted after a crash frees the holds of its previous run at once,
// while the instances of other live processes on the same file keep theirs. A lock file
// appears under its name already locked (it is locked under a temporary name, then
// renamed), so a lock that can be taken is never one being set up. Where there are no
// file locks, heartbeats alone decide.
//
// Start-up order: Open replays the settlement journal before it returns, and instances
// register and sweep only after that, so a dead run's journaled settlements shrink its
// lease reservations before what is left of them is released: nothing journaled is lost
// or charged twice. The replay also records the dead run's unsettled lease requests as
// interrupted; the sweep records those with a reservation of their own.

// instanceLocks are the lock files a Store holds for the instances registered through it.
type instanceLocks struct {
	mu sync.Mutex
	m  map[string]*os.File // instance id → its locked file
}

// releaseAll lets go of every lock, leaving the files: their instances now count as dead.
func (l *instanceLocks) releaseAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, f := range l.m {
		unlock(f)
		delete(l.m, id)
	}
}

func (l *instanceLocks) holds(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.m[id]
	return ok
}

func (s *Store) instancesDir() string { return s.path + "-instances" }

// lockInstance takes the lock file of instance id, unless this store holds it already.
func (s *Store) lockInstance(id string) error {
	if !locksWork {
		return nil
	}
	l := &s.locks
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.m[id]; ok {
		return nil
	}
	dir := s.instancesDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("instance locks: %w", err)
	}
	tmp, final := filepath.Join(dir, id+".tmp"), filepath.Join(dir, id+".lock")
	f, ok, err := tryLock(tmp, true)
	if err == nil && !ok {
		err = fmt.Errorf("instance %q is being registered by another process", id)
	}
	if err != nil {
		return fmt.Errorf("instance locks: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		unlock(f)
		_ = os.Remove(tmp)
		return fmt.Errorf("instance locks: %w", err)
	}
	if l.m == nil {
		l.m = map[string]*os.File{}
	}
	l.m[id] = f
	return nil
}

// goneLock is the lock of a dead instance, taken by a sweep.
type goneLock struct {
	id   string
	path string
	f    *os.File
}

// goneInstances takes the locks of the instances whose process is gone: lock files nobody
// holds. It also removes temporary lock files left by a crash during a registration.
func (s *Store) goneInstances(self string) []goneLock {
	if !locksWork {
		return nil
	}
	dir := s.instancesDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var gone []goneLock
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(dir, name)
		if id, ok := strings.CutSuffix(name, ".tmp"); ok {
			// A registration renames its file at once; one a minute old was abandoned.
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > time.Minute && !s.locks.holds(id) {
				if f, ok, err := tryLock(path, false); err == nil && ok {
					_ = os.Remove(path)
					unlock(f)
				}
			}
			continue
		}
		id, ok := strings.CutSuffix(name, ".lock")
		if !ok || id == self || s.locks.holds(id) || store.ValidateInstanceID(id) != nil {
			continue
		}
		if f, ok, err := tryLock(path, false); err == nil && ok {
			gone = append(gone, goneLock{id: id, path: path, f: f})
		}
	}
	return gone
}

// Ping checks that the store is open, that its file is still the one it opened and can
// be opened (the connections already open would go on answering from a file removed,
// replaced or made unreadable since, but no new one could), and that a read answers.
func (s *Store) Ping(ctx context.Context) error {
	if s.wr.isClosed() {
		return errClosed
	}
	f, err := os.Open(s.path)
	if err != nil {
		return fmt.Errorf("%w: opening the database file: %w", store.ErrUnavailable, err)
	}
	info, err := f.Stat()
	_ = f.Close()
	if err != nil {
		return fmt.Errorf("%w: reading the database file: %w", store.ErrUnavailable, err)
	}
	if !os.SameFile(info, s.file) {
		return fmt.Errorf("%w: the database file was moved, replaced or removed since it was opened", store.ErrUnavailable)
	}
	var n int
	if err := s.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_version`).Scan(&n); err != nil {
		return fmt.Errorf("pinging: %w", markUnavailable(err))
	}
	return nil
}

// RegisterInstance records instance id as alive and takes its lock file.
func (s *Store) RegisterInstance(ctx context.Context, id string) error {
	if err := store.ValidateInstanceID(id); err != nil {
		return fmt.Errorf("registering instance: %w", err)
	}
	if err := s.lockInstance(id); err != nil {
		return fmt.Errorf("registering instance %q: %w", id, err)
	}
	now := millis(s.now())
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO instances (id, started_at, heartbeat_at) VALUES (?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at`, id, now, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("registering instance %q: %w", id, err)
	}
	return nil
}

// Heartbeat records that instance id is alive; store.ErrNotFound if it is not registered.
func (s *Store) Heartbeat(ctx context.Context, id string) error {
	now := millis(s.now())
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE instances SET heartbeat_at = ? WHERE id = ?`, now, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(err, fmt.Errorf("instance %q: %w", id, store.ErrNotFound))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	return nil
}

// ReleaseOrphaned releases the reservations of dead instances: those whose lock file
// nobody holds, those whose heartbeat is older than timeout, and, for reservations older
// than timeout, owners that are not registered.
func (s *Store) ReleaseOrphaned(ctx context.Context, self string, timeout time.Duration) (int, error) {
	stale := millis(s.now().Add(-timeout))
	gone := s.goneInstances(self)
	var n int
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		n = 0
		dead := make([]string, 0, len(gone))
		for _, g := range gone {
			dead = append(dead, g.id)
		}
		rows, err := tx.QueryContext(ctx, `SELECT id FROM instances WHERE id <> ? AND heartbeat_at < ?`, self, stale)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				_ = rows.Close()
				return err
			}
			dead = append(dead, id)
		}
		if err := errors.Join(rows.Close(), rows.Err()); err != nil {
			return err
		}
		for _, id := range dead {
			k, err := s.releaseWhere(ctx, tx, `owner = ?`, id)
			if err != nil {
				return err
			}
			n += k
			if err := s.freeClaims(ctx, tx, id); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM instances WHERE id = ?`, id); err != nil {
				return err
			}
		}
		k, err := s.releaseWhere(ctx, tx, `owner <> '' AND owner <> ? AND created_at < ? AND owner NOT IN (SELECT id FROM instances)`, self, stale)
		n += k
		return err
	})
	for _, g := range gone {
		if err == nil {
			// Its holds are gone with it: nothing is left for its file to mark.
			_ = os.Remove(g.path)
		}
		unlock(g.f)
	}
	if err != nil {
		return 0, fmt.Errorf("releasing the reservations of dead instances: %w", err)
	}
	return n, nil
}

// freeClaims makes the items instance id holds claimed due now, as if their leases had
// run out: the instance is gone, so its claims need not wait out their leases (a job's
// poll, minutes) before another instance takes them. The next claim counts an attempt.
func (s *Store) freeClaims(ctx context.Context, tx *sql.Tx, id string) error {
	now := millis(s.now())
	_, err := tx.ExecContext(ctx, `UPDATE queue_items SET run_at = ? WHERE owner = ? AND run_at > ?`, now, id, now)
	return err
}

// RetireInstance releases what instance id holds, unregisters it and lets go of its lock.
func (s *Store) RetireInstance(ctx context.Context, id string) (int, error) {
	var n int
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		if n, err = s.releaseWhere(ctx, tx, `owner = ?`, id); err != nil {
			return err
		}
		if err := s.freeClaims(ctx, tx, id); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM instances WHERE id = ?`, id)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("retiring instance %q: %w", id, err)
	}
	l := &s.locks
	l.mu.Lock()
	if f, ok := l.m[id]; ok {
		_ = os.Remove(filepath.Join(s.instancesDir(), id+".lock"))
		unlock(f)
		delete(l.m, id)
	}
	l.mu.Unlock()
	return n, nil
}
