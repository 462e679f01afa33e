-- Position delivery (outbox.DeliveryPosition), added to a table made by
-- schema.sql and upgrade_ordering.sql. CreateSchema runs these after them, on
-- new and existing tables alike; a column added by an earlier run is skipped.
--
-- pos is the event's position: one more than the largest position of the
-- table and of the persisted cursor, taken by the INSERT of a STREAM row
-- (status 5) while it holds SQLite's one write lock, so that positions
-- commit in order and never go back, even after a purge deleted the newest
-- rows. NULL for the rows of the claim path.
ALTER TABLE {{table}} ADD COLUMN pos INTEGER;

-- The reader walks STREAM rows in position order from its cursor; unique:
-- two rows never share a position. Partial: the rows of the claim path are
-- not in it.
CREATE UNIQUE INDEX IF NOT EXISTS {{index:stream}} ON {{table}} (pos)
    WHERE pos IS NOT NULL;

-- The persisted position of the table's reader (see the PostgreSQL schema).
CREATE TABLE IF NOT EXISTS {{postable}} (
    relay      TEXT    NOT NULL PRIMARY KEY,
    floor_pos  INTEGER NOT NULL,
    cursor_pos INTEGER NOT NULL,
    open_pos   TEXT    NOT NULL,
    owner      TEXT    NOT NULL,
    updated_at TEXT    NOT NULL
);
