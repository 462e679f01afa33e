-- MarkDone
UPDATE "outbox_event" SET status = 1, done_at = $1, locked_by = NULL, locked_at = NULL WHERE event_id = $2 AND locked_by = $3 AND status IN (0, 2);

-- MarkRetry
UPDATE "outbox_event" SET status = 2, attempts = attempts + 1, available_at = $1, last_error = $2, locked_by = NULL, locked_at = NULL WHERE event_id = $3 AND locked_by = $4 AND status IN (0, 2);

-- MarkDead
UPDATE "outbox_event" SET status = 3, attempts = attempts + 1, done_at = $1, last_error = $2, locked_by = NULL, locked_at = NULL WHERE event_id = $3 AND locked_by = $4 AND status IN (0, 2);

-- Release of three events
UPDATE "outbox_event" SET locked_by = NULL, locked_at = NULL WHERE locked_by = $1 AND status NOT IN (1, 3) AND event_id IN ($2, $3, $4, $5);
