-- InsertOrdered of two events of one key and one unordered event, in the caller's transaction
BEGIN;
WITH k AS (INSERT INTO "outbox_event_key" AS k (aggregate_type, aggregate_id, last_seq, done_seq, updated_at) VALUES ($1, $2, $3, 0, $4) ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_seq = k.last_seq + excluded.last_seq, updated_at = excluded.updated_at RETURNING aggregate_type, aggregate_id, last_seq, done_seq), v (event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, available_at, created_at, n, pos) AS (VALUES ($5::text, $6::text, $7::text, $8::text, $9::text, $10::bytea, $11::text, $12::timestamptz, $13::timestamptz, $14::bigint, $15::bigint), ($16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26), ($27, $28, $29, $30, $31, $32, $33, $34, $35, $36, $37)), e AS (INSERT INTO "outbox_event" (event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, status, attempts, available_at, created_at, locked_by, locked_at, seq) SELECT v.event_id, v.event_type, v.aggregate_type, v.aggregate_id, v.tenant_id, v.payload, v.headers, CASE WHEN (k.last_seq IS NULL OR (v.pos = 0 AND k.done_seq = k.last_seq - v.n)) THEN 0 ELSE 4 END, 0, v.available_at, v.created_at, CASE WHEN (k.last_seq IS NULL OR (v.pos = 0 AND k.done_seq = k.last_seq - v.n)) THEN $38::text END, CASE WHEN (k.last_seq IS NULL OR (v.pos = 0 AND k.done_seq = k.last_seq - v.n)) THEN $39::timestamptz END, k.last_seq - v.n + 1 + v.pos FROM v LEFT JOIN k ON k.aggregate_type = v.aggregate_type AND k.aggregate_id = v.aggregate_id RETURNING event_id, status, seq) SELECT event_id, status, seq FROM e WHERE seq IS NOT NULL;
ROLLBACK;

-- MarkDoneOrdered of three events (one of them ordered)
BEGIN ISOLATION LEVEL READ COMMITTED;
WITH d AS (UPDATE "outbox_event" SET status = 1, done_at = $1, locked_by = NULL, locked_at = NULL WHERE locked_by = $2 AND status NOT IN (1, 3) AND event_id = ANY ($3::text[]) RETURNING aggregate_type, aggregate_id, seq), f AS (SELECT aggregate_type, aggregate_id, seq, seq - row_number() OVER (PARTITION BY aggregate_type, aggregate_id ORDER BY seq) AS run FROM d WHERE seq IS NOT NULL AND aggregate_id IS NOT NULL), r AS (SELECT aggregate_type, aggregate_id, min(seq) - 1 AS from_seq, max(seq) AS to_seq FROM f GROUP BY aggregate_type, aggregate_id, run), l AS (SELECT k.aggregate_type, k.aggregate_id, r.from_seq, r.to_seq FROM "outbox_event_key" k JOIN r ON k.aggregate_type = r.aggregate_type AND k.aggregate_id = r.aggregate_id ORDER BY k.aggregate_type, k.aggregate_id FOR UPDATE OF k), u AS (UPDATE "outbox_event_key" k SET done_seq = l.to_seq, updated_at = $4 FROM l WHERE k.aggregate_type = l.aggregate_type AND k.aggregate_id = l.aggregate_id AND k.done_seq = l.from_seq RETURNING k.aggregate_type, k.aggregate_id, k.done_seq, k.last_seq), p AS (UPDATE "outbox_event" e SET status = 0, locked_by = $5, locked_at = $6 FROM u WHERE e.aggregate_type = u.aggregate_type AND e.aggregate_id = u.aggregate_id AND e.seq = u.done_seq + 1 AND e.status = 4 RETURNING e.event_id, e.aggregate_type, e.aggregate_id) SELECT (SELECT count(*) FROM d), u.aggregate_type, u.aggregate_id, u.done_seq, u.last_seq, NULL FROM (VALUES (1)) AS one LEFT JOIN u ON true UNION ALL SELECT NULL, aggregate_type, aggregate_id, NULL, NULL, event_id FROM p;
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
