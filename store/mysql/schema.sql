-- Outbox table for MySQL 8, MariaDB 10.6+ and TiDB. Timestamps are
-- DATETIME(6): microseconds, no time-zone conversion by the server (the
-- driver writes and reads them in its loc, which must be UTC for every
-- process sharing the table). Text compares bytewise (utf8mb4_bin), and
-- event_id is VARBINARY so that trailing spaces count too (utf8mb4_bin pads
-- them away): ids differing only in case or in trailing spaces are different
-- events, and ties break as in Go.
--
-- MySQL has no partial indexes, and a claim on status IN (0, 2) ordered by
-- created_at would read and sort the whole backlog (two ranges of a
-- (status, created_at) index cannot be merged in order). The stored column
-- lane folds NEW and RETRY into one value, so a single equality (lane = 0)
-- leaves the index in created_at order: the claim reads LIMIT rows and stops.
-- DONE rows get lane 1 and DEAD rows lane 3, so the same index serves the
-- dead-event queries (lane = 3) and the purge (lane = 1 or 3, created_at
-- before the cutoff, then done_at before it: a row becomes terminal after it
-- is created). No index on done_at: every insert and every DONE would pay
-- for it.
CREATE TABLE IF NOT EXISTS {{table}} (
    event_id       VARBINARY(36) NOT NULL,
    event_type     VARCHAR(128) NOT NULL,
    aggregate_type VARCHAR(64)  NOT NULL DEFAULT '__GLOBAL__',
    aggregate_id   VARCHAR(128) NULL,
    tenant_id      VARCHAR(64)  NULL,
    payload        MEDIUMBLOB   NOT NULL,
    headers        MEDIUMTEXT   NULL,
    status         SMALLINT     NOT NULL DEFAULT 0,
    attempts       INT          NOT NULL DEFAULT 0,
    available_at   DATETIME(6)  NOT NULL,
    created_at     DATETIME(6)  NOT NULL,
    done_at        DATETIME(6)  NULL,
    last_error     TEXT         NULL,
    locked_by      VARCHAR(128) NULL,
    locked_at      DATETIME(6)  NULL,
    lane           TINYINT GENERATED ALWAYS AS (CASE WHEN status IN (0, 2) THEN 0 ELSE status END) STORED,
    PRIMARY KEY (event_id),
    -- Claim (lane = 0), dead queries (lane = 3) and purge (lane 1 and 3),
    -- in delivery order. available_at lets the claim pass rows waiting for
    -- a retry inside the index (index condition pushdown), without reading
    -- or locking them.
    KEY {{index:lane}} (lane, created_at, event_id, available_at)
    {{lease_index}}
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
