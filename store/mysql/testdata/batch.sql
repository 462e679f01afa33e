-- MarkDoneBatch of three events
UPDATE `outbox_event` FORCE INDEX (PRIMARY) SET status = 1, done_at = ?, locked_by = NULL, locked_at = NULL WHERE locked_by = ? AND status NOT IN (1, 3) AND event_id IN (?, ?, ?);

-- DeleteDoneBatch of three events
DELETE FROM `outbox_event` WHERE locked_by = ? AND status NOT IN (1, 3) AND event_id IN (?, ?, ?);
