-- CreateSchema
CREATE TABLE IF NOT EXISTS "outbox_event" (
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
CREATE INDEX IF NOT EXISTS "outbox_event_pending" ON "outbox_event" (created_at, event_id, available_at)
    WHERE status IN (0, 2);
CREATE INDEX IF NOT EXISTS "outbox_event_dead" ON "outbox_event" (created_at, event_id)
    WHERE status = 3;
CREATE INDEX IF NOT EXISTS "outbox_event_done" ON "outbox_event" (done_at)
    WHERE done_at IS NOT NULL;
ALTER TABLE "outbox_event" ADD COLUMN seq INTEGER;
CREATE UNIQUE INDEX IF NOT EXISTS "outbox_event_seq" ON "outbox_event" (aggregate_type, aggregate_id, seq)
    WHERE seq IS NOT NULL;
CREATE TABLE IF NOT EXISTS "outbox_event_key" (
    aggregate_type TEXT    NOT NULL,
    aggregate_id   TEXT    NOT NULL,
    last_seq       INTEGER NOT NULL,
    done_seq       INTEGER NOT NULL,
    updated_at     TEXT    NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
);
ALTER TABLE "outbox_event" ADD COLUMN pos INTEGER;
CREATE UNIQUE INDEX IF NOT EXISTS "outbox_event_stream" ON "outbox_event" (pos)
    WHERE pos IS NOT NULL;
CREATE TABLE IF NOT EXISTS "outbox_event_pos" (
    relay      TEXT    NOT NULL PRIMARY KEY,
    floor_pos  INTEGER NOT NULL,
    cursor_pos INTEGER NOT NULL,
    open_pos   TEXT    NOT NULL,
    owner      TEXT    NOT NULL,
    updated_at TEXT    NOT NULL
);
