-- Stats
SELECT COUNT(*) FROM "outbox_event" WHERE status IN (0, 2) AND status = 0;

-- CountPurgeable
SELECT COUNT(*) FROM "outbox_event" WHERE status = 1 AND done_at < ?;
