-- outbox migration 0003 position, for the table outbox_event.
-- Rendered from the store's templates; see github.com/outboxkit/outbox/store/migrations.
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
