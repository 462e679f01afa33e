-- Inbox table for MySQL/MariaDB: one row per (consumer, event id) that took
-- effect, written in the consumer's own transaction. Times are UTC.
CREATE TABLE IF NOT EXISTS {{table}} (
    consumer    VARCHAR(128) NOT NULL,
    event_id    VARCHAR(128) NOT NULL,
    received_at DATETIME(6)  NOT NULL,
    PRIMARY KEY (consumer, event_id),
    -- Purge: a consumer's entries by age.
    INDEX {{index:received}} (consumer, received_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
