-- 0001: the outbox table as CreateSchema made it before versioned migrations.
-- IF NOT EXISTS throughout, so that applying it to a table CreateSchema made
-- changes nothing and brings the table under the migration tool's control.
-- The comments on each column and index are in ../../schema.sql.
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

CREATE INDEX IF NOT EXISTS {{index:pending}} ON {{table}} (created_at, event_id, available_at)
    WHERE status IN (0, 2);

CREATE INDEX IF NOT EXISTS {{index:dead}} ON {{table}} (created_at, event_id)
    WHERE status = 3;

CREATE INDEX IF NOT EXISTS {{index:done}} ON {{table}} (done_at)
    WHERE done_at IS NOT NULL;
