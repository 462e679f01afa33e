-- Purge of DONE and DEAD rows
DELETE FROM "outbox_event" WHERE event_id = ANY (ARRAY(SELECT event_id FROM "outbox_event" WHERE done_at < $1 AND ((status = 1 AND done_at < $2) OR (status = 3 AND done_at < $3)) ORDER BY done_at LIMIT $4));

-- Purge of DONE rows only
DELETE FROM "outbox_event" WHERE event_id = ANY (ARRAY(SELECT event_id FROM "outbox_event" WHERE done_at < $1 AND ((status = 1 AND done_at < $2)) ORDER BY done_at LIMIT $3));
