-- Undo 0003. STREAM rows at or below the persisted position were delivered
-- and become DONE; the others become NEW, for the claim path to deliver.
UPDATE {{table}} SET status = 1, done_at = created_at
    WHERE status = 5 AND pos <= (SELECT COALESCE(MAX(floor_pos), 0) FROM {{postable}});

UPDATE {{table}} SET status = 0 WHERE status = 5;

DROP TABLE IF EXISTS {{postable}};

/*M!100500 DROP SEQUENCE IF EXISTS {{posseq}} */;

DROP INDEX {{index:stream}} ON {{table}};

ALTER TABLE {{table}} DROP COLUMN pos;
