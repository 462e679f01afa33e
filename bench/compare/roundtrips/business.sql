-- The business row alone: BEGIN, INSERT, COMMIT, three round trips.
BEGIN;
INSERT INTO rt_biz (id, customer, amount, created_at) VALUES (lpad(:client_id::text, 4, '0') || lpad(nextval('rt_seq')::text, 22, '0'), 'c-1', 42, now());
COMMIT;
