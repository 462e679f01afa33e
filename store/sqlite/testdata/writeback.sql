-- MarkDone
UPDATE "outbox_event" SET status = 1, done_at = ?, locked_by = NULL, locked_at = NULL WHERE event_id = ? AND locked_by = ? AND status IN (0, 2);

-- MarkRetry
UPDATE "outbox_event" SET status = 2, attempts = attempts + 1, available_at = ?, last_error = ?, locked_by = NULL, locked_at = NULL WHERE event_id = ? AND locked_by = ? AND status IN (0, 2);

-- MarkDead
UPDATE "outbox_event" SET status = 3, attempts = attempts + 1, done_at = ?, last_error = ?, locked_by = NULL, locked_at = NULL WHERE event_id = ? AND locked_by = ? AND status IN (0, 2);

-- Release of three events
UPDATE "outbox_event" SET locked_by = NULL, locked_at = NULL WHERE locked_by = ? AND status NOT IN (1, 3) AND event_id IN (?, ?, ?, ?);
