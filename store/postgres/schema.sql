-- Outbox table for PostgreSQL. Timestamps are timestamptz (microseconds, UTC
-- on the wire); event_id sorts bytewise (COLLATE "C"), as ties break in Go.
CREATE TABLE IF NOT EXISTS {{table}} (
    event_id       VARCHAR(36)  COLLATE "C" NOT NULL PRIMARY KEY,
    event_type     VARCHAR(128) NOT NULL,
    aggregate_type VARCHAR(64)  NOT NULL DEFAULT '__GLOBAL__',
    aggregate_id   VARCHAR(128),
    tenant_id      VARCHAR(64),
    payload        BYTEA        NOT NULL,
    headers        TEXT,
    status         SMALLINT     NOT NULL DEFAULT 0,
    attempts       INTEGER      NOT NULL DEFAULT 0,
    available_at   TIMESTAMPTZ  NOT NULL,
    created_at     TIMESTAMPTZ  NOT NULL,
    done_at        TIMESTAMPTZ,
    last_error     TEXT,
    locked_by      VARCHAR(128),
    locked_at      TIMESTAMPTZ
);

-- The claim walks pending rows in (created_at, event_id) order and stops
-- after LIMIT rows: no sort, however long the backlog. The index holds only
-- NEW and RETRY rows, so delivered rows never slow it down; available_at is a
-- key column so that rows waiting for a retry are skipped inside the index.
CREATE INDEX IF NOT EXISTS {{index:pending}} ON {{table}} (created_at, event_id, available_at)
    WHERE status IN (0, 2);

-- Dead-event queries and counts, oldest first.
CREATE INDEX IF NOT EXISTS {{index:dead}} ON {{table}} (created_at, event_id)
    WHERE status = 3;

-- Purge: terminal rows by the time they became terminal. Live rows have no
-- done_at and stay out of the index, so the insert path does not pay for it.
CREATE INDEX IF NOT EXISTS {{index:done}} ON {{table}} (done_at)
    WHERE done_at IS NOT NULL;
