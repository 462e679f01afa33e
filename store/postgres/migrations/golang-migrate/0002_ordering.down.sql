-- outbox migration 0002 ordering, for the table outbox_event.
-- Rendered from the store's templates; see github.com/outboxkit/outbox/store/migrations.
UPDATE "outbox_event" SET status = 0 WHERE status = 4;

DROP TABLE IF EXISTS "outbox_event_key";

DROP INDEX IF EXISTS "outbox_event_seq";

ALTER TABLE "outbox_event" DROP COLUMN IF EXISTS seq;
