-- Notification destinations (store.Notifications). A target is stored as the gateway sealed
-- it (AES-256-GCM under the operator's key, the workspace and id as context), never in the
-- clear; preview is the kind's masked form of it.
CREATE TABLE notification_destinations (
	id                TEXT PRIMARY KEY,
	workspace_id      TEXT NOT NULL REFERENCES workspaces (id),
	kind              TEXT NOT NULL,
	name              TEXT NOT NULL,
	target            BYTEA NOT NULL,
	preview           TEXT NOT NULL,
	status            TEXT NOT NULL,
	created_by        TEXT NOT NULL,
	created_at        TIMESTAMPTZ NOT NULL,
	updated_at        TIMESTAMPTZ NOT NULL,
	deleted_at        TIMESTAMPTZ,
	last_delivered_at TIMESTAMPTZ,
	last_failure_at   TIMESTAMPTZ,
	last_status       INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX notification_destinations_workspace_created ON notification_destinations (workspace_id, created_at, id);

-- Which destinations each event of a workspace goes to, in the order they were set.
CREATE TABLE notification_routes (
	workspace_id   TEXT NOT NULL REFERENCES workspaces (id),
	event          TEXT NOT NULL,
	destination_id TEXT NOT NULL REFERENCES notification_destinations (id),
	position       INTEGER NOT NULL,
	PRIMARY KEY (workspace_id, event, destination_id)
);

-- A workspace's low-balance threshold (NULL: no alert) and the state of its alert: armed
-- fires at the next crossing; once fired, it fires again only after the cooldown or once
-- the balance was back at or above the threshold.
CREATE TABLE notification_settings (
	workspace_id                TEXT PRIMARY KEY REFERENCES workspaces (id),
	low_balance_threshold_nanos BIGINT,
	low_balance_armed           BOOLEAN NOT NULL DEFAULT TRUE,
	low_balance_fired_at        TIMESTAMPTZ,
	updated_at                  TIMESTAMPTZ NOT NULL
);

CREATE INDEX notification_settings_threshold ON notification_settings (workspace_id) WHERE low_balance_threshold_nanos IS NOT NULL;

-- A new management area, notifications: owners hold every scope, so they get its scopes.
-- An owner holding every scope of migration 0012 gets the full list in its canonical order;
-- an owner granted fewer gets the new area's scopes after its own.
UPDATE api_keys SET role = 'owner', scopes = 'activity:read activity:write activity:delete credits:read credits:write credits:delete keys:read keys:write keys:delete notifications:read notifications:write notifications:delete settings:read settings:write settings:delete webhooks:read webhooks:write webhooks:delete workspaces:read workspaces:write workspaces:delete' WHERE kind = 'management' AND role = 'owner' AND scopes = 'activity:read activity:write activity:delete credits:read credits:write credits:delete keys:read keys:write keys:delete settings:read settings:write settings:delete webhooks:read webhooks:write webhooks:delete workspaces:read workspaces:write workspaces:delete';
UPDATE api_keys SET scopes = trim(scopes || ' notifications:read notifications:write notifications:delete') WHERE kind = 'management' AND role = 'owner' AND scopes NOT LIKE '%notifications:read%';
