-- A request cut by a gateway crash is recorded as interrupted when its hold is freed: a
-- reservation of a request's own names the request (a lease's names none, ''), and a
-- generation says where its error came from. Rows written before this migration name
-- no request and no origin. A column with a constant default rewrites no row.
ALTER TABLE reservations
	ADD COLUMN generation_id TEXT NOT NULL DEFAULT '',
	ADD COLUMN endpoint TEXT NOT NULL DEFAULT '',
	ADD COLUMN model TEXT NOT NULL DEFAULT '';

ALTER TABLE generations ADD COLUMN error_origin TEXT NOT NULL DEFAULT '';

-- Requests admitted from a lease, in flight, written in batches in the background (see
-- inflight.go): a sweep that frees a dead owner's holds records those of its requests
-- that have no generation as interrupted.
CREATE TABLE inflight (
	generation_id  TEXT PRIMARY KEY,
	workspace_id   TEXT NOT NULL,
	key_id         TEXT NOT NULL,
	endpoint       TEXT NOT NULL,
	model          TEXT NOT NULL,
	reservation_id TEXT NOT NULL,
	owner          TEXT NOT NULL,
	started_at     TIMESTAMPTZ NOT NULL
);
CREATE INDEX inflight_owner ON inflight (owner);
