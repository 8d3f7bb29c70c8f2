-- A request cut by a gateway crash is recorded as interrupted when its hold is freed: a
-- reservation of a request's own names the request (a lease's names none, ''), and a
-- generation says where its error came from. Rows written before this migration name
-- no request and no origin.
ALTER TABLE reservations ADD COLUMN generation_id TEXT NOT NULL DEFAULT '';
ALTER TABLE reservations ADD COLUMN endpoint TEXT NOT NULL DEFAULT '';
ALTER TABLE reservations ADD COLUMN model TEXT NOT NULL DEFAULT '';

ALTER TABLE generations ADD COLUMN error_origin TEXT NOT NULL DEFAULT '';
