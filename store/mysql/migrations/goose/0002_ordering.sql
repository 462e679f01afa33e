-- outbox migration 0002 ordering, for the table outbox_event.
-- Rendered from the store's templates; see github.com/outboxkit/outbox/store/migrations.
-- +goose Up
ALTER TABLE `outbox_event` ADD COLUMN seq BIGINT NULL;

CREATE INDEX `outbox_event_seq` ON `outbox_event` (aggregate_type, aggregate_id, seq);

CREATE TABLE IF NOT EXISTS `outbox_event_key` (
    aggregate_type VARCHAR(64)  NOT NULL,
    aggregate_id   VARCHAR(128) NOT NULL,
    last_seq       BIGINT       NOT NULL,
    done_seq       BIGINT       NOT NULL,
    updated_at     DATETIME(6)  NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
UPDATE `outbox_event` SET status = 0 WHERE status = 4;

DROP TABLE IF EXISTS `outbox_event_key`;

DROP INDEX `outbox_event_seq` ON `outbox_event`;

ALTER TABLE `outbox_event` DROP COLUMN seq;
