-- Inbox table for PostgreSQL: one row per (consumer, event id) that took
-- effect, written in the consumer's own transaction.
CREATE TABLE IF NOT EXISTS {{table}} (
    consumer    VARCHAR(128) NOT NULL,
    event_id    VARCHAR(128) NOT NULL,
    received_at TIMESTAMPTZ  NOT NULL,
    PRIMARY KEY (consumer, event_id)
);

-- Purge: a consumer's entries by age.
CREATE INDEX IF NOT EXISTS {{index:received}} ON {{table}} (consumer, received_at);
