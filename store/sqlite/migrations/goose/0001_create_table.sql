-- outbox migration 0001 create_table, for the table outbox_event.
-- Rendered from the store's templates; see github.com/outboxkit/outbox/store/migrations.
-- +goose Up
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

-- +goose Down
DROP TABLE IF EXISTS "outbox_event";
