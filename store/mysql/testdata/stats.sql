-- Stats
SELECT COUNT(*) FROM `outbox_event` WHERE lane = 0 AND status = 0;

-- CountPurgeable
SELECT COUNT(*) FROM `outbox_event` WHERE lane = 1 AND created_at < ? AND done_at < ?;

-- CountByType
SELECT aggregate_type, event_type, status, COUNT(*) FROM `outbox_event` WHERE lane = 0 GROUP BY aggregate_type, event_type, status;
SELECT aggregate_type, event_type, status, COUNT(*) FROM `outbox_event` WHERE lane = 3 GROUP BY aggregate_type, event_type, status;
