-- Batch row counts (store.BatchRows.CountBatchRows): a batch's recorded rows counted and
-- their costs summed, so that the batch's job reads its progress from one row every second
-- rather than count up to 50,000. failed is done - completed; completed counts the rows
-- answered with a 2xx (store.BatchRow.Succeeded).
--
-- Triggers on batch_rows keep them, not the gateway's code: a gateway of before this
-- migration (one rolled back to, or a tool) records rows knowing nothing of the counts,
-- and a batch whose rows it records would be undercounted and never complete. Every writer
-- of batch_rows, whatever its version, keeps them so; a row INSERT OR IGNORE or ON
-- CONFLICT DO NOTHING skips fires nothing.
CREATE TABLE batch_row_counts (
	batch_id   TEXT PRIMARY KEY,
	done       INTEGER NOT NULL,
	completed  INTEGER NOT NULL,
	cost_nanos INTEGER NOT NULL
) WITHOUT ROWID;
-- The batches with rows recorded before this migration are counted once here.
INSERT INTO batch_row_counts (batch_id, done, completed, cost_nanos)
SELECT batch_id, COUNT(*), SUM(CASE WHEN status_code >= 200 AND status_code < 300 THEN 1 ELSE 0 END), SUM(cost_nanos)
FROM batch_rows GROUP BY batch_id;

CREATE TRIGGER batch_row_counts_insert AFTER INSERT ON batch_rows BEGIN
	INSERT INTO batch_row_counts (batch_id, done, completed, cost_nanos)
	VALUES (NEW.batch_id, 1, CASE WHEN NEW.status_code >= 200 AND NEW.status_code < 300 THEN 1 ELSE 0 END, NEW.cost_nanos)
	ON CONFLICT (batch_id) DO UPDATE SET done = done + 1, completed = completed + excluded.completed,
		cost_nanos = cost_nanos + excluded.cost_nanos;
END;

CREATE TRIGGER batch_row_counts_delete AFTER DELETE ON batch_rows BEGIN
	UPDATE batch_row_counts SET done = done - 1,
		completed = completed - CASE WHEN OLD.status_code >= 200 AND OLD.status_code < 300 THEN 1 ELSE 0 END,
		cost_nanos = cost_nanos - OLD.cost_nanos
	WHERE batch_id = OLD.batch_id;
END;

-- A row changed comes off its batch's counts as it was and adds to them as it is.
CREATE TRIGGER batch_row_counts_update AFTER UPDATE OF batch_id, status_code, cost_nanos ON batch_rows BEGIN
	UPDATE batch_row_counts SET done = done - 1,
		completed = completed - CASE WHEN OLD.status_code >= 200 AND OLD.status_code < 300 THEN 1 ELSE 0 END,
		cost_nanos = cost_nanos - OLD.cost_nanos
	WHERE batch_id = OLD.batch_id;
	INSERT INTO batch_row_counts (batch_id, done, completed, cost_nanos)
	VALUES (NEW.batch_id, 1, CASE WHEN NEW.status_code >= 200 AND NEW.status_code < 300 THEN 1 ELSE 0 END, NEW.cost_nanos)
	ON CONFLICT (batch_id) DO UPDATE SET done = done + 1, completed = completed + excluded.completed,
		cost_nanos = cost_nanos + excluded.cost_nanos;
END;
