-- RenewLeases of three events
UPDATE "outbox_event" SET locked_at = $1 WHERE locked_by = $2 AND status NOT IN (1, 3) AND event_id IN ($3, $4, $5, $6);
SELECT event_id FROM "outbox_event" WHERE locked_by = $1 AND status NOT IN (1, 3) AND event_id IN ($2, $3, $4);
