-- Claim
BEGIN ISOLATION LEVEL READ COMMITTED;
SELECT event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, status, attempts, available_at, created_at, done_at, last_error, locked_by, locked_at, seq FROM `outbox_event` FORCE INDEX (`outbox_event_lane`) WHERE lane = 0 AND available_at <= ? AND created_at <= ? AND (locked_by IS NULL OR locked_at < ?) ORDER BY created_at, event_id LIMIT ? FOR UPDATE SKIP LOCKED;
UPDATE `outbox_event` SET locked_by = ?, locked_at = ? WHERE event_id IN (?);
COMMIT;

-- Claim from a point in the backlog (ClaimParams.From)
BEGIN ISOLATION LEVEL READ COMMITTED;
SELECT event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, status, attempts, available_at, created_at, done_at, last_error, locked_by, locked_at, seq FROM `outbox_event` FORCE INDEX (`outbox_event_lane`) WHERE lane = 0 AND created_at >= ? AND available_at <= ? AND created_at <= ? AND (locked_by IS NULL OR locked_at < ?) ORDER BY created_at, event_id LIMIT ? FOR UPDATE SKIP LOCKED;
UPDATE `outbox_event` SET locked_by = ?, locked_at = ? WHERE event_id IN (?);
COMMIT;
