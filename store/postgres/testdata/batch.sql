-- MarkDoneBatch of three events
UPDATE "outbox_event" SET status = 1, done_at = $1, locked_by = NULL, locked_at = NULL WHERE locked_by = $2 AND status NOT IN (1, 3) AND event_id IN ($3, $4, $5, $6);

-- DeleteDoneBatch of three events
DELETE FROM "outbox_event" WHERE locked_by = $1 AND status NOT IN (1, 3) AND event_id IN ($2, $3, $4, $5);
