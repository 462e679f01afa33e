-- Claim
UPDATE "outbox_event" SET locked_by = ?, locked_at = ? WHERE event_id IN (SELECT event_id FROM "outbox_event" WHERE status IN (0, 2) AND available_at <= ? AND created_at <= ? AND (locked_by IS NULL OR locked_at < ?) ORDER BY created_at, event_id LIMIT ?) RETURNING event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, status, attempts, available_at, created_at, done_at, last_error, locked_by, locked_at, seq;

-- Claim from a point in the backlog (ClaimParams.From)
UPDATE "outbox_event" SET locked_by = ?, locked_at = ? WHERE event_id IN (SELECT event_id FROM "outbox_event" WHERE status IN (0, 2) AND created_at >= ? AND available_at <= ? AND created_at <= ? AND (locked_by IS NULL OR locked_at < ?) ORDER BY created_at, event_id LIMIT ?) RETURNING event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, status, attempts, available_at, created_at, done_at, last_error, locked_by, locked_at, seq;
