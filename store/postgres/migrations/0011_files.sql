-- Files (store.Files): uploads and the files the gateway writes, their content in the blob
-- store under blob_key; expires_at NULL is never. A deleted or expired file keeps its row
-- until the sweep has removed its blob.
CREATE TABLE files (
	id           TEXT PRIMARY KEY,
	workspace_id TEXT NOT NULL REFERENCES workspaces (id),
	filename     TEXT NOT NULL,
	purpose      TEXT NOT NULL,
	bytes        BIGINT NOT NULL,
	sha256       TEXT NOT NULL,
	content_type TEXT NOT NULL,
	blob_key     TEXT NOT NULL,
	created_at   TIMESTAMPTZ NOT NULL,
	expires_at   TIMESTAMPTZ,
	deleted_at   TIMESTAMPTZ
);
CREATE INDEX files_expiry ON files (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX files_deleted ON files (deleted_at) WHERE deleted_at IS NOT NULL;
