-- The tables of the round-trip scripts: a business table, this library's
-- outbox table with every index its migrations make, watermill-sql's
-- table, and a sequence for ids and positions. run.sh creates them, runs
-- the scripts and drops them.
DROP TABLE IF EXISTS rt_biz, rt_outbox, rt_watermill;
DROP SEQUENCE IF EXISTS rt_seq;
CREATE TABLE rt_biz (id VARCHAR(36) PRIMARY KEY, customer VARCHAR(64) NOT NULL, amount BIGINT NOT NULL, created_at TIMESTAMPTZ NOT NULL);
CREATE TABLE rt_outbox (
    event_id VARCHAR(36) COLLATE "C" NOT NULL PRIMARY KEY, event_type VARCHAR(128) NOT NULL,
    aggregate_type VARCHAR(64) NOT NULL DEFAULT '__GLOBAL__', aggregate_id VARCHAR(128), tenant_id VARCHAR(64),
    payload BYTEA NOT NULL, headers TEXT, status SMALLINT NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0,
    available_at TIMESTAMPTZ NOT NULL, created_at TIMESTAMPTZ NOT NULL, done_at TIMESTAMPTZ, last_error TEXT,
    locked_by VARCHAR(128), locked_at TIMESTAMPTZ, seq BIGINT, pos BIGINT);
CREATE INDEX ON rt_outbox (created_at, event_id, available_at) WHERE status IN (0, 2);
CREATE INDEX ON rt_outbox (created_at, event_id) WHERE status = 3;
CREATE INDEX ON rt_outbox (done_at) WHERE done_at IS NOT NULL;
CREATE UNIQUE INDEX ON rt_outbox (aggregate_type, aggregate_id, seq) WHERE seq IS NOT NULL;
CREATE INDEX ON rt_outbox (pos) WHERE pos IS NOT NULL;
CREATE SEQUENCE rt_seq AS BIGINT;
CREATE TABLE rt_watermill ("offset" BIGSERIAL, "uuid" VARCHAR(36) NOT NULL, "created_at" TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "payload" JSON DEFAULT NULL, "metadata" JSON DEFAULT NULL, "transaction_id" xid8 NOT NULL, PRIMARY KEY ("transaction_id", "offset"));
