-- CreateSchema
CREATE TABLE IF NOT EXISTS `outbox_event` (
    event_id       VARBINARY(36) NOT NULL,
    event_type     VARCHAR(128) NOT NULL,
    aggregate_type VARCHAR(64)  NOT NULL DEFAULT '__GLOBAL__',
    aggregate_id   VARCHAR(128) NULL,
    tenant_id      VARCHAR(64)  NULL,
    payload        MEDIUMBLOB   NOT NULL,
    headers        MEDIUMTEXT   NULL,
    status         SMALLINT     NOT NULL DEFAULT 0,
    attempts       INT          NOT NULL DEFAULT 0,
    available_at   DATETIME(6)  NOT NULL,
    created_at     DATETIME(6)  NOT NULL,
    done_at        DATETIME(6)  NULL,
    last_error     TEXT         NULL,
    locked_by      VARCHAR(128) NULL,
    locked_at      DATETIME(6)  NULL,
    lane           TINYINT GENERATED ALWAYS AS (CASE WHEN status IN (0, 2) THEN 0 ELSE status END) STORED,
    PRIMARY KEY (event_id),
    KEY `outbox_event_lane` (lane, created_at, event_id, available_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
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
