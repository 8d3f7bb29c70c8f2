-- Reserved for the notification destinations' migration (branch notifyapi), which
-- replaces this file when the branches are merged: migration versions run without gaps.
SELECT 1;
