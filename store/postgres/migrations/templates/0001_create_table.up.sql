-- 0001: the outbox table as CreateSchema made it before versioned migrations.
-- IF NOT EXISTS throughout, so that applying it to a table CreateSchema made
-- changes nothing and brings the table under the migration tool's control.
-- The comments on each column and index are in ../../schema.sql.
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

CREATE INDEX IF NOT EXISTS {{index:pending}} ON {{table}} (created_at, event_id, available_at)
    WHERE status IN (0, 2);

CREATE INDEX IF NOT EXISTS {{index:dead}} ON {{table}} (created_at, event_id)
    WHERE status = 3;

CREATE INDEX IF NOT EXISTS {{index:done}} ON {{table}} (done_at)
    WHERE done_at IS NOT NULL;
