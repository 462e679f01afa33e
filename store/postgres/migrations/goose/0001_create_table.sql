-- outbox migration 0001 create_table, for the table outbox_event.
-- Rendered from the store's templates; see github.com/outboxkit/outbox/store/migrations.
-- +goose Up
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

-- +goose Down
DROP TABLE IF EXISTS "outbox_event";
