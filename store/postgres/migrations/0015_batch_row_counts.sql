-- Batch row counts (store.BatchRows.CountBatchRows): a batch's recorded rows counted and
-- their costs summed, so that the batch's job reads its progress from one row every second
-- rather than count up to 50,000. failed is done - completed; completed counts the rows
-- answered with a 2xx (store.BatchRow.Succeeded).
--
-- Triggers on batch_rows keep them, not the gateway's code: in a rolling upgrade the
-- instances not yet upgraded record rows knowing nothing of the counts, and a batch whose
-- rows they record would be undercounted and never complete. Every writer of batch_rows,
-- whatever its version, keeps them so; a row ON CONFLICT DO NOTHING skips fires nothing.
--
-- Writers of the rows already waiting for this (or the lock below) commit before the
-- backfill reads the rows, and those that come after wait for the triggers: no row is
-- recorded between the backfill and the triggers, to be counted by neither.
LOCK TABLE batch_rows IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE batch_row_counts (
	batch_id   TEXT PRIMARY KEY,
	done       INTEGER NOT NULL,
	completed  INTEGER NOT NULL,
	cost_nanos BIGINT NOT NULL
);
-- The batches with rows recorded before this migration are counted once here.
INSERT INTO batch_row_counts (batch_id, done, completed, cost_nanos)
SELECT batch_id, COUNT(*), SUM(CASE WHEN status_code >= 200 AND status_code < 300 THEN 1 ELSE 0 END), SUM(cost_nanos)::BIGINT
FROM batch_rows GROUP BY batch_id;

-- A row recorded adds to its batch's counts, a row deleted takes off from them, a row
-- changed does both.
CREATE FUNCTION batch_row_counts_keep() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP IN ('UPDATE', 'DELETE') THEN
		UPDATE batch_row_counts SET done = done - 1,
			completed = completed - CASE WHEN OLD.status_code >= 200 AND OLD.status_code < 300 THEN 1 ELSE 0 END,
			cost_nanos = cost_nanos - OLD.cost_nanos
		WHERE batch_id = OLD.batch_id;
	END IF;
	IF TG_OP IN ('INSERT', 'UPDATE') THEN
		INSERT INTO batch_row_counts AS c (batch_id, done, completed, cost_nanos)
		VALUES (NEW.batch_id, 1, CASE WHEN NEW.status_code >= 200 AND NEW.status_code < 300 THEN 1 ELSE 0 END, NEW.cost_nanos)
		ON CONFLICT (batch_id) DO UPDATE SET done = c.done + 1, completed = c.completed + EXCLUDED.completed,
			cost_nanos = c.cost_nanos + EXCLUDED.cost_nanos;
	END IF;
	RETURN NULL;
END;
$$;

-- Deferred to the commit, so that every writer, of any version, locks a batch's counts
-- after every row it records and waits for nothing else while it holds them. Taken at each
-- row instead, a writer holding the counts could wait for a row another writer had
-- inserted, uncommitted, while that one waits for the counts: a deadlock whenever two
-- instances record a row of the same chunk (one claimed anew after its lease ran out).
-- Deferred alike, a deletion takes its rows off in the order of the write's changes, at
-- its end: a row recorded and deleted in one transaction comes to nothing, and the rows
-- of store.DeleteBatchRows's last page come off no counts, as it removes the batch's
-- counts itself (it locks them before it deletes anything, so no writer waits between).
CREATE CONSTRAINT TRIGGER batch_row_counts_keep AFTER INSERT OR UPDATE OF batch_id, status_code, cost_nanos OR DELETE ON batch_rows
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION batch_row_counts_keep();
