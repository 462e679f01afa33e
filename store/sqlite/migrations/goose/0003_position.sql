-- outbox migration 0003 position, for the table outbox_event.
-- Rendered from the store's templates; see github.com/outboxkit/outbox/store/migrations.
-- +goose Up
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

-- +goose Down
UPDATE "outbox_event" SET status = 1, done_at = created_at
    WHERE status = 5 AND pos <= (SELECT COALESCE(MAX(floor_pos), 0) FROM "outbox_event_pos");

UPDATE "outbox_event" SET status = 0 WHERE status = 5;

DROP TABLE IF EXISTS "outbox_event_pos";

DROP INDEX IF EXISTS "outbox_event_stream";

ALTER TABLE "outbox_event" DROP COLUMN pos;
