-- Purge of DONE and DEAD rows
DELETE FROM "outbox_event" WHERE event_id IN (SELECT event_id FROM "outbox_event" WHERE done_at < ? AND ((status = 1 AND done_at < ?) OR (status = 3 AND done_at < ?)) ORDER BY done_at LIMIT ?);

-- Purge of DONE rows only
DELETE FROM "outbox_event" WHERE event_id IN (SELECT event_id FROM "outbox_event" WHERE done_at < ? AND ((status = 1 AND done_at < ?)) ORDER BY done_at LIMIT ?);
