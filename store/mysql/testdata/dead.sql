-- QueryDead, no filter
SELECT event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, status, attempts, available_at, created_at, done_at, last_error, locked_by, locked_at, seq FROM `outbox_event` WHERE lane = 3 ORDER BY created_at, event_id LIMIT ?;

-- QueryDead by event and aggregate type
SELECT event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, status, attempts, available_at, created_at, done_at, last_error, locked_by, locked_at, seq FROM `outbox_event` WHERE lane = 3 AND event_type = ? AND aggregate_type = ? ORDER BY created_at, event_id LIMIT ?;

-- CountDead by event type
SELECT COUNT(*) FROM `outbox_event` WHERE lane = 3 AND event_type = ?;

-- ReplayDead of three events
UPDATE `outbox_event` SET status = 0, attempts = 0, last_error = NULL, done_at = NULL, available_at = ?, locked_by = NULL, locked_at = NULL WHERE lane = 3 AND event_id IN (?, ?, ?);

-- ReplayDeadBatch by event type
UPDATE `outbox_event` SET status = 0, attempts = 0, last_error = NULL, done_at = NULL, available_at = ?, locked_by = NULL, locked_at = NULL WHERE lane = 3 AND event_type = ? ORDER BY created_at, event_id LIMIT ?;
