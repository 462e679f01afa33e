-- Insert of one event
INSERT INTO "outbox_event" (event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, status, attempts, available_at, created_at, locked_by, locked_at, seq) VALUES ($1, $2, $3, NULL, NULL, $4, NULL, 0, 0, $5, $6, NULL, NULL, NULL);

-- Insert of one event with every optional column, leased by its writer (the hot path)
INSERT INTO "outbox_event" (event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, status, attempts, available_at, created_at, locked_by, locked_at, seq) VALUES ($1, $2, $3, $4, $5, $6, $7, 0, 0, $8, $9, $10, $11, NULL);

-- Insert of two events, leased by their writer (the hot path)
INSERT INTO "outbox_event" (event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, status, attempts, available_at, created_at, locked_by, locked_at, seq) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, $9, $10, $11, $12, $13), ($14, $15, $16, $17, $18, $19, $20, $21, 0, $22, $23, $24, $25, $26);
