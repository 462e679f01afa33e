// Command outboxctl is the operations tool for an outbox table: it shows the
// backlog, lists, counts and replays DEAD events, purges old terminal rows,
// prints the schema DDL for migration tools, and migrates the schema.
//
// Usage:
//
//	outboxctl [--dsn DSN] [--table NAME] [--timeout D] COMMAND [flags] [args]
//
//	stats [--json]
//	    Counts of pending (NEW), retrying (RETRY), leased (NEW or RETRY held
//	    by a dispatcher), dead and done rows, and the age of the oldest
//	    pending row. Counting DONE rows reads all of them.
//	dead list [--type T] [--aggregate A] [--limit N] [--json] [--payload]
//	    DEAD events, oldest first (default limit 100). Payloads are shown
//	    only with --payload: as JSON text when they are JSON, base64 otherwise.
//	dead count [--type T] [--aggregate A] [--json]
//	    Number of DEAD events.
//	dead replay [--dry-run] [--yes] ID...
//	    Moves the given DEAD events back to NEW (attempts 0, error cleared),
//	    so they are delivered again.
//	dead replay-all [--type T] [--aggregate A] [--limit N] [--batch N] [--dry-run] [--yes]
//	    Replays every matching DEAD event (at most --limit), oldest first, in
//	    batches (default 500).
//	purge --older-than D [--dead-older-than D | --keep-dead] [--batch N] [--dry-run] [--yes]
//	    Deletes DONE rows finished more than D ago and DEAD rows that died
//	    more than --dead-older-than (default: D) ago, in batches (default 500).
//	    Durations take days too: 7d, 1d12h, 36h, 90m.
//	schema [postgres|mysql|sqlite]
//	    Prints the DDL of the table (--table) for that database, or for the
//	    database of --dsn; connects to nothing.
//	migrate status [--version-table NAME] [--json]
//	    The schema versions applied to the table and those pending.
//	migrate up [--to N] [--version-table NAME] [--dry-run]
//	    Applies the pending migrations (up to version N), oldest first. A
//	    table CreateSchema (or outboxctl schema) made is taken over: 0001
//	    changes nothing on it and is recorded.
//	migrate down --to N [--version-table NAME] [--dry-run] [--yes]
//	    Reverts the migrations above version N, newest first. Down to 0
//	    drops the table and every event in it.
//	migrate files --format goose|golang-migrate --out DIR [postgres|mysql|sqlite]
//	    Writes the migrations of the table (--table) in the tool's layout,
//	    for goose's or golang-migrate's command line; connects to nothing.
//	serve [--addr HOST:PORT] [--allow-writes] [--show-payloads]
//	    Serves the web console (package console) on --addr, default
//	    127.0.0.1:8080, until interrupted: backlog, dead events, purge dry
//	    run, and replays with --allow-writes. It has no authentication of its
//	    own: keep it on localhost or mount the console behind your service's.
//	partitions list [--interval D] [--ahead N]
//	    The partitions of a partitioned PostgreSQL table (postgres.Partitions).
//	partitions create [--interval D] [--ahead N]
//	    Creates the partitions the table lacks up to N after the current one
//	    (the purger does it on every run; this is for a table no purger
//	    serves). --interval must be the services' Partitions.Interval.
//	partitions migrate [--interval D] [--ahead N] [--dry-run] [--yes]
//	    Converts a plain PostgreSQL outbox table into a partitioned one,
//	    keeping every row (postgres.Store.MigrateToPartitioned). The table is
//	    locked while the rows are copied.
//
// migrate keeps the applied versions in a table of its own, by default the
// outbox table's name followed by _migration (one row per version: version,
// name, applied_at), and holds a named lock of the table while it runs on
// PostgreSQL and MySQL. It is not goose's or golang-migrate's version
// table: use one tool per table.
//
// Commands that change data (dead replay, dead replay-all, purge, migrate
// down) first
// print what they would change. Without --yes they stop there, change
// nothing and exit with 3; with --dry-run they stop there and exit with 0.
// Replaying delivers events again: consumers must deduplicate on event_id.
// Long replays and purges report progress on stderr.
//
// The DSN (flag --dsn, else $OUTBOX_DSN) takes the forms postgres.Open,
// mysql.Open and sqlite.Open take (store.Open takes them all), and chooses
// the driver by its form:
//
//	postgres://user:pass@host:5432/db?sslmode=disable   pgx (also postgresql://, and
//	host=host user=user dbname=db sslmode=disable         the keyword/value form)
//	user:pass@tcp(host:3306)/db                          go-sql-driver/mysql; parseTime
//	mysql://user:pass@tcp(host:3306)/db                  and loc=UTC are added
//	sqlite:///var/lib/app/outbox.db, sqlite://rel.db,    modernc.org/sqlite; the file
//	file:/var/lib/app/outbox.db, /var/lib/app/outbox.db  must exist
//
// The table is --table, else $OUTBOX_TABLE, else outbox_event; it may be
// schema-qualified on PostgreSQL and MySQL.
//
// Exit codes:
//
//	0  success, including dry runs and plans with nothing to change
//	1  error: unreachable database, failed query, interrupted run
//	2  usage error: unknown command or flag, bad argument or DSN
//	3  confirmation required: the plan was printed, nothing was changed;
//	   run again with --yes to apply it
//	4  dead replay: some of the IDs were not replayed (not found or not DEAD)
//
// Output is line-oriented and stable: key/value lines for stats, one row per
// line for lists, one line per action ("replayed ID", "skipped ID: ...").
// --json gives machine-readable output for stats, dead list and dead count.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
