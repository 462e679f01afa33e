-- InsertOrdered of two events of one key and one unordered event, in the caller's transaction
BEGIN;
INSERT INTO "outbox_event_key" AS k (aggregate_type, aggregate_id, last_seq, done_seq, updated_at) VALUES ($1, $2, $3, 0, $4) ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_seq = k.last_seq + excluded.last_seq, updated_at = excluded.updated_at RETURNING last_seq, done_seq;
INSERT INTO "outbox_event" (event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, status, attempts, available_at, created_at, locked_by, locked_at, seq) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, $9, $10, $11, $12, $13), ($14, $15, $16, $17, $18, $19, $20, $21, 0, $22, $23, $24, $25, $26), ($27, $28, $29, $30, $31, $32, $33, $34, 0, $35, $36, $37, $38, $39);
ROLLBACK;

-- MarkDoneOrdered of three events (one of them ordered)
BEGIN ISOLATION LEVEL READ COMMITTED;
SELECT event_id, aggregate_type, aggregate_id, seq FROM "outbox_event" WHERE locked_by = $1 AND status NOT IN (1, 3) AND event_id IN ($2, $3, $4) FOR UPDATE;
UPDATE "outbox_event" SET status = 1, done_at = $1, locked_by = NULL, locked_at = NULL WHERE locked_by = $2 AND status NOT IN (1, 3) AND event_id IN ($3);
SELECT aggregate_type, aggregate_id, done_seq FROM "outbox_event_key" WHERE ((aggregate_type = $1 AND aggregate_id = $2)) ORDER BY aggregate_type, aggregate_id FOR UPDATE;
COMMIT;

-- MarkDeadOrdered
BEGIN ISOLATION LEVEL READ COMMITTED;
SELECT event_id, aggregate_type, aggregate_id, seq FROM "outbox_event" WHERE locked_by = $1 AND status NOT IN (1, 3) AND event_id IN ($2) FOR UPDATE;
UPDATE "outbox_event" SET status = 3, attempts = attempts + 1, done_at = $1, last_error = $2, locked_by = NULL, locked_at = NULL WHERE locked_by = $3 AND status NOT IN (1, 3) AND event_id IN ($4);
COMMIT;

-- SkipDead of three events
BEGIN ISOLATION LEVEL READ COMMITTED;
SELECT aggregate_type, aggregate_id, seq FROM "outbox_event" WHERE status = 3 AND seq IS NOT NULL AND event_id IN ($1, $2, $3) FOR UPDATE;
UPDATE "outbox_event_key" SET done_seq = $1, updated_at = $2 WHERE aggregate_type = $3 AND aggregate_id = $4 AND done_seq = $5;
UPDATE "outbox_event" SET status = 0, locked_by = NULL, locked_at = NULL WHERE aggregate_type = $1 AND aggregate_id = $2 AND seq = $3 AND status = 4;
COMMIT;

-- BlockedKeys by aggregate type
SELECT e.aggregate_type, e.aggregate_id, e.event_id, e.event_type, e.seq, e.done_at, e.last_error, k.last_seq - k.done_seq - 1 FROM "outbox_event" e JOIN "outbox_event_key" k ON k.aggregate_type = e.aggregate_type AND k.aggregate_id = e.aggregate_id AND k.done_seq = e.seq - 1 WHERE e.status = 3 AND e.seq IS NOT NULL AND e.aggregate_type = $1 ORDER BY e.created_at, e.event_id LIMIT $2;
