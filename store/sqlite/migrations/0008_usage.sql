-- A generation names the hold it was settled against, so that a settlement repeated
-- against that hold is answered with the record instead of charged again. Rows written
-- before this migration name none ('').
ALTER TABLE generations ADD COLUMN reservation_id TEXT NOT NULL DEFAULT '';

-- A generation keeps its usage in the dimensions that are not tokens, as metered:
-- characters, images, pages, and seconds of audio and video in milliseconds. Rows written
-- before this migration record none (0).
ALTER TABLE generations ADD COLUMN input_characters INTEGER NOT NULL DEFAULT 0;
ALTER TABLE generations ADD COLUMN images INTEGER NOT NULL DEFAULT 0;
ALTER TABLE generations ADD COLUMN pages INTEGER NOT NULL DEFAULT 0;
ALTER TABLE generations ADD COLUMN input_audio_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE generations ADD COLUMN output_audio_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE generations ADD COLUMN output_video_ms INTEGER NOT NULL DEFAULT 0;
