-- outbox migration 0001 create_table, for the table outbox_event.
-- Rendered from the store's templates; see github.com/outboxkit/outbox/store/migrations.
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
