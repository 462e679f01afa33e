-- Stats
SELECT COUNT(*) FROM "outbox_event" WHERE status IN (0, 2) AND status = 0;

-- CountPurgeable
SELECT COUNT(*) FROM "outbox_event" WHERE status = 1 AND done_at < ?;

-- CountByType
SELECT aggregate_type, event_type, status, COUNT(*) FROM "outbox_event" WHERE status IN (0, 2) GROUP BY aggregate_type, event_type, status;
SELECT aggregate_type, event_type, status, COUNT(*) FROM "outbox_event" WHERE status = 3 GROUP BY aggregate_type, event_type, status;
