-- Times are Unix milliseconds (UTC); money is integer nanodollars.

CREATE TABLE workspaces (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL,
	created_at INTEGER NOT NULL
) STRICT;

CREATE TABLE api_keys (
	id           TEXT PRIMARY KEY,
	workspace_id TEXT NOT NULL REFERENCES workspaces (id),
	kind         TEXT NOT NULL,
	name         TEXT NOT NULL,
	secret_hash  BLOB NOT NULL,
	disabled     INTEGER NOT NULL DEFAULT 0,
	created_at   INTEGER NOT NULL,
	revoked_at   INTEGER
) STRICT;

CREATE INDEX api_keys_workspace ON api_keys (workspace_id, created_at, id);

-- The wallet's balance is kept in step with the ledger inside the same transaction;
-- the CHECKs are a last line of defence should a code path ever forget the rules.
CREATE TABLE wallets (
	workspace_id   TEXT PRIMARY KEY REFERENCES workspaces (id),
	balance_nanos  INTEGER NOT NULL DEFAULT 0 CHECK (balance_nanos >= 0),
	reserved_nanos INTEGER NOT NULL DEFAULT 0 CHECK (reserved_nanos >= 0)
) STRICT;

CREATE TABLE reservations (
	id           TEXT PRIMARY KEY,
	workspace_id TEXT NOT NULL REFERENCES workspaces (id),
	amount_nanos INTEGER NOT NULL CHECK (amount_nanos >= 0),
	created_at   INTEGER NOT NULL,
	expires_at   INTEGER NOT NULL
) STRICT;

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
	streamed           INTEGER NOT NULL,
	cancelled          INTEGER NOT NULL,
	status             INTEGER NOT NULL,
	finish_reason      TEXT NOT NULL,
	error_code         TEXT NOT NULL,
	error_message      TEXT NOT NULL,
	input_tokens       INTEGER NOT NULL,
	cache_read_tokens  INTEGER NOT NULL,
	cache_write_tokens INTEGER NOT NULL,
	output_tokens      INTEGER NOT NULL,
	reasoning_tokens   INTEGER NOT NULL,
	cost_nanos         INTEGER NOT NULL CHECK (cost_nanos >= 0),
	unbilled_nanos     INTEGER NOT NULL CHECK (unbilled_nanos >= 0),
	cost_lines         TEXT NOT NULL,
	attempts           TEXT NOT NULL,
	latency_ms         INTEGER NOT NULL,
	generation_ms      INTEGER NOT NULL,
	end_to_end_ms      INTEGER NOT NULL,
	created_at         INTEGER NOT NULL
) STRICT;

-- Generations are read per workspace (GET /generations, activity): ids are ULIDs, so this
-- index also lists a workspace's generations in time order.
CREATE INDEX generations_workspace ON generations (workspace_id, id);

-- Credits are positive, charges negative.
CREATE TABLE ledger (
	id            INTEGER PRIMARY KEY AUTOINCREMENT,
	workspace_id  TEXT NOT NULL REFERENCES workspaces (id),
	amount_nanos  INTEGER NOT NULL,
	kind          TEXT NOT NULL CHECK (kind IN ('credit', 'charge', 'adjustment')),
	generation_id TEXT REFERENCES generations (id),
	note          TEXT NOT NULL DEFAULT '',
	created_at    INTEGER NOT NULL
) STRICT;

CREATE INDEX ledger_workspace ON ledger (workspace_id, id);

-- The ledger is append-only: corrections are new rows, never edits.
CREATE TRIGGER ledger_no_update BEFORE UPDATE ON ledger
BEGIN
	SELECT RAISE(ABORT, 'ledger is append-only');
END;

CREATE TRIGGER ledger_no_delete BEFORE DELETE ON ledger
BEGIN
	SELECT RAISE(ABORT, 'ledger is append-only');
END;
