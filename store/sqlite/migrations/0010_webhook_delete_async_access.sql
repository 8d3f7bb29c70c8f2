-- A deleted webhook endpoint keeps its row, marked by deleted_at (Unix milliseconds), so that
-- deliveries and audits that name it still resolve; every read but the delete leaves it out.
-- async_access is the workspace's access to async APIs (rotating webhook secrets), which only
-- the operator turns on.
ALTER TABLE webhook_endpoints ADD COLUMN deleted_at INTEGER;
ALTER TABLE workspaces ADD COLUMN async_access INTEGER NOT NULL DEFAULT 0;
