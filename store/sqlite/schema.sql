-- Outbox table for SQLite. Timestamps are fixed-width UTC text
-- (2006-01-02T15:04:05.000000Z): they sort and compare correctly as text.
CREATE TABLE IF NOT EXISTS {{table}} (
    event_id       TEXT    NOT NULL PRIMARY KEY,
    event_type     TEXT    NOT NULL,
    aggregate_type TEXT    NOT NULL DEFAULT '__GLOBAL__',
    aggregate_id   TEXT,
    tenant_id      TEXT,
    payload        BLOB    NOT NULL,
    headers        TEXT,
    status         INTEGER NOT NULL DEFAULT 0,
    attempts       INTEGER NOT NULL DEFAULT 0,
    available_at   TEXT    NOT NULL,
    created_at     TEXT    NOT NULL,
    done_at        TEXT,
    last_error     TEXT,
    locked_by      TEXT,
    locked_at      TEXT
);

-- The claim walks pending rows in (created_at, event_id) order: a partial
-- index holds only NEW and RETRY rows, so delivered rows never slow it down.
CREATE INDEX IF NOT EXISTS {{index:pending}} ON {{table}} (created_at, event_id, available_at)
    WHERE status IN (0, 2);

-- Dead-event queries, oldest first.
CREATE INDEX IF NOT EXISTS {{index:dead}} ON {{table}} (created_at, event_id)
    WHERE status = 3;

-- Purge: terminal rows by the time they became terminal.
CREATE INDEX IF NOT EXISTS {{index:done}} ON {{table}} (done_at)
    WHERE done_at IS NOT NULL;
