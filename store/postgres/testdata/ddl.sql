-- CreateSchema
CREATE TABLE IF NOT EXISTS "outbox_event" (
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
CREATE INDEX IF NOT EXISTS "outbox_event_pending" ON "outbox_event" (created_at, event_id, available_at)
    WHERE status IN (0, 2);
CREATE INDEX IF NOT EXISTS "outbox_event_dead" ON "outbox_event" (created_at, event_id)
    WHERE status = 3;
CREATE INDEX IF NOT EXISTS "outbox_event_done" ON "outbox_event" (done_at)
    WHERE done_at IS NOT NULL;
ALTER TABLE "outbox_event" ADD COLUMN IF NOT EXISTS seq BIGINT;
CREATE UNIQUE INDEX IF NOT EXISTS "outbox_event_seq" ON "outbox_event" (aggregate_type, aggregate_id, seq)
    WHERE seq IS NOT NULL;
CREATE TABLE IF NOT EXISTS "outbox_event_key" (
    aggregate_type VARCHAR(64)  NOT NULL,
    aggregate_id   VARCHAR(128) NOT NULL,
    last_seq       BIGINT       NOT NULL,
    done_seq       BIGINT       NOT NULL,
    updated_at     TIMESTAMPTZ  NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
);
ALTER TABLE "outbox_event" ADD COLUMN IF NOT EXISTS pos BIGINT;
CREATE SEQUENCE IF NOT EXISTS "outbox_event_pos_seq" AS BIGINT OWNED BY "outbox_event".pos;
CREATE INDEX IF NOT EXISTS "outbox_event_stream" ON "outbox_event" (pos)
    WHERE pos IS NOT NULL;
CREATE TABLE IF NOT EXISTS "outbox_event_pos" (
    relay      VARCHAR(64)  NOT NULL PRIMARY KEY,
    floor_pos  BIGINT       NOT NULL,
    cursor_pos BIGINT       NOT NULL,
    open_pos   TEXT         NOT NULL,
    owner      VARCHAR(128) NOT NULL,
    updated_at TIMESTAMPTZ  NOT NULL
);
