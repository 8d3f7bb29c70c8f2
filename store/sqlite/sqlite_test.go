package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/storetest"
)

func openTemp(t *testing.T, path string, opts ...Option) *Store {
	t.Helper()
	s, err := Open(context.Background(), path, opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	t.Run("process", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
			return openTemp(t, filepath.Join(t.TempDir(), "gateway.db"), WithClock(now))
		})
	})
	t.Run("power", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
			return openTemp(t, filepath.Join(t.TempDir(), "gateway.db"), WithClock(now), WithDurability(DurablePower))
		})
	})
}

func TestOpenCreatesDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a", "b", "gateway.db")
	s := openTemp(t, path)
	if err := s.CreateWorkspace(context.Background(), store.Workspace{ID: "ws_1"}); err != nil {
		t.Fatalf("CreateWorkspace: %v", err)
	}
}

func TestOpenRejects(t *testing.T) {
	tests := []struct{ name, path string }{
		{"empty", ""},
		{"memory", ":memory:"},
		{"query string", filepath.Join(t.TempDir(), "x.db?mode=ro")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if s, err := Open(context.Background(), tc.path); err == nil {
				_ = s.Close()
				t.Fatalf("Open(%q) succeeded, want an error", tc.path)
			}
		})
	}
}

func TestPragmas(t *testing.T) {
	for _, mode := range []struct {
		name        string
		d           Durability
		synchronous string
	}{
		// NORMAL: in WAL mode a commit survives the process, not a power cut.
		{"process", DurableProcess, "1"},
		// FULL: a commit, and with it every write of its batch, is on disk before any
		// caller hears of it.
		{"power", DurablePower, "2"},
	} {
		t.Run(mode.name, func(t *testing.T) {
			s := openTemp(t, filepath.Join(t.TempDir(), "gateway.db"), WithDurability(mode.d))
			ctx := context.Background()
			tests := []struct {
				name string
				db   *sql.DB
				want string
			}{
				{"journal_mode", s.w, "wal"},
				{"synchronous", s.w, mode.synchronous},
				{"foreign_keys", s.w, "1"},
				{"busy_timeout", s.w, "10000"},
				// The writer's savepoint sub-journals stay in memory (no temporary file per
				// batch); readers keep the default (0) so a large sort spills to disk.
				{"temp_store", s.w, "2"},
				{"foreign_keys", s.r, "1"},
				{"query_only", s.r, "1"},
				{"temp_store", s.r, "0"},
			}
			for _, tc := range tests {
				var got string
				if err := tc.db.QueryRowContext(ctx, "PRAGMA "+tc.name).Scan(&got); err != nil {
					t.Fatalf("PRAGMA %s: %v", tc.name, err)
				}
				if got != tc.want {
					t.Errorf("PRAGMA %s = %q, want %q", tc.name, got, tc.want)
				}
			}
			if (s.jr != nil) != (mode.d == DurableProcess) {
				t.Errorf("settlement journal open: %v, want it with DurableProcess only", s.jr != nil)
			}
		})
	}
}

func TestMigrations(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gateway.db")

	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: "ws_1", Name: "kept"}); err != nil {
		t.Fatalf("CreateWorkspace: %v", err)
	}
	_ = s.Close()

	// Reopening applies nothing twice and keeps the data.
	s, err = Open(ctx, path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	var versions, latest int
	if err := s.r.QueryRowContext(ctx, `SELECT COUNT(*), MAX(version) FROM schema_version`).Scan(&versions, &latest); err != nil {
		t.Fatalf("reading schema_version: %v", err)
	}
	if versions != latest {
		t.Errorf("schema_version has %d rows up to version %d, want one row per version", versions, latest)
	}
	if ws, err := s.GetWorkspace(ctx, "ws_1"); err != nil || ws.Name != "kept" {
		t.Fatalf("after reopen GetWorkspace = %+v, %v", ws, err)
	}

	// A newer gateway migrated this file: this one must refuse it rather than guess.
	if _, err := s.w.ExecContext(ctx, `INSERT INTO schema_version (version, applied_at) VALUES (?, ?)`, latest+1, time.Now().UnixMilli()); err != nil {
		t.Fatalf("faking a newer schema: %v", err)
	}
	_ = s.Close()
	s, err = Open(ctx, path)
	if !errors.Is(err, store.ErrSchemaTooNew) {
		if s != nil {
			_ = s.Close()
		}
		t.Fatalf("Open on a newer schema: error = %v, want ErrSchemaTooNew", err)
	}
}

// TestConcurrentOpenAndInstances opens one new file from several stores at once, as two
// gateway processes might, then races reservations across them.
func TestConcurrentOpenAndInstances(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gateway.db")
	stores := make([]*Store, 4)
	var wg sync.WaitGroup
	for i := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(ctx, path)
			if err != nil {
				t.Errorf("Open %d: %v", i, err)
				return
			}
			stores[i] = s
		}()
	}
	wg.Wait()
	for _, s := range stores {
		if s != nil {
			t.Cleanup(func() { _ = s.Close() })
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	if err := stores[0].CreateWorkspace(ctx, store.Workspace{ID: "ws_1"}); err != nil {
		t.Fatalf("CreateWorkspace: %v", err)
	}
	if _, err := stores[1].AddCredits(ctx, "ws_1", 10*store.NanosPerUSD, ""); err != nil {
		t.Fatalf("AddCredits: %v", err)
	}
	var mu sync.Mutex
	won := 0
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := stores[i%len(stores)].Reserve(ctx, store.ReserveParams{
				WorkspaceID: "ws_1", AmountNanos: store.NanosPerUSD, ExpiresAt: time.Now().Add(time.Hour),
			})
			if errors.Is(err, store.ErrInsufficientFunds) {
				return
			}
			if err != nil {
				t.Errorf("Reserve: %v", err)
				return
			}
			mu.Lock()
			won++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if won != 10 {
		t.Errorf("%d reservations of 1 USD succeeded against 10 USD across instances, want 10", won)
	}
}

func TestLedgerIsAppendOnly(t *testing.T) {
	s := openTemp(t, filepath.Join(t.TempDir(), "gateway.db"))
	ctx := context.Background()
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: "ws_1"}); err != nil {
		t.Fatalf("CreateWorkspace: %v", err)
	}
	if _, err := s.AddCredits(ctx, "ws_1", store.NanosPerUSD, "grant"); err != nil {
		t.Fatalf("AddCredits: %v", err)
	}
	tests := []struct{ name, sql string }{
		{"update", `UPDATE ledger SET amount_nanos = 0`},
		{"delete", `DELETE FROM ledger`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.w.ExecContext(ctx, tc.sql); err == nil {
				t.Fatalf("%s on the ledger succeeded", tc.name)
			}
		})
	}
	var sum int64
	if err := s.r.QueryRowContext(ctx, `SELECT SUM(amount_nanos) FROM ledger WHERE workspace_id = 'ws_1'`).Scan(&sum); err != nil {
		t.Fatalf("summing ledger: %v", err)
	}
	if sum != store.NanosPerUSD {
		t.Errorf("ledger sum = %d, want %d", sum, store.NanosPerUSD)
	}
}
