-- Batch row counts (store.BatchRows.CountBatchRows): a batch's recorded rows counted and
-- their costs summed, kept by the writes that record and delete its rows, so that the
-- batch's job reads its progress from one row every second rather than count up to 50,000.
-- failed is done - completed.
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
