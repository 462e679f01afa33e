-- outbox migration 0002 ordering, for the table outbox_event.
-- Rendered from the store's templates; see github.com/outboxkit/outbox/store/migrations.
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
