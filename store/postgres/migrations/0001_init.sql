-- Money is integer nanodollars (BIGINT). Times are TIMESTAMPTZ, written at millisecond
-- precision so both backends return the same values.

CREATE TABLE workspaces (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL,
	created_at TIMESTAMPTZ NOT NULL
);

CREATE TABLE api_keys (
	id           TEXT PRIMARY KEY,
	workspace_id TEXT NOT NULL REFERENCES workspaces (id),
	kind         TEXT NOT NULL,
	name         TEXT NOT NULL,
	secret_hash  BYTEA NOT NULL,
	disabled     BOOLEAN NOT NULL DEFAULT false,
	created_at   TIMESTAMPTZ NOT NULL,
	revoked_at   TIMESTAMPTZ
);

CREATE INDEX api_keys_workspace ON api_keys (workspace_id, created_at, id);

-- The wallet's balance is kept in step with the ledger inside the same transaction;
-- the CHECKs are a last line of defence should a code path ever forget the rules.
CREATE TABLE wallets (
	workspace_id   TEXT PRIMARY KEY REFERENCES workspaces (id),
	balance_nanos  BIGINT NOT NULL DEFAULT 0 CHECK (balance_nanos >= 0),
	reserved_nanos BIGINT NOT NULL DEFAULT 0 CHECK (reserved_nanos >= 0)
);

CREATE TABLE reservations (
	id           TEXT PRIMARY KEY,
	workspace_id TEXT NOT NULL REFERENCES workspaces (id),
	amount_nanos BIGINT NOT NULL CHECK (amount_nanos >= 0),
	created_at   TIMESTAMPTZ NOT NULL,
	expires_at   TIMESTAMPTZ NOT NULL
);

CREATE INDEX reservations_expires ON reservations (expires_at);

CREATE TABLE generations (
	id                 TEXT PRIMARY KEY,
	workspace_id       TEXT NOT NULL REFERENCES workspaces (id),
	key_id             TEXT NOT NULL,
	endpoint           TEXT NOT NULL,
	model              TEXT NOT NULL,
	provider           TEXT NOT NULL,
	upstream_model     TEXT NOT NULL,
	upstream_id        TEXT NOT NULL,
	streamed           BOOLEAN NOT NULL,
	cancelled          BOOLEAN NOT NULL,
	status             INTEGER NOT NULL,
	finish_reason      TEXT NOT NULL,
	error_code         TEXT NOT NULL,
	error_message      TEXT NOT NULL,
	input_tokens       BIGINT NOT NULL,
	cache_read_tokens  BIGINT NOT NULL,
	cache_write_tokens BIGINT NOT NULL,
	output_tokens      BIGINT NOT NULL,
	reasoning_tokens   BIGINT NOT NULL,
	cost_nanos         BIGINT NOT NULL CHECK (cost_nanos >= 0),
	unbilled_nanos     BIGINT NOT NULL CHECK (unbilled_nanos >= 0),
	cost_lines         JSONB NOT NULL,
	attempts           JSONB NOT NULL,
	latency_ms         BIGINT NOT NULL,
	generation_ms      BIGINT NOT NULL,
	end_to_end_ms      BIGINT NOT NULL,
	created_at         TIMESTAMPTZ NOT NULL
);

-- Generations are read per workspace (GET /generations, activity): ids are ULIDs, so this
-- index also lists a workspace's generations in time order.
CREATE INDEX generations_workspace ON generations (workspace_id, id);

-- Credits are positive, charges negative.
CREATE TABLE ledger (
	id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	workspace_id  TEXT NOT NULL REFERENCES workspaces (id),
	amount_nanos  BIGINT NOT NULL,
	kind          TEXT NOT NULL CHECK (kind IN ('credit', 'charge', 'adjustment')),
	generation_id TEXT REFERENCES generations (id),
	note          TEXT NOT NULL DEFAULT '',
	created_at    TIMESTAMPTZ NOT NULL
);

CREATE INDEX ledger_workspace ON ledger (workspace_id, id);
CREATE INDEX ledger_generation ON ledger (generation_id) WHERE generation_id IS NOT NULL;

-- The ledger is append-only: corrections are new rows, never edits.
CREATE FUNCTION ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'ledger is append-only';
END;
$$;

CREATE TRIGGER ledger_no_change BEFORE UPDATE OR DELETE ON ledger
	FOR EACH ROW EXECUTE FUNCTION ledger_append_only();

CREATE TRIGGER ledger_no_truncate BEFORE TRUNCATE ON ledger
	FOR EACH STATEMENT EXECUTE FUNCTION ledger_append_only();
