// Command outboxctl is the operations tool for an outbox table: it shows the
// backlog, lists, counts and replays DEAD events, purges old terminal rows,
// and prints the schema DDL for migration tools.
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
//	schema [postgres|mysql|sqlite]
//	    Prints the DDL of the table (--table) for that database, or for the
//	    database of --dsn; connects to nothing.
//
// Commands that change data (dead replay, dead replay-all, purge) first
// print what they would change. Without --yes they stop there, change
// nothing and exit with 3; with --dry-run they stop there and exit with 0.
// Replaying delivers events again: consumers must deduplicate on event_id.
// Long replays and purges report progress on stderr.
//
// The DSN (flag --dsn, else $OUTBOX_DSN) chooses the driver by its scheme:
//
//	postgres://user:pass@host:5432/db?sslmode=disable   (also postgresql://) pgx
//	mysql://user:pass@tcp(host:3306)/db                  go-sql-driver/mysql; parseTime
//	                                                     and loc=UTC are added
//	sqlite:///var/lib/app/outbox.db, sqlite://rel.db,    modernc.org/sqlite
//	file:/var/lib/app/outbox.db
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
