-- Claims count failures, not claims: attempts now counts the claims that failed (Retry, or a
-- lease that ran out), and claims counts every claim of the item, the fence that names the
-- current one (store.Claim.Token). grp is the item's group, capped per Claim (store.ClaimParams).
ALTER TABLE queue_items ADD COLUMN claims INTEGER NOT NULL DEFAULT 0;
ALTER TABLE queue_items ADD COLUMN grp TEXT NOT NULL DEFAULT '';
-- Items already claimed keep their fence: the attempt that named their claim until now.
UPDATE queue_items SET claims = attempts;
-- A capped Claim counts the items of each group under a lease: few rows at any time.
CREATE INDEX queue_items_leased ON queue_items (queue, grp) WHERE owner <> '';

-- Jobs (store.Jobs): work that outlives a request, polled through the claims. Times are
-- NULL when unset, and so are JSON columns.
CREATE TABLE jobs (
	id             TEXT PRIMARY KEY,
	workspace_id   TEXT NOT NULL REFERENCES workspaces (id),
	kind           TEXT NOT NULL,
	key_id         TEXT NOT NULL,
	model          TEXT NOT NULL,
	provider       TEXT NOT NULL,
	upstream_model TEXT NOT NULL,
	native_id      TEXT NOT NULL,
	status         TEXT NOT NULL,
	lifecycle      TEXT NOT NULL,
	progress       INTEGER NOT NULL,
	usage          JSONB,
	reservation_id TEXT NOT NULL,
	held_nanos     BIGINT NOT NULL,
	webhook        JSONB,
	delivery       JSONB,
	request        JSONB,
	result         JSONB,
	error_code     TEXT NOT NULL,
	error_message  TEXT NOT NULL,
	created_at     TIMESTAMPTZ NOT NULL,
	updated_at     TIMESTAMPTZ NOT NULL,
	completed_at   TIMESTAMPTZ,
	expires_at     TIMESTAMPTZ
);

CREATE INDEX jobs_workspace_created ON jobs (workspace_id, created_at, id);
CREATE INDEX jobs_workspace_kind_created ON jobs (workspace_id, kind, created_at, id);

-- Deliveries (store.Deliveries): the outbox of events to deliver, one row per event and
-- target, and the attempts made at each.
CREATE TABLE deliveries (
	id           TEXT PRIMARY KEY,
	workspace_id TEXT NOT NULL REFERENCES workspaces (id),
	job_id       TEXT NOT NULL,
	target       TEXT NOT NULL,
	event_type   TEXT NOT NULL,
	payload      JSONB NOT NULL,
	status       TEXT NOT NULL,
	attempts     INTEGER NOT NULL DEFAULT 0,
	next_at      TIMESTAMPTZ,
	created_at   TIMESTAMPTZ NOT NULL,
	updated_at   TIMESTAMPTZ NOT NULL
);

CREATE INDEX deliveries_job ON deliveries (workspace_id, job_id, created_at, id);

CREATE TABLE delivery_attempts (
	id               TEXT PRIMARY KEY,
	delivery_id      TEXT NOT NULL REFERENCES deliveries (id) ON DELETE CASCADE,
	workspace_id     TEXT NOT NULL,
	job_id           TEXT NOT NULL,
	number           INTEGER NOT NULL,
	event_type       TEXT NOT NULL,
	status_code      INTEGER NOT NULL,
	delivered        BOOLEAN NOT NULL,
	duration_ms      INTEGER NOT NULL,
	error            TEXT NOT NULL,
	response_preview TEXT NOT NULL,
	next_at          TIMESTAMPTZ,
	created_at       TIMESTAMPTZ NOT NULL
);

CREATE INDEX delivery_attempts_job ON delivery_attempts (workspace_id, job_id, created_at, id);
CREATE INDEX delivery_attempts_delivery ON delivery_attempts (delivery_id, created_at, id);
