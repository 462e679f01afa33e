-- Ordered delivery per key (aggregate type, aggregate id), added to a table
-- made by schema.sql. CreateSchema runs these after schema.sql, on new and
-- existing tables alike, and skips the ADD COLUMN when the column exists
-- (SQLite has no ADD COLUMN IF NOT EXISTS).
--
-- seq is the event's position in its key; NULL for unordered events.
ALTER TABLE {{table}} ADD COLUMN seq INTEGER;

-- Promotion finds a key's next event by (key, seq). Partial: unordered events
-- (seq NULL) are not in it, so their inserts do not pay for it.
CREATE UNIQUE INDEX IF NOT EXISTS {{index:seq}} ON {{table}} (aggregate_type, aggregate_id, seq)
    WHERE seq IS NOT NULL;

-- One row per key of an ordered aggregate type: the seq of its last written
-- event and of its last finished one.
CREATE TABLE IF NOT EXISTS {{keytable}} (
    aggregate_type TEXT    NOT NULL,
    aggregate_id   TEXT    NOT NULL,
    last_seq       INTEGER NOT NULL,
    done_seq       INTEGER NOT NULL,
    updated_at     TEXT    NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
);
