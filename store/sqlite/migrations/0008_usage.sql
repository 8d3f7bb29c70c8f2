-- A generation names the hold it was settled against, so that a settlement repeated
-- against that hold is answered with the record instead of charged again. Rows written
-- before this migration name none ('').
ALTER TABLE generations ADD COLUMN reservation_id TEXT NOT NULL DEFAULT '';
