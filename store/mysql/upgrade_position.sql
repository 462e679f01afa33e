-- Position delivery (outbox.DeliveryPosition), added to a table made by
-- schema.sql and upgrade_ordering.sql. CreateSchema runs these after them; a
-- column or index added by an earlier run is skipped. Position delivery
-- runs on MariaDB only; on MySQL the column and the table are here so that
-- the schema version is the same on every database.
--
-- pos is the event's position: taken from the sequence below by the INSERT
-- of a STREAM row (status 5), NULL for the rows of the claim path.
ALTER TABLE {{table}} ADD COLUMN pos BIGINT NULL;

-- The positions, MariaDB 10.5+ only: MySQL has no sequences and reads the
-- executable comment as a comment (an empty statement). MariaDB's sequence
-- cache is the server's, not a session's: values are handed out in order
-- across sessions whatever its size.
/*M!100500 CREATE SEQUENCE IF NOT EXISTS {{posseq}} */;

CREATE UNIQUE INDEX {{index:stream}} ON {{table}} (pos);

-- The persisted position of the table's reader (see the PostgreSQL schema).
CREATE TABLE IF NOT EXISTS {{postable}} (
    relay      VARCHAR(64)  NOT NULL,
    floor_pos  BIGINT       NOT NULL,
    cursor_pos BIGINT       NOT NULL,
    open_pos   TEXT         NOT NULL,
    owner      VARCHAR(128) NOT NULL,
    updated_at DATETIME(6)  NOT NULL,
    PRIMARY KEY (relay)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The reader's row, there before any STREAM INSERT: an INSERT takes a
-- shared lock on the gap after it until its transaction ends (see
-- position.go), which the reader's first INSERT of the row would wait on.
INSERT IGNORE INTO {{postable}} (relay, floor_pos, cursor_pos, open_pos, owner, updated_at)
    VALUES ('default', 0, 0, '[]', '', UTC_TIMESTAMP(6));
