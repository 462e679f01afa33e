-- What one event's INSERT costs the PostgreSQL server, without the client
-- and without COMMIT: watermill-sql's row against this library's STREAM row
-- (position delivery), with and without the stream index, 20,000 rows per
-- measure, 4 rounds alternated in one session. Prints the CPU µs per row of
-- this session's backend (user + system time from /proc, 10 ms ticks), which
-- other load on the machine disturbs less than the elapsed time; needs a
-- superuser (pg_read_file) and the server on this machine.
--
--   psql -h 127.0.0.1 -U postgres -d test -f bench/compare/insertcost.sql
--
-- The tables are the two schemas as their libraries create them
-- (store/postgres/schema.sql, upgrade_ordering.sql, upgrade_position.sql;
-- watermill-sql's DefaultPostgreSQLSchema), dropped at the end.
DROP TABLE IF EXISTS cmp_cost_outbox, cmp_cost_outbox_noidx, cmp_cost_watermill;
DROP SEQUENCE IF EXISTS cmp_cost_outbox_seq;

CREATE TABLE cmp_cost_outbox (
    event_id       VARCHAR(36)  COLLATE "C" NOT NULL PRIMARY KEY,
    event_type     VARCHAR(128) NOT NULL,
    aggregate_type VARCHAR(64)  NOT NULL DEFAULT '__GLOBAL__',
    aggregate_id   VARCHAR(128),
    tenant_id      VARCHAR(64),
    payload        BYTEA        NOT NULL,
    headers        TEXT,
    status         SMALLINT     NOT NULL DEFAULT 0,
    attempts       INTEGER      NOT NULL DEFAULT 0,
    available_at   TIMESTAMPTZ  NOT NULL,
    created_at     TIMESTAMPTZ  NOT NULL,
    done_at        TIMESTAMPTZ,
    last_error     TEXT,
    locked_by      VARCHAR(128),
    locked_at      TIMESTAMPTZ,
    seq            BIGINT,
    pos            BIGINT
);
CREATE INDEX cmp_cost_outbox_pending ON cmp_cost_outbox (created_at, event_id, available_at) WHERE status IN (0, 2);
CREATE INDEX cmp_cost_outbox_dead ON cmp_cost_outbox (created_at, event_id) WHERE status = 3;
CREATE INDEX cmp_cost_outbox_done ON cmp_cost_outbox (done_at) WHERE done_at IS NOT NULL;
CREATE UNIQUE INDEX cmp_cost_outbox_seq_idx ON cmp_cost_outbox (aggregate_type, aggregate_id, seq) WHERE seq IS NOT NULL;
CREATE SEQUENCE cmp_cost_outbox_seq AS BIGINT;
-- The same table without the stream index, to price that index alone.
CREATE TABLE cmp_cost_outbox_noidx (LIKE cmp_cost_outbox INCLUDING ALL);
CREATE INDEX cmp_cost_outbox_stream ON cmp_cost_outbox (pos) WHERE pos IS NOT NULL;

CREATE TABLE cmp_cost_watermill (
    "offset"         BIGSERIAL,
    "uuid"           VARCHAR(36) NOT NULL,
    "created_at"     TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "payload"        JSON DEFAULT NULL,
    "metadata"       JSON DEFAULT NULL,
    "transaction_id" xid8 NOT NULL,
    PRIMARY KEY ("transaction_id", "offset")
);

-- cpu returns this backend's CPU time so far, in clock ticks.
CREATE FUNCTION pg_temp.cpu() RETURNS bigint LANGUAGE sql AS $$
    SELECT f[12]::bigint + f[13]::bigint
    FROM (SELECT string_to_array(split_part(pg_read_file('/proc/' || pg_backend_pid() || '/stat'), ') ', 2), ' ') AS f) s
$$;

-- run inserts n rows into kind's table and returns CPU µs per row.
CREATE FUNCTION pg_temp.run(kind text, n int, base int) RETURNS numeric LANGUAGE plpgsql AS $$
DECLARE
    t0 bigint;
    doc text := '{"a":"' || repeat('x', 190) || '"}';
    pj json := doc::json;
    pb bytea := convert_to(doc, 'UTF8');
    p bigint;
BEGIN
    t0 := pg_temp.cpu();
    IF kind = 'watermill' THEN
        FOR i IN base .. base + n - 1 LOOP
            INSERT INTO cmp_cost_watermill (uuid, payload, metadata, transaction_id)
            VALUES (lpad(i::text, 26, '0'), pj, '{}', pg_current_xact_id());
        END LOOP;
    ELSIF kind = 'outbox' THEN
        FOR i IN base .. base + n - 1 LOOP
            INSERT INTO cmp_cost_outbox (event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload,
                headers, status, attempts, available_at, created_at, pos)
            VALUES (lpad(i::text, 26, '0'), 'OrderPlaced', 'Order', 'o-1', NULL, pb, NULL, 5, 0, now(), now(),
                CASE WHEN pg_current_xact_id() IS NOT NULL THEN nextval('cmp_cost_outbox_seq') END)
            RETURNING pos INTO p;
        END LOOP;
    ELSE
        FOR i IN base .. base + n - 1 LOOP
            INSERT INTO cmp_cost_outbox_noidx (event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload,
                headers, status, attempts, available_at, created_at, pos)
            VALUES (lpad(i::text, 26, '0'), 'OrderPlaced', 'Order', 'o-1', NULL, pb, NULL, 5, 0, now(), now(),
                CASE WHEN pg_current_xact_id() IS NOT NULL THEN nextval('cmp_cost_outbox_seq') END)
            RETURNING pos INTO p;
        END LOOP;
    END IF;
    RETURN round((pg_temp.cpu() - t0) * 10000.0 / n, 1); -- 100 ticks a second
END $$;

SELECT r AS round,
       pg_temp.run('watermill', 20000, r * 20000) AS watermill_us,
       pg_temp.run('outbox', 20000, r * 20000) AS outbox_stream_us,
       pg_temp.run('noidx', 20000, r * 20000) AS outbox_stream_without_stream_index_us
FROM generate_series(0, 3) r;

DROP TABLE cmp_cost_outbox, cmp_cost_outbox_noidx, cmp_cost_watermill;
DROP SEQUENCE cmp_cost_outbox_seq;
