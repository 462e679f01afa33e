-- outbox migration 0001 create_table, for the table outbox_event.
-- Rendered from the store's templates; see github.com/outboxkit/outbox/store/migrations.
DROP TABLE IF EXISTS "outbox_event";
