-- RenewLeases of three events
UPDATE "outbox_event" SET locked_at = ? WHERE locked_by = ? AND status NOT IN (1, 3) AND event_id IN (?, ?, ?, ?);
SELECT event_id FROM "outbox_event" WHERE locked_by = ? AND status NOT IN (1, 3) AND event_id IN (?, ?, ?);
