-- Batch rows (store.BatchRows): the outcome of each row of a gateway-run batch, recorded
-- once by (batch_id, idx) whichever instance ran it.
CREATE TABLE batch_rows (
	batch_id      TEXT NOT NULL,
	idx           INTEGER NOT NULL,
	custom_id     TEXT NOT NULL,
	status_code   INTEGER NOT NULL,
	request_id    TEXT NOT NULL,
	body          TEXT,
	error_code    TEXT NOT NULL,
	error_message TEXT NOT NULL,
	cost_nanos    BIGINT NOT NULL,
	created_at    TIMESTAMPTZ NOT NULL,
	PRIMARY KEY (batch_id, idx)
);
-- A batch's cancellation, asked by its owner (POST /batches/{id}/cancel) while its job
-- runs: the job's poll and the row workers read it, as no one but the job's poll changes
-- the job.
CREATE TABLE batch_cancels (
	batch_id     TEXT PRIMARY KEY,
	requested_at TIMESTAMPTZ NOT NULL
);
