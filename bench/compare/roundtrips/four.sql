-- The business row and an outbox row as this library writes it (a STREAM
-- row), four round trips.
BEGIN;
INSERT INTO rt_biz (id, customer, amount, created_at) VALUES (lpad(:client_id::text, 4, '0') || lpad(nextval('rt_seq')::text, 22, '0'), 'c-1', 42, now());
INSERT INTO rt_outbox (event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, status, attempts, available_at, created_at, pos)
 VALUES (lpad(nextval('rt_seq')::text, 26, '0'), 'OrderPlaced', 'Order', 'o-1', NULL, convert_to('{"a":"' || repeat('x', 190) || '"}', 'UTF8'), NULL, 5, 0, now(), now(),
 CASE WHEN pg_current_xact_id() IS NOT NULL THEN nextval('rt_seq') END);
COMMIT;
