-- outbox migration 0003 position, for the table outbox_event.
-- Rendered from the store's templates; see github.com/outboxkit/outbox/store/migrations.
UPDATE `outbox_event` SET status = 1, done_at = created_at
    WHERE status = 5 AND pos <= (SELECT COALESCE(MAX(floor_pos), 0) FROM `outbox_event_pos`);

UPDATE `outbox_event` SET status = 0 WHERE status = 5;

DROP TABLE IF EXISTS `outbox_event_pos`;

/*M!100500 DROP SEQUENCE IF EXISTS `outbox_event_pos_seq` */;

DROP INDEX `outbox_event_stream` ON `outbox_event`;

ALTER TABLE `outbox_event` DROP COLUMN pos;
