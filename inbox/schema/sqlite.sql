-- Inbox table for SQLite: one row per (consumer, event id) that took effect,
-- written in the consumer's own transaction. received_at is fixed-width UTC
-- text (2006-01-02T15:04:05.000000Z), which sorts and compares as time.
CREATE TABLE IF NOT EXISTS {{table}} (
    consumer    TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    received_at TEXT NOT NULL,
    PRIMARY KEY (consumer, event_id)
) WITHOUT ROWID;

-- Purge: a consumer's entries by age.
CREATE INDEX IF NOT EXISTS {{index:received}} ON {{table}} (consumer, received_at);
