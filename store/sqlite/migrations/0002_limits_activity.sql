-- Per-key spending limits, workspaces created through the API, and daily activity.

ALTER TABLE workspaces ADD COLUMN parent_id TEXT REFERENCES workspaces (id);

CREATE INDEX workspaces_parent ON workspaces (parent_id, created_at, id) WHERE parent_id IS NOT NULL;

-- limit_nanos 0 means no limit; limit_reset is '', 'daily', 'weekly' or 'monthly' (UTC).
ALTER TABLE api_keys ADD COLUMN limit_nanos INTEGER NOT NULL DEFAULT 0 CHECK (limit_nanos >= 0);
ALTER TABLE api_keys ADD COLUMN limit_reset TEXT NOT NULL DEFAULT '' CHECK (limit_reset IN ('', 'daily', 'weekly', 'monthly'));

-- A key's open reservations and settled charges count against its limit. Rows written
-- before this migration belong to no key ('').
ALTER TABLE reservations ADD COLUMN key_id TEXT NOT NULL DEFAULT '';
CREATE INDEX reservations_key ON reservations (key_id) WHERE key_id <> '';

ALTER TABLE ledger ADD COLUMN key_id TEXT NOT NULL DEFAULT '';
CREATE INDEX ledger_key_charges ON ledger (key_id, created_at) WHERE kind = 'charge' AND key_id <> '';

-- GET /activity reads a workspace's generations by time.
CREATE INDEX generations_workspace_created ON generations (workspace_id, created_at);
