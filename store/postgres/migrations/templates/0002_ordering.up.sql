-- 0002: ordered delivery per key (aggregate type, aggregate id): the seq column,
-- its index and the key table. The comments on each are in ../../upgrade_ordering.sql.
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS seq BIGINT;

CREATE UNIQUE INDEX IF NOT EXISTS {{index:seq}} ON {{table}} (aggregate_type, aggregate_id, seq)
    WHERE seq IS NOT NULL;

CREATE TABLE IF NOT EXISTS {{keytable}} (
    aggregate_type VARCHAR(64)  NOT NULL,
    aggregate_id   VARCHAR(128) NOT NULL,
    last_seq       BIGINT       NOT NULL,
    done_seq       BIGINT       NOT NULL,
    updated_at     TIMESTAMPTZ  NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
);
