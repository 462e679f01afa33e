-- Insert of one event
INSERT INTO `outbox_event` (event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, status, attempts, available_at, created_at, locked_by, locked_at, seq) VALUES (?, ?, ?, NULL, NULL, ?, NULL, 0, 0, ?, ?, NULL, NULL, NULL);

-- Insert of one event with every optional column, leased by its writer (the hot path)
INSERT INTO `outbox_event` (event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, status, attempts, available_at, created_at, locked_by, locked_at, seq) VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0, ?, ?, ?, ?, NULL);

-- Insert of two events, leased by their writer (the hot path)
INSERT INTO `outbox_event` (event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, status, attempts, available_at, created_at, locked_by, locked_at, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?), (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?);
