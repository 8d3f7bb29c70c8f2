-- Webhook endpoints (store.WebhookEndpoints). Secrets are stored as the gateway sealed them
-- (AES-256-GCM under the operator's key), never in the clear.
CREATE TABLE webhook_endpoints (
	id                   TEXT PRIMARY KEY,
	workspace_id         TEXT NOT NULL REFERENCES workspaces (id),
	name                 TEXT NOT NULL,
	url                  TEXT NOT NULL,
	events               TEXT[] NOT NULL,
	status               TEXT NOT NULL,
	secret               BYTEA NOT NULL,
	previous_secret      BYTEA,
	previous_until       TIMESTAMPTZ,
	created_by           TEXT NOT NULL,
	created_at           TIMESTAMPTZ NOT NULL,
	updated_at           TIMESTAMPTZ NOT NULL,
	consecutive_failures INTEGER NOT NULL DEFAULT 0,
	disabled_reason      TEXT NOT NULL DEFAULT ''
);

CREATE INDEX webhook_endpoints_workspace_created ON webhook_endpoints (workspace_id, created_at, id);
