// Package postgres is the outbox store for PostgreSQL, used through
// database/sql with the pgx driver (github.com/jackc/pgx/v5/stdlib, driver
// name "pgx"); importing this package registers that driver. Open returns a
// pool of it whose transactions cost fewer round trips (see Open).
//
// The claim is one statement and one round trip:
//
//	UPDATE t SET locked_by = $1, locked_at = $2 WHERE event_id = ANY (ARRAY(
//	    SELECT event_id FROM t WHERE status IN (0, 2) AND ... ORDER BY created_at, event_id
//	    LIMIT $6 FOR UPDATE SKIP LOCKED)) RETURNING ...
//
// A partial index on the pending rows lets it walk them in order and stop
// after LIMIT rows, so a claim costs the same with ten or a million rows
// waiting; SKIP LOCKED lets concurrent pollers pass each other's rows instead
// of queueing behind them. The table name may be schema-qualified
// ("app.outbox_event"); the schema must exist.
//
// The Store also wakes pollers across instances: as a core.InsertNotifier it
// sends pg_notify on the table's channel (see channel) in the transaction
// that writes events no hot path delivers, and as a core.WakeSource it
// LISTENs on that channel on a dedicated connection of the poller's pool.
package postgres

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib" // also registers the "pgx" database/sql driver

	"github.com/outboxkit/outbox/core"
	dsnpkg "github.com/outboxkit/outbox/internal/dsn"
	"github.com/outboxkit/outbox/store/internal/sqlstore"
)

//go:generate go run ../internal/storegen/cmd/storegen -pkg postgres

//go:embed schema.sql
var ddl string

//go:embed upgrade_ordering.sql
var upgradeOrdering string

//go:embed upgrade_position.sql
var upgradePosition string

// Config configures a Store.
type Config struct {
	// Table is the outbox table name. Default "outbox_event". It must match
	// ^[A-Za-z_][A-Za-z0-9_]{0,62}$, optionally prefixed by a schema name of
	// the same form and a dot.
	Table string
	// Ordered names the aggregate types whose events are delivered in order
	// per key (aggregate type and aggregate id), each with its DEAD policy
	// (see core.Ordering). Every process sharing the table must use the
	// same. Default none: every event is unordered.
	Ordered core.Ordering
	// Partitions, when set, makes the table a partitioned table (see
	// Partitions): CreateSchema creates it partitioned, and
	// MaintainPartitions, which the purger runs, creates partitions ahead
	// and drops old ones. A table made without it is converted by
	// MigrateToPartitioned. Every process sharing the table must set the
	// same. Default nil: a plain table.
	Partitions *Partitions
}

// Store is the PostgreSQL outbox store. It implements core.Store and is safe
// for concurrent use.
//
// Its methods are generated (store_gen.go): each one runs the shared SQL of
// this module's stores in this dialect.
type Store struct {
	positionProvider // position.Source: the store side of position delivery, for package outbox
	shared           *sqlstore.Store
	channel          string       // the NOTIFY channel of the table (channel)
	parts            *partitioner // nil: a plain table
}

// New validates cfg and returns a Store. A bad table name returns an error
// matching core.ErrInvalid. New does not touch the database.
func New(cfg Config) (*Store, error) {
	table, err := sqlstore.ParseTableName(cfg.Table, true)
	if err != nil {
		return nil, err
	}
	d := dialect()
	var parts *partitioner
	if cfg.Partitions != nil {
		pc, err := cfg.Partitions.withDefaults()
		if err != nil {
			return nil, err
		}
		parts = &partitioner{table: table, cfg: pc}
		d.DDL, d.UpgradeOrdering, d.UpgradePosition, d.Position = partitionedDDL, "", "", nil
		d.AfterSchema = func(ctx context.Context, db core.DBTX) error {
			if _, err := parts.ensure(ctx, db, time.Now()); err != nil {
				return fmt.Errorf("create schema: create partitions: %w", err)
			}
			return nil
		}
	}
	shared, err := sqlstore.New(d, table).WithOrdering(cfg.Ordered)
	if err != nil {
		return nil, err
	}
	s := &Store{shared: shared, channel: channel(shared.Table()), parts: parts}
	s.positionProvider = newPositionProvider(s)
	return s, nil
}

// dialect returns the PostgreSQL dialect of the shared SQL store.
func dialect() sqlstore.Dialect {
	return sqlstore.Dialect{
		Name:           "postgres",
		NumberedParams: true,
		DDL:            ddl,
		Migrations:     migrationTemplates,
		Quote:          func(s string) string { return `"` + s + `"` },
		Claim:          sqlstore.ClaimReturning,
		ClaimLock:      "FOR UPDATE SKIP LOCKED",
		// With event_id IN (SELECT ... LIMIT $n) the planner may hash-join the
		// ids against a sequential scan of the whole table (it does for
		// purge batches of 500, and in generic plans, where it cannot see
		// the LIMIT). ARRAY(...) runs the subquery once, as an init plan, and
		// the outer statement then fetches those ids by primary key.
		InSubquery: "event_id = ANY (ARRAY(%s))",
		// pgx caches prepared statements by text.
		PadIDLists:        true,
		MaxParams:         65535,
		UpgradeOrdering:   upgradeOrdering,
		UpgradePosition:   upgradePosition,
		Position:          positionSQL,
		ErrorAbortsTx:     true,
		Keys:              sqlstore.KeysWritableCTE,
		LockingRead:       "FOR UPDATE",
		IsUniqueViolation: isUniqueViolation,
		IsRetryable:       isRetryable,
		NamedLock:         namedLock,
	}
}

// namedLock: session-level advisory locks, on a 64-bit key hashed from the
// lock key (table and lock name). Advisory locks are per database, and the
// key space is shared with the application's own advisory locks; a
// collision with one of those would only make a purge run or a relay wait.
// pg_locks shows a bigint key as its high half in classid and its low half
// in objid, with objsubid 1.
var namedLock = &sqlstore.NamedLockSQL{
	TryLock: "SELECT pg_try_advisory_lock(hashtextextended(?, 0))",
	Held: "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted " +
		"AND objsubid = 1 AND classid::bigint = (hashtextextended(?, 0) >> 32) & 4294967295 " +
		"AND objid::bigint = hashtextextended(?, 0) & 4294967295)",
	Unlock: "SELECT pg_advisory_unlock(hashtextextended(?, 0))",
}

// sqlState returns the SQLSTATE of a PostgreSQL error: pgx's *pgconn.PgError,
// or any error with an SQLState method (lib/pq and wrappers), "" otherwise.
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	var withState interface{ SQLState() string }
	if errors.As(err, &withState) {
		return withState.SQLState()
	}
	return ""
}

func isUniqueViolation(err error) bool { return sqlState(err) == "23505" }

// isRetryable: serialization failure and deadlock. PostgreSQL has aborted
// the statement's transaction; run on a pool, the statement can simply run
// again.
func isRetryable(err error) bool {
	switch sqlState(err) {
	case "40001", "40P01":
		return true
	}
	return false
}

// Open opens a database/sql pool on dsn with the pgx driver. dsn is a URL,
// "postgres://user:pass@host:5432/db?sslmode=disable" (or postgresql://), or
// pgx's keyword/value form, "host=host user=user dbname=db sslmode=disable".
// Open checks what it can without connecting: a DSN of another database
// (MySQL's user@tcp(host:3306)/db, a SQLite path) is refused with an error
// naming the function that opens it, and one pgx cannot read (an unknown
// sslmode, a bad port) with pgx's reason; both match core.ErrInvalid and
// never show the password. It does not connect; the first query (or
// db.PingContext) does. It does not create the outbox table; call
// Store.CreateSchema for that.
//
// The pool runs pgx's driver, whose statements, results and errors it
// keeps, with transactions that send no BEGIN of their own: BeginTx sends
// nothing, and the transaction's first statement goes to the server in one
// round trip with its BEGIN (a first query, prepared statement or statement
// without arguments sends the BEGIN alone first). In a transaction of
// txctx's Do, the outbox's INSERT of events whose ids the library generated
// goes with the transaction's next statement or its COMMIT: a business row
// and an event cost two round trips instead of four. Such an INSERT that
// fails fails the statement it goes with, or the COMMIT (matching
// core.ErrDuplicateEvent for a duplicate id), and the transaction rolls
// back. A transaction that runs nothing sends nothing. sql.Conn.Raw hands a
// driver connection with a method Conn() *pgx.Conn, not a *stdlib.Conn.
func Open(dsn string) (*sql.DB, error) {
	conn, err := dsnpkg.For(dsn, dsnpkg.Postgres)
	if err != nil {
		return nil, core.Invalid("postgres dsn", "%v", err)
	}
	cfg, err := pgx.ParseConfig(conn)
	if err != nil {
		return nil, core.Invalid("postgres dsn", "%v", err) // pgconn hides the password
	}
	return OpenDB(*cfg), nil
}

// OpenDB is Open with a pgx configuration (pgx.ParseConfig's, with a
// tracer, TLS settings or a dialer of your own), on which it cannot fail.
func OpenDB(cfg pgx.ConnConfig) *sql.DB { return sql.OpenDB(connector{stdlib.GetConnector(cfg)}) }
