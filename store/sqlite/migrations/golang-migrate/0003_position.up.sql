-- outbox migration 0003 position, for the table outbox_event.
-- Rendered from the store's templates; see github.com/outboxkit/outbox/store/migrations.
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
