package sqlite

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/store/storetest"
)

// execOn runs statements on the database file at path through a connection of its own,
// beside any store open on it.
func execOn(t *testing.T, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("sqlite3", path+"?_foreign_keys=1&_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%.80s: %v", q, err)
		}
	}
}

// TestBatchRowWriteFailsWhole makes SQLite refuse a row halfway through a write (a
// trigger): the write's rows and counts are all undone.
func TestBatchRowWriteFailsWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.db")
	s := openTemp(t, path)
	storetest.CheckFailedBatchRowWrite(t, s, func() {
		execOn(t, path, `CREATE TRIGGER refuse_row BEFORE INSERT ON batch_rows WHEN NEW.idx = `+strconv.Itoa(storetest.RefusedBatchRow)+`
			BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`)
	}, func() {
		execOn(t, path, `DROP TRIGGER refuse_row`)
	})
}

// TestUpgradeCountsBatchRows builds a database as migration 14 left it, with the rows of
// two batches recorded, and checks that migration 15 counts them: the counts are what the
// rows add up to, and rows recorded after the upgrade add to them.
func TestUpgradeCountsBatchRows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.db")
	stmts := []string{`CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT`}
	for _, m := range storetest.MigrationsUpTo(t, migrationFiles, 14) {
		stmts = append(stmts, m.SQL, `INSERT INTO schema_version VALUES (`+strconv.Itoa(m.Version)+`, 0)`)
	}
	stmts = append(stmts,
		`INSERT INTO batch_rows (`+batchRowColumns+`) VALUES `+fmt.Sprintf(storetest.BatchRowsBeforeCounts, "0"))
	execOn(t, path, stmts...)

	s := openTemp(t, path)
	storetest.CheckUpgradedBatchRowCounts(t, s)
}

// TestPlainBatchRowWritesCounted writes batch_rows beside the store, as a gateway of
// before migration 15 does: the triggers count its rows all the same.
func TestPlainBatchRowWritesCounted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.db")
	s := openTemp(t, path)
	storetest.CheckPlainBatchRowWrites(t, s, func(stmt string) { execOn(t, path, stmt) }, "0")
}
