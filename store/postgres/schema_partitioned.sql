-- Partitioned outbox table for PostgreSQL (Config.Partitions): the columns
-- and indexes of schema.sql and upgrade_ordering.sql, on a table partitioned
-- by RANGE of event_id. The library's event ids are ULIDs, whose first ten
-- characters are their creation time in milliseconds and sort in time
-- order, so a range of ids is a range of time, and event_id stays the
-- primary key: unique across the whole table, as in the plain table. The
-- partitions are made by CreateSchema and MaintainPartitions (partition.go).
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
    locked_at      TIMESTAMPTZ,
    seq            BIGINT
) PARTITION BY RANGE (event_id);

-- The indexes of schema.sql; each partition gets its own.
CREATE INDEX IF NOT EXISTS {{index:pending}} ON {{table}} (created_at, event_id, available_at)
    WHERE status IN (0, 2);

CREATE INDEX IF NOT EXISTS {{index:dead}} ON {{table}} (created_at, event_id)
    WHERE status = 3;

CREATE INDEX IF NOT EXISTS {{index:done}} ON {{table}} (done_at)
    WHERE done_at IS NOT NULL;

-- Promotion of ordered events. Not unique, unlike the plain table's: a
-- unique index of a partitioned table must hold the partition key. Seq
-- stays unique per key all the same: writers take it from the key's row
-- under that row's lock.
CREATE INDEX IF NOT EXISTS {{index:seq}} ON {{table}} (aggregate_type, aggregate_id, seq)
    WHERE seq IS NOT NULL;

-- WAITING rows (ordered events behind their key's head), so that the check
-- before dropping a partition finds them without reading the partition.
CREATE INDEX IF NOT EXISTS {{index:waiting}} ON {{table}} (created_at)
    WHERE status = 4;

-- The key table of ordered delivery, as in upgrade_ordering.sql.
CREATE TABLE IF NOT EXISTS {{keytable}} (
    aggregate_type VARCHAR(64)  NOT NULL,
    aggregate_id   VARCHAR(128) NOT NULL,
    last_seq       BIGINT       NOT NULL,
    done_seq       BIGINT       NOT NULL,
    updated_at     TIMESTAMPTZ  NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
);
