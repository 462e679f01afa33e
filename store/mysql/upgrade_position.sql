-- Position delivery (outbox.DeliveryPosition), added to a table made by
-- schema.sql and upgrade_ordering.sql. CreateSchema runs these after them; a
-- column or index added by an earlier run is skipped. The reader of
-- position delivery does not run on MySQL and MariaDB yet: the column and
-- the table are here so that the schema version is the same on every
-- database.
--
-- pos is the event's position, NULL for the rows of the claim path.
ALTER TABLE {{table}} ADD COLUMN pos BIGINT NULL;

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
