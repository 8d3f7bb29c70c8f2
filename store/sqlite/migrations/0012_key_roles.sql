-- A management key's role (owner, admin, member) and its scopes, <area>:<read|write|delete>
-- separated by spaces (handlers/scopes.go). A standard key has neither. Management keys made
-- before roles existed could do everything; they become owners with every scope of the
-- areas the API had then, so no operator is locked out.
ALTER TABLE api_keys ADD COLUMN role TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN scopes TEXT NOT NULL DEFAULT '';
UPDATE api_keys SET role = 'owner', scopes = 'activity:read activity:write activity:delete credits:read credits:write credits:delete keys:read keys:write keys:delete settings:read settings:write settings:delete webhooks:read webhooks:write webhooks:delete workspaces:read workspaces:write workspaces:delete' WHERE kind = 'management';
