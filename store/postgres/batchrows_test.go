package postgres

import (
	"fmt"
	"strconv"
	"testing"

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

// TestUpgradeCountsBatchRows builds a schema as migration 14 left it, with the rows of
// two batches recorded, and checks that migration 15 counts them: the counts are what the
// rows add up to, and rows recorded after the upgrade add to them.
func TestUpgradeCountsBatchRows(t *testing.T) {
	dsn := freshSchema(t)
	adminExec(t, dsn, `CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`)
	for _, m := range storetest.MigrationsUpTo(t, migrationFiles, 14) {
		adminExec(t, dsn, m.SQL)
		adminExec(t, dsn, `INSERT INTO schema_version (version) VALUES (`+strconv.Itoa(m.Version)+`)`)
	}
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
