-- InsertOrdered of two events of one key and one unordered event, in the caller's transaction
BEGIN;
INSERT INTO `outbox_event_key` (aggregate_type, aggregate_id, last_seq, done_seq, updated_at) VALUES (?, ?, ?, 0, ?) ON DUPLICATE KEY UPDATE last_seq = LAST_INSERT_ID(2 * (last_seq + ?) + (done_seq = last_seq)) DIV 2, updated_at = ?;
INSERT INTO `outbox_event` (event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, status, attempts, available_at, created_at, locked_by, locked_at, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?), (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?), (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?);
ROLLBACK;

-- MarkDoneOrdered of three events (one of them ordered)
BEGIN ISOLATION LEVEL READ COMMITTED;
SELECT event_id, aggregate_type, aggregate_id, seq FROM `outbox_event` FORCE INDEX (PRIMARY) WHERE locked_by = ? AND status NOT IN (1, 3) AND event_id IN (?, ?, ?) FOR UPDATE;
SELECT k.aggregate_type, k.aggregate_id, k.done_seq, k.last_seq, COALESCE(e.event_id, ''), COALESCE(e.event_type, ''), COALESCE(e.aggregate_type, ''), e.aggregate_id, e.tenant_id, e.payload, e.headers, COALESCE(e.status, 0), COALESCE(e.attempts, 0), e.available_at, e.created_at, e.done_at, e.last_error, e.locked_by, e.locked_at, e.seq FROM `outbox_event_key` k FORCE INDEX (PRIMARY) LEFT JOIN `outbox_event` e ON e.aggregate_type = k.aggregate_type AND e.aggregate_id = k.aggregate_id AND e.seq = CASE WHEN k.aggregate_type = ? AND k.aggregate_id = ? AND k.done_seq = ? THEN ? END WHERE ((k.aggregate_type = ? AND k.aggregate_id = ?)) FOR UPDATE SKIP LOCKED;
COMMIT;
BEGIN ISOLATION LEVEL READ COMMITTED;
SELECT event_id, aggregate_type, aggregate_id, seq FROM `outbox_event` FORCE INDEX (PRIMARY) WHERE locked_by = ? AND status NOT IN (1, 3) AND event_id IN (?) FOR UPDATE;
UPDATE `outbox_event` FORCE INDEX (PRIMARY) SET status = 1, done_at = ?, locked_by = NULL, locked_at = NULL WHERE locked_by = ? AND status NOT IN (1, 3) AND event_id IN (?);
UPDATE `outbox_event_key` FORCE INDEX (PRIMARY) SET done_seq = CASE WHEN aggregate_type = ? AND aggregate_id = ? AND done_seq = ? THEN IF(last_seq > ?, LAST_INSERT_ID(?), ?) ELSE done_seq END, updated_at = ? WHERE (aggregate_type = ? AND aggregate_id = ? AND done_seq = ?) ORDER BY aggregate_type, aggregate_id;
UPDATE `outbox_event` e STRAIGHT_JOIN `outbox_event_key` k ON k.aggregate_type = e.aggregate_type AND k.aggregate_id = e.aggregate_id AND k.done_seq = e.seq - 1 SET e.status = 0, e.locked_by = ?, e.locked_at = ? WHERE e.status = 4 AND ((e.aggregate_type = ? AND e.aggregate_id = ? AND e.seq = ?));
SELECT event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, status, attempts, available_at, created_at, done_at, last_error, locked_by, locked_at, seq FROM `outbox_event` WHERE status = 0 AND locked_by = ? AND locked_at = ? AND ((aggregate_type = ? AND aggregate_id = ? AND seq = ?));
COMMIT;

-- MarkDeadOrdered
BEGIN ISOLATION LEVEL READ COMMITTED;
SELECT event_id, aggregate_type, aggregate_id, seq FROM `outbox_event` FORCE INDEX (PRIMARY) WHERE locked_by = ? AND status NOT IN (1, 3) AND event_id IN (?) FOR UPDATE;
UPDATE `outbox_event` FORCE INDEX (PRIMARY) SET status = 3, attempts = attempts + 1, done_at = ?, last_error = ?, locked_by = NULL, locked_at = NULL WHERE locked_by = ? AND status NOT IN (1, 3) AND event_id IN (?);
COMMIT;

-- SkipDead of three events
BEGIN ISOLATION LEVEL READ COMMITTED;
SELECT aggregate_type, aggregate_id, seq FROM `outbox_event` WHERE lane = 3 AND seq IS NOT NULL AND event_id IN (?, ?, ?) FOR UPDATE;
UPDATE `outbox_event_key` SET done_seq = ?, updated_at = ? WHERE aggregate_type = ? AND aggregate_id = ? AND done_seq = ?;
UPDATE `outbox_event` SET status = 0, locked_by = NULL, locked_at = NULL WHERE aggregate_type = ? AND aggregate_id = ? AND seq = ? AND status = 4;
COMMIT;

-- BlockedKeys by aggregate type
SELECT e.aggregate_type, e.aggregate_id, e.event_id, e.event_type, e.seq, e.done_at, e.last_error, k.last_seq - k.done_seq - 1 FROM `outbox_event` e JOIN `outbox_event_key` k ON k.aggregate_type = e.aggregate_type AND k.aggregate_id = e.aggregate_id AND k.done_seq = e.seq - 1 WHERE e.lane = 3 AND e.seq IS NOT NULL AND e.aggregate_type = ? ORDER BY e.created_at, e.event_id LIMIT ?;
