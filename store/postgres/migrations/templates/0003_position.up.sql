-- 0003: position delivery: the pos column, its index and the position table.
-- The comments on each are in ../../upgrade_position.sql.
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS pos BIGINT;

CREATE SEQUENCE IF NOT EXISTS {{posseq}} AS BIGINT OWNED BY {{table}}.pos;

CREATE INDEX IF NOT EXISTS {{index:stream}} ON {{table}} (pos)
    WHERE pos IS NOT NULL;

CREATE TABLE IF NOT EXISTS {{postable}} (
    relay      VARCHAR(64)  NOT NULL PRIMARY KEY,
    floor_pos  BIGINT       NOT NULL,
    cursor_pos BIGINT       NOT NULL,
    open_pos   TEXT         NOT NULL,
    owner      VARCHAR(128) NOT NULL,
    updated_at TIMESTAMPTZ  NOT NULL
);
