-- QueryDead, no filter
SELECT event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, status, attempts, available_at, created_at, done_at, last_error, locked_by, locked_at, seq FROM "outbox_event" WHERE status = 3 ORDER BY created_at, event_id LIMIT $1;

-- QueryDead by event and aggregate type
SELECT event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, status, attempts, available_at, created_at, done_at, last_error, locked_by, locked_at, seq FROM "outbox_event" WHERE status = 3 AND event_type = $1 AND aggregate_type = $2 ORDER BY created_at, event_id LIMIT $3;

-- CountDead by event type
SELECT COUNT(*) FROM "outbox_event" WHERE status = 3 AND event_type = $1;

-- ReplayDead of three events
UPDATE "outbox_event" SET status = 0, attempts = 0, last_error = NULL, done_at = NULL, available_at = $1, locked_by = NULL, locked_at = NULL WHERE status = 3 AND event_id IN ($2, $3, $4);

-- ReplayDeadBatch by event type
UPDATE "outbox_event" SET status = 0, attempts = 0, last_error = NULL, done_at = NULL, available_at = $1, locked_by = NULL, locked_at = NULL WHERE event_id = ANY (ARRAY(SELECT event_id FROM "outbox_event" WHERE status = 3 AND event_type = $2 ORDER BY created_at, event_id LIMIT $3));
