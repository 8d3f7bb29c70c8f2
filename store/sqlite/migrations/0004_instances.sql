-- Gateway instances and the reservations they own. An instance records a heartbeat; the
-- reservations of one that stopped beating (a crashed process) are released by the
-- others instead of at their expiry. Reservations written before this migration, and
-- those of the CLI, belong to no instance ('').
CREATE TABLE instances (
	id           TEXT PRIMARY KEY,
	started_at   INTEGER NOT NULL,
	heartbeat_at INTEGER NOT NULL
) STRICT;

ALTER TABLE reservations ADD COLUMN owner TEXT NOT NULL DEFAULT '';
CREATE INDEX reservations_owner ON reservations (owner) WHERE owner <> '';
