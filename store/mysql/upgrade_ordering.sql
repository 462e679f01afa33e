-- Ordered delivery per key (aggregate type, aggregate id), added to a table
-- made by schema.sql. CreateSchema runs these after schema.sql, on new and
-- existing tables alike, and skips the ADD COLUMN and the CREATE INDEX when
-- the column or index exists (errors 1060 and 1061: MySQL 8 has no IF NOT
-- EXISTS for them). Adding a NULL column at the end is instant on MySQL
-- 8.0.12+ and MariaDB 10.3+; the index is built online.
--
-- seq is the event's position in its key; NULL for unordered events.
ALTER TABLE {{table}} ADD COLUMN seq BIGINT NULL;

-- Promotion finds a key's next event by (key, seq). MySQL has no partial
-- indexes: every insert, ordered or not, adds an entry (docs/ordered-delivery.md
-- has what it costs).
CREATE INDEX {{index:seq}} ON {{table}} (aggregate_type, aggregate_id, seq);

-- One row per key of an ordered aggregate type: the seq of its last written
-- event and of its last finished one. Writers update it, and so lock it
-- until they commit; finishing a key's head updates it too.
CREATE TABLE IF NOT EXISTS {{keytable}} (
    aggregate_type VARCHAR(64)  NOT NULL,
    aggregate_id   VARCHAR(128) NOT NULL,
    last_seq       BIGINT       NOT NULL,
    done_seq       BIGINT       NOT NULL,
    updated_at     DATETIME(6)  NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
