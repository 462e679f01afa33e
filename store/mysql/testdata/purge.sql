-- Purge of DONE and DEAD rows
DELETE FROM `outbox_event` WHERE (lane = 1 AND created_at < ? AND done_at < ?) OR (lane = 3 AND created_at < ? AND done_at < ?) LIMIT ?;

-- Purge of DONE rows only
DELETE FROM `outbox_event` WHERE (lane = 1 AND created_at < ? AND done_at < ?) LIMIT ?;
