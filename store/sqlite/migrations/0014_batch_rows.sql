-- Batch rows (store.BatchRows): the outcome of each row of a gateway-run batch, recorded
-- once by (batch_id, idx) whichever instance ran it. Times are Unix milliseconds.
CREATE TABLE batch_rows (
	batch_id      TEXT NOT NULL,
	idx           INTEGER NOT NULL,
	custom_id     TEXT NOT NULL,
	status_code   INTEGER NOT NULL,
	request_id    TEXT NOT NULL,
	body          TEXT,
	error_code    TEXT NOT NULL,
	error_message TEXT NOT NULL,
	cost_nanos    INTEGER NOT NULL,
	created_at    INTEGER NOT NULL,
	PRIMARY KEY (batch_id, idx)
) WITHOUT ROWID;
-- A batch's cancellation, asked by its owner (POST /batches/{id}/cancel) while its job
-- runs: the job's poll and the row workers read it, as no one but the job's poll changes
-- the job.
CREATE TABLE batch_cancels (
	batch_id     TEXT PRIMARY KEY,
	requested_at INTEGER NOT NULL
) WITHOUT ROWID;
