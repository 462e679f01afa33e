-- Ordered delivery per key (aggregate type, aggregate id), added to a table
-- made by schema.sql. CreateSchema runs these after schema.sql, on new and
-- existing tables alike; each one is idempotent.
--
-- seq is the event's position in its key; NULL for unordered events.
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS seq BIGINT;

-- Promotion finds a key's next event by (key, seq). Partial: unordered events
-- (seq NULL) are not in it, so their inserts do not pay for it. Unique: two
-- events of one key never share a position.
CREATE UNIQUE INDEX IF NOT EXISTS {{index:seq}} ON {{table}} (aggregate_type, aggregate_id, seq)
    WHERE seq IS NOT NULL;

-- One row per key of an ordered aggregate type: the seq of its last written
-- event and of its last finished one. Writers update it, and so lock it
-- until they commit; finishing a key's head updates it too.
CREATE TABLE IF NOT EXISTS {{keytable}} (
    aggregate_type VARCHAR(64)  NOT NULL,
    aggregate_id   VARCHAR(128) NOT NULL,
    last_seq       BIGINT       NOT NULL,
    done_seq       BIGINT       NOT NULL,
    updated_at     TIMESTAMPTZ  NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
);
