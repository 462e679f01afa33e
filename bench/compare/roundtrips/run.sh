#!/bin/sh
# What a business transaction with an outbox write costs in round trips:
# pgbench, 16 clients on 2 threads, runs each script (business.sql,
# four.sql, four_watermill.sql, three.sql, two.sql) for SECONDS_EACH (10) s on
# fresh tables, ROUNDS (2) times, and prints its transactions per second.
# Needs pgbench and psql of PostgreSQL 14 or later (\startpipeline), and
# PGHOST, PGUSER, PGDATABASE (or the defaults below) naming the server.
#
#   sh bench/compare/roundtrips/run.sh
set -eu
cd "$(dirname "$0")"
: "${PGHOST:=127.0.0.1}" "${PGUSER:=postgres}" "${PGDATABASE:=test}" "${SECONDS_EACH:=10}" "${ROUNDS:=2}"
export PGHOST PGUSER PGDATABASE
trap 'psql -qX -c "DROP TABLE IF EXISTS rt_biz, rt_outbox, rt_watermill; DROP SEQUENCE IF EXISTS rt_seq" >/dev/null 2>&1' EXIT
for round in $(seq "$ROUNDS"); do
	for script in business four four_watermill three two; do
		psql -qX -v ON_ERROR_STOP=1 -f setup.sql >/dev/null 2>&1
		tps=$(pgbench -n -M prepared -c 16 -j 2 -T "$SECONDS_EACH" -f "$script.sql" | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
		echo "round $round: $script: $tps transactions/s"
	done
done
