// Package sqlite is the outbox store for SQLite, on the pure-Go driver
// modernc.org/sqlite (no cgo).
//
// SQLite allows one writer at a time. Open configures a database the way the
// outbox needs it: WAL journal, a busy timeout, and a pool of one connection,
// so the writes of one process queue in Go instead of failing with
// SQLITE_BUSY. Several processes may share one database file; the claim is a
// single UPDATE ... WHERE event_id IN (SELECT ... LIMIT n) RETURNING statement,
// atomic under SQLite's write lock.
package sqlite

import (
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	sqlitedrv "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/outboxkit/outbox/core"
	dsnpkg "github.com/outboxkit/outbox/internal/dsn"
	"github.com/outboxkit/outbox/store/internal/sqlstore"
)

//go:generate go run ../internal/storegen/cmd/storegen -pkg sqlite

//go:embed schema.sql
var ddl string

//go:embed upgrade_ordering.sql
var upgradeOrdering string

//go:embed upgrade_position.sql
var upgradePosition string

// Config configures a Store.
type Config struct {
	// Table is the outbox table name. Default "outbox_event". It must match
	// ^[A-Za-z_][A-Za-z0-9_]{0,62}$; SQLite tables are not schema-qualified.
	Table string
	// Ordered names the aggregate types whose events are delivered in order
	// per key (aggregate type and aggregate id), each with its DEAD policy
	// (see core.Ordering). Every process sharing the table must use the
	// same. Default none: every event is unordered.
	Ordered core.Ordering
}

// Store is the SQLite outbox store. It implements core.Store and is safe for
// concurrent use.
//
// Its methods are generated (store_gen.go): each one runs the shared SQL of
// this module's stores in this dialect.
type Store struct {
	positionProvider // position.Source: the store side of position delivery, for package outbox
	shared           *sqlstore.Store
}

// New validates cfg and returns a Store. A bad table name returns an error
// matching core.ErrInvalid.
func New(cfg Config) (*Store, error) {
	table, err := sqlstore.ParseTableName(cfg.Table, false)
	if err != nil {
		return nil, err
	}
	shared, err := sqlstore.New(dialect(), table).WithOrdering(cfg.Ordered)
	if err != nil {
		return nil, err
	}
	s := &Store{shared: shared}
	s.positionProvider = newPositionProvider(s)
	return s, nil
}

// dialect returns the SQLite dialect of the shared SQL store.
func dialect() sqlstore.Dialect {
	return sqlstore.Dialect{
		Name:       "sqlite",
		DDL:        ddl,
		Migrations: migrationTemplates,
		Quote:      func(s string) string { return `"` + s + `"` },
		Claim:      sqlstore.ClaimReturning,
		EncodeTime: func(t time.Time) any {
			return t.Format(sqlstore.SQLiteTimeFormat)
		},
		MaxParams:         32766,
		PadIDLists:        true,
		UpgradeOrdering:   upgradeOrdering,
		UpgradePosition:   upgradePosition,
		Position:          positionSQL,
		Keys:              sqlstore.KeysReturning,
		IsAlreadyExists:   isDuplicateColumn,
		IsUniqueViolation: isUniqueViolation,
		IsRetryable:       isBusy,
	}
}

func sqliteCode(err error) int {
	var e *sqlitedrv.Error
	if errors.As(err, &e) {
		return e.Code()
	}
	return 0
}

func isUniqueViolation(err error) bool {
	switch sqliteCode(err) {
	case sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, sqlite3.SQLITE_CONSTRAINT_UNIQUE:
		return true
	}
	return false
}

// isDuplicateColumn: the seq column an earlier CreateSchema added. SQLite
// reports it as a generic error; only its message tells.
func isDuplicateColumn(err error) bool {
	return err != nil && strings.Contains(err.Error(), "duplicate column name")
}

func isBusy(err error) bool {
	switch sqliteCode(err) & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return true
	}
	return false
}

// Open opens (creating if needed) the SQLite database at path, configured for
// the outbox: WAL journal, synchronous=NORMAL, a 10 s busy timeout, BEGIN
// IMMEDIATE transactions and a single connection. path is a file path, or
// one in the URL forms outboxctl takes: sqlite:///abs/path.db,
// sqlite://rel/path.db, file:path.db. A DSN of another database (a
// postgres:// URL, MySQL's user@tcp(host:3306)/db) and a path with
// parameters (?mode=ro: Open sets the pragmas itself) are refused with an
// error matching core.ErrInvalid that says what to write instead.
//
// The connection keeps the prepared statements of its last 64 distinct Exec
// statements (the outbox's and the application's alike), so that they are
// not parsed again on every call; Conn.Raw therefore sees this package's
// wrapper, not the driver's connection. Open does not create the outbox
// table; call Store.CreateSchema for that.
func Open(path string) (*sql.DB, error) {
	if path == "" {
		return nil, core.Invalid("sqlite path", "is empty")
	}
	path, err := dsnpkg.For(path, dsnpkg.SQLite)
	if err != nil {
		return nil, core.Invalid("sqlite path", "%v", err)
	}
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Set("_txlock", "immediate")
	conn, err := sqlitedrv.NewConnector("file:" + path + "?" + q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	db := sql.OpenDB(cachingConnector{conn})
	db.SetMaxOpenConns(1)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	return db, nil
}
