-- Stats
SELECT COUNT(*) FROM `outbox_event` WHERE lane = 0 AND status = 0;

-- CountPurgeable
SELECT COUNT(*) FROM `outbox_event` WHERE lane = 1 AND created_at < ? AND done_at < ?;
