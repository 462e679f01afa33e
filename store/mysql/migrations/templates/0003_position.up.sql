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
