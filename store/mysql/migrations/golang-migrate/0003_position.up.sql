-- outbox migration 0003 position, for the table outbox_event.
-- Rendered from the store's templates; see github.com/outboxkit/outbox/store/migrations.
ALTER TABLE `outbox_event` ADD COLUMN pos BIGINT NULL;

/*M!100500 CREATE SEQUENCE IF NOT EXISTS `outbox_event_pos_seq` */;

CREATE UNIQUE INDEX `outbox_event_stream` ON `outbox_event` (pos);

CREATE TABLE IF NOT EXISTS `outbox_event_pos` (
    relay      VARCHAR(64)  NOT NULL,
    floor_pos  BIGINT       NOT NULL,
    cursor_pos BIGINT       NOT NULL,
    open_pos   TEXT         NOT NULL,
    owner      VARCHAR(128) NOT NULL,
    updated_at DATETIME(6)  NOT NULL,
    PRIMARY KEY (relay)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

INSERT IGNORE INTO `outbox_event_pos` (relay, floor_pos, cursor_pos, open_pos, owner, updated_at)
    VALUES ('default', 0, 0, '[]', '', UTC_TIMESTAMP(6));
