-- 0003: position delivery: the pos column, its index and the position table.
-- The comments on each are in ../../upgrade_position.sql.
ALTER TABLE {{table}} ADD COLUMN pos INTEGER;

CREATE UNIQUE INDEX IF NOT EXISTS {{index:stream}} ON {{table}} (pos)
    WHERE pos IS NOT NULL;

CREATE TABLE IF NOT EXISTS {{postable}} (
    relay      TEXT    NOT NULL PRIMARY KEY,
    floor_pos  INTEGER NOT NULL,
    cursor_pos INTEGER NOT NULL,
    open_pos   TEXT    NOT NULL,
    owner      TEXT    NOT NULL,
    updated_at TEXT    NOT NULL
);
