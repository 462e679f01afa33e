-- 0002: ordered delivery per key (aggregate type, aggregate id): the seq column,
-- its index and the key table. The comments on each are in ../../upgrade_ordering.sql.
ALTER TABLE {{table}} ADD COLUMN seq INTEGER;

CREATE UNIQUE INDEX IF NOT EXISTS {{index:seq}} ON {{table}} (aggregate_type, aggregate_id, seq)
    WHERE seq IS NOT NULL;

CREATE TABLE IF NOT EXISTS {{keytable}} (
    aggregate_type TEXT    NOT NULL,
    aggregate_id   TEXT    NOT NULL,
    last_seq       INTEGER NOT NULL,
    done_seq       INTEGER NOT NULL,
    updated_at     TEXT    NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
);
