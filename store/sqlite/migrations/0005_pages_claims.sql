-- Lists are read a page at a time, in (created_at, id) order: every workspace (the CLI's
-- list) needs an index for it; a workspace's keys and children have theirs.
CREATE INDEX workspaces_created ON workspaces (created_at, id);

-- Queues of background work (store.Claims). run_at is when the item is next due: the time
-- it was enqueued or retried for, or, while it is claimed, the end of the claim's lease.
-- owner and attempts name the current claim ('' and 0 before the first).
CREATE TABLE queue_items (
	queue      TEXT NOT NULL,
	id         TEXT NOT NULL,
	payload    BLOB NOT NULL,
	run_at     INTEGER NOT NULL,
	owner      TEXT NOT NULL DEFAULT '',
	attempts   INTEGER NOT NULL DEFAULT 0,
	last_error TEXT NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	PRIMARY KEY (queue, id)
) STRICT;

CREATE INDEX queue_items_due ON queue_items (queue, run_at, id);
