package postgres

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/storetest"
)

// TestBatchRowWriteFailsWhole makes PostgreSQL refuse a row halfway through a write (a
// trigger): the write's rows and counts are all undone.
func TestBatchRowWriteFailsWhole(t *testing.T) {
	dsn := freshSchema(t)
	s := openStore(t, dsn)
	storetest.CheckFailedBatchRowWrite(t, s, func() {
		adminExec(t, dsn, `CREATE FUNCTION refuse_row() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				IF NEW.idx = `+strconv.Itoa(storetest.RefusedBatchRow)+` THEN RAISE EXCEPTION 'refused by the test'; END IF;
				RETURN NEW;
			END $$`)
		adminExec(t, dsn, `CREATE TRIGGER refuse_row BEFORE INSERT ON batch_rows FOR EACH ROW EXECUTE FUNCTION refuse_row()`)
	}, func() {
		adminExec(t, dsn, `DROP TRIGGER refuse_row ON batch_rows`)
	})
}

// schemaBeforeCounts returns the DSN of a fresh schema as migration 14 left it, before the
// batches' counts.
func schemaBeforeCounts(t *testing.T) string {
	t.Helper()
	dsn := freshSchema(t)
	adminExec(t, dsn, `CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`)
	for _, m := range storetest.MigrationsUpTo(t, migrationFiles, 14) {
		adminExec(t, dsn, m.SQL)
		adminExec(t, dsn, `INSERT INTO schema_version (version) VALUES (`+strconv.Itoa(m.Version)+`)`)
	}
	return dsn
}

// TestUpgradeCountsBatchRows builds a schema as migration 14 left it, with the rows of
// two batches recorded, and checks that migration 15 counts them: the counts are what the
// rows add up to, and rows recorded after the upgrade add to them.
func TestUpgradeCountsBatchRows(t *testing.T) {
	dsn := schemaBeforeCounts(t)
	adminExec(t, dsn, `INSERT INTO batch_rows (`+batchRowColumns+`) VALUES `+fmt.Sprintf(storetest.BatchRowsBeforeCounts, "now()"))

	s := openStore(t, dsn)
	storetest.CheckUpgradedBatchRowCounts(t, s)
}

// TestPlainBatchRowWritesCounted writes batch_rows beside the store, as an instance of
// before migration 15 does in a rolling upgrade: the triggers count its rows all the same.
func TestPlainBatchRowWritesCounted(t *testing.T) {
	dsn := freshSchema(t)
	s := openStore(t, dsn)
	storetest.CheckPlainBatchRowWrites(t, s, func(stmt string) { adminExec(t, dsn, stmt) }, "now()")
}

// plainBatchRow is an INSERT of row idx of batch as an instance of before migration 15
// makes it.
func plainBatchRow(batch string, idx int) string {
	return `INSERT INTO batch_rows (` + batchRowColumns + `) VALUES ('` + batch + `', ` + strconv.Itoa(idx) + `, 'req', 200, 'gen', '{}', '', '', 10, now())
		ON CONFLICT (batch_id, idx) DO NOTHING`
}

// beginPlain opens a connection to dsn beside any store and begins a transaction on it,
// as an instance of before migration 15 records rows: one INSERT a row.
func beginPlain(t *testing.T, ctx context.Context, dsn string) pgx.Tx {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

// TestOverlappingBatchRowWriters interleaves two writers of one batch's rows, each a row
// at a time in a transaction (any version's writes): the first records row 1, the second
// row 5, then the first row 5 too, which waits for the second to end. Were the counts
// taken at each row, the second would wait for the counts the first holds, and the two
// for each other; taken at the commit, the second records its row at once, commits, and
// the first, its row 5 skipped, commits after it. Each row is counted once.
func TestOverlappingBatchRowWriters(t *testing.T) {
	dsn := freshSchema(t)
	s := openStore(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, second := beginPlain(t, ctx, dsn), beginPlain(t, ctx, dsn)
	if _, err := first.Exec(ctx, plainBatchRow("batch_o", 1)); err != nil {
		t.Fatal(err)
	}
	secondRecorded := make(chan error, 1)
	go func() {
		_, err := second.Exec(ctx, plainBatchRow("batch_o", 5))
		secondRecorded <- err
	}()
	select {
	case err := <-secondRecorded:
		if err != nil {
			t.Fatalf("the second writer's row 5: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the second writer's row 5 waited 3 s for the first writer, which has only row 1: the counts are locked before the commit")
	}
	firstRecorded := make(chan execResult, 1)
	go func() {
		tag, err := first.Exec(ctx, plainBatchRow("batch_o", 5))
		firstRecorded <- execResult{tag.RowsAffected(), err}
	}()
	if err := second.Commit(ctx); err != nil {
		t.Fatalf("the second writer's commit: %v", err)
	}
	if r := <-firstRecorded; r.err != nil || r.rows != 0 {
		t.Fatalf("the first writer's row 5, the second's committed: %d rows, %v; want it skipped", r.rows, r.err)
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatalf("the first writer's commit: %v", err)
	}
	want := store.BatchRowCounts{Done: 2, Completed: 2, CostNanos: 20}
	if got, err := s.CountBatchRows(ctx, "batch_o"); err != nil || got != want {
		t.Fatalf("counts: %+v, %v; want %+v", got, err, want)
	}
}

// execResult is what an Exec on another goroutine returned.
type execResult struct {
	rows int64
	err  error
}

// TestUpgradeCountsRowsRecordedMeanwhile upgrades a schema from migration 14 while an
// instance of before migration 15 has a row recorded, uncommitted: the migration waits
// for it, and the row, committed meanwhile, is counted (by the backfill), not lost
// between the backfill and the triggers.
func TestUpgradeCountsRowsRecordedMeanwhile(t *testing.T) {
	dsn := schemaBeforeCounts(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	old := beginPlain(t, ctx, dsn)
	if _, err := old.Exec(ctx, plainBatchRow("batch_m", 0)); err != nil {
		t.Fatal(err)
	}
	type opened struct {
		s   *Store
		err error
	}
	upgraded := make(chan opened, 1)
	go func() {
		s, err := Open(ctx, dsn)
		upgraded <- opened{s, err}
	}()
	// The migration waits for batch_rows, which the old instance's write holds.
	watch := beginPlain(t, ctx, dsn)
	for waiting := false; !waiting; {
		if err := watch.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE NOT granted AND relation = 'batch_rows'::regclass)`).
			Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		select {
		case u := <-upgraded:
			t.Fatalf("the upgrade ended, %v, while a write of batch_rows was under way", u.err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := old.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	u := <-upgraded
	if u.err != nil {
		t.Fatalf("Open: %v", u.err)
	}
	t.Cleanup(func() { _ = u.s.Close() })
	want := store.BatchRowCounts{Done: 1, Completed: 1, CostNanos: 10}
	if got, err := u.s.CountBatchRows(ctx, "batch_m"); err != nil || got != want {
		t.Fatalf("counts of the row recorded during the upgrade: %+v, %v; want %+v", got, err, want)
	}
}
