-- outbox migration 0002 ordering, for the table outbox_event.
-- Rendered from the store's templates; see github.com/outboxkit/outbox/store/migrations.
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
