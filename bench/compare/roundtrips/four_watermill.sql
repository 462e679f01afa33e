-- The business row and watermill-sql's row, four round trips.
BEGIN;
INSERT INTO rt_biz (id, customer, amount, created_at) VALUES (lpad(:client_id::text, 4, '0') || lpad(nextval('rt_seq')::text, 22, '0'), 'c-1', 42, now());
INSERT INTO rt_watermill (uuid, payload, metadata, transaction_id) VALUES (lpad(nextval('rt_seq')::text, 26, '0'), ('{"a":"' || repeat('x', 190) || '"}')::json, '{}', pg_current_xact_id());
COMMIT;
