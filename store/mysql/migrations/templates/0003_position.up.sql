-- 0003: position delivery: the pos column, its sequence (MariaDB), its index
-- and the position table.
-- The comments on each are in ../../upgrade_position.sql.
ALTER TABLE {{table}} ADD COLUMN pos BIGINT NULL;

/*M!100500 CREATE SEQUENCE IF NOT EXISTS {{posseq}} */;

CREATE UNIQUE INDEX {{index:stream}} ON {{table}} (pos);

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
