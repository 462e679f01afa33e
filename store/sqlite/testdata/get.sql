-- Get
SELECT event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, status, attempts, available_at, created_at, done_at, last_error, locked_by, locked_at, seq FROM "outbox_event" WHERE event_id = ?;
