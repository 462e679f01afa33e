-- Position delivery (outbox.DeliveryPosition), added to a table made by
-- schema.sql and upgrade_ordering.sql. CreateSchema runs these after them, on
-- new and existing tables alike; each one is idempotent.
--
-- pos is the event's position: taken from the sequence by the INSERT of a
-- STREAM row (status 5), NULL for the rows of the claim path.
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS pos BIGINT;

-- The positions. Owned by the column, so that dropping the table drops it.
CREATE SEQUENCE IF NOT EXISTS {{posseq}} AS BIGINT OWNED BY {{table}}.pos;

-- The reader walks STREAM rows in position order from its cursor. Partial:
-- the rows of the claim path (pos NULL) are not in it.
CREATE INDEX IF NOT EXISTS {{index:stream}} ON {{table}} (pos)
    WHERE pos IS NOT NULL;

-- The persisted position of the table's reader: every position at or below
-- floor_pos is delivered (or RETRY/DEAD in its row, or never committed);
-- cursor_pos is the largest read; open_pos lists, as JSON ranges, the
-- positions between them not yet resolved. owner fences a reader that lost
-- the relay.
CREATE TABLE IF NOT EXISTS {{postable}} (
    relay      VARCHAR(64)  NOT NULL PRIMARY KEY,
    floor_pos  BIGINT       NOT NULL,
    cursor_pos BIGINT       NOT NULL,
    open_pos   TEXT         NOT NULL,
    owner      VARCHAR(128) NOT NULL,
    updated_at TIMESTAMPTZ  NOT NULL
);
