// Package testdb gives tests a fresh outbox table on each database this
// machine offers: SQLite always, PostgreSQL and MySQL/MariaDB when their DSN
// environment variables are set. Every target gets a uniquely named table that
// is dropped when the test ends, so parallel tests and parallel runs never see
// each other's rows.
//
// Environment:
//
//	OUTBOX_POSTGRES_DSN  e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable
//	OUTBOX_MYSQL_DSN     e.g. root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC
//	OUTBOX_REQUIRE_DBS   "1" makes a missing or unreachable server fail the
//	                     test instead of skipping it (CI sets it).
package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/store"
	"github.com/outboxkit/outbox/store/mysql"
	"github.com/outboxkit/outbox/store/postgres"
	"github.com/outboxkit/outbox/store/sqlite"
	"github.com/outboxkit/outbox/store/storetest"
)

// Target is one database with a fresh outbox table.
type Target struct {
	Name  string  // "sqlite", "postgres" or "mysql"
	DB    *sql.DB // pool on the database
	Store Store   // store on the fresh table
	Table string  // the table name
	// Reopen returns a new, independent pool on the same database, as a
	// second process would have. It is closed when the test ends.
	Reopen func(t testing.TB) *sql.DB
	// NewStore returns a store of this dialect for another table name; it
	// is how tests check table-name validation. It creates nothing.
	NewStore func(table string) (Store, error)
	// Ordered is a store on the same table that orders the aggregate types
	// of storetest.Ordering.
	Ordered Store
}

// Store is a store that manages its own table, as every store of this
// module does.
type Store = store.SchemaManager

// DropTable drops the table of st (and with it its indexes) if it exists.
// It deletes every event: it is for tests, benchmarks and the reliability
// suite, which is why the stores do not offer it.
func DropTable(ctx context.Context, db core.DBTX, st Store) error {
	quote := func(id string) string { return `"` + id + `"` }
	if _, ok := core.StoreAs[*mysql.Store](st); ok {
		quote = func(id string) string { return "`" + id + "`" }
	}
	parts := strings.Split(st.Table(), ".")
	for i, p := range parts {
		parts[i] = quote(p)
	}
	if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+strings.Join(parts, ".")); err != nil {
		return fmt.Errorf("drop table %s: %w", st.Table(), err)
	}
	var more []string
	if k, ok := st.(interface{ KeyTable() string }); ok {
		more = append(more, k.KeyTable())
	}
	if k, ok := st.(interface{ PosTable() string }); ok {
		more = append(more, k.PosTable())
	}
	for _, table := range more {
		parts := strings.Split(table, ".")
		for i, p := range parts {
			parts[i] = quote(p)
		}
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+strings.Join(parts, ".")); err != nil {
			return fmt.Errorf("drop table %s: %w", table, err)
		}
	}
	return nil
}

// Suite returns tg as the conformance suite's target.
func (tg Target) Suite() storetest.Target {
	return storetest.Target{DB: tg.DB, Store: tg.Store, Table: tg.Table, Reopen: tg.Reopen, Ordered: tg.Ordered}
}

// Conformance returns the conformance suite's configuration for dialect's
// targets, its MySQL stores built with mysqlCfg (ignored by the other
// dialects). The server dialects get the checks of concurrent pools.
func Conformance(dialect string, mysqlCfg mysql.Config) storetest.Config {
	newStore := storeFactory(dialect, mysqlCfg)
	return storetest.Config{
		NewTarget: func(t testing.TB) storetest.Target {
			t.Helper()
			if dialect == "mysql" {
				return MySQLWith(mysqlCfg)(t).Suite()
			}
			return Open(t, dialect).Suite()
		},
		NewStore: func(table string) (core.Store, error) { return newStore(table) },
		Server:   dialect != "sqlite",
	}
}

// Dialects lists the dialect names ForEach runs, in order.
var Dialects = []string{"sqlite", "postgres", "mysql"}

// ForEach runs fn as a subtest named after each dialect. Dialects whose server
// is not configured are skipped with a message naming the variable to set
// (or fail, under OUTBOX_REQUIRE_DBS=1).
func ForEach(t *testing.T, fn func(t *testing.T, tg Target)) {
	t.Helper()
	for _, name := range Dialects {
		t.Run(name, func(t *testing.T) {
			fn(t, Open(t, name))
		})
	}
}

// Open returns a target for the named dialect, or skips the test.
func Open(t testing.TB, dialect string) Target {
	t.Helper()
	switch dialect {
	case "sqlite":
		return SQLite(t)
	case "postgres":
		return Postgres(t)
	case "mysql":
		return MySQL(t)
	}
	t.Fatalf("testdb: unknown dialect %q", dialect)
	return Target{}
}

// UniqueName returns a table name no other test or run uses.
func UniqueName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

// Required reports whether missing servers must fail tests (CI).
func Required() bool { return os.Getenv("OUTBOX_REQUIRE_DBS") == "1" }

func skipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if Required() {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// cleanupCtx is for cleanup SQL: the test's own context is already done.
func cleanupCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

func prepare(t testing.TB, tg Target) Target {
	t.Helper()
	ctx, cancel := cleanupCtx()
	defer cancel()
	if err := tg.Store.CreateSchema(ctx, tg.DB); err != nil {
		t.Fatalf("testdb: create %s schema: %v", tg.Name, err)
	}
	tg.Table = tg.Store.Table()
	t.Cleanup(func() {
		ctx, cancel := cleanupCtx()
		defer cancel()
		if err := DropTable(ctx, tg.DB, tg.Store); err != nil {
			t.Errorf("testdb: drop %s: %v", tg.Table, err)
		}
	})
	return tg
}

// SQLite returns a target on a new SQLite file in the test's temp dir.
func SQLite(t testing.TB) Target {
	t.Helper()
	path := filepath.Join(t.TempDir(), "outbox.db")
	open := func(t testing.TB) *sql.DB {
		t.Helper()
		db, err := sqlite.Open(path)
		if err != nil {
			t.Fatalf("testdb: %v", err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	return newTarget(t, "sqlite", open, mysql.Config{})
}

// Environment variables naming the servers, and the DSNs that work on a
// developer machine with local servers.
const (
	PostgresEnv        = "OUTBOX_POSTGRES_DSN"
	MySQLEnv           = "OUTBOX_MYSQL_DSN"
	examplePostgresDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	exampleMySQLDSN    = "root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC"
)

// poolSize caps each pool's connections: tests of several packages run in
// parallel against one server, each with several targets open.
const poolSize = 4

// server opens pools on the server named by env, or skips (fails under
// OUTBOX_REQUIRE_DBS=1) when env is unset or the server does not answer.
func server(t testing.TB, name, env, example string, open func(dsn string) (*sql.DB, error)) func(t testing.TB) *sql.DB {
	t.Helper()
	dsn := os.Getenv(env)
	if dsn == "" {
		skipOrFail(t, "%s tests: set %s=%s to run", name, env, example)
	}
	return func(t testing.TB) *sql.DB {
		t.Helper()
		db, err := open(dsn)
		if err != nil {
			t.Fatalf("testdb: %s: %v", env, err)
		}
		db.SetMaxOpenConns(poolSize)
		db.SetMaxIdleConns(poolSize)
		t.Cleanup(func() { _ = db.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := db.PingContext(ctx); err != nil {
			skipOrFail(t, "%s tests: server of %s unreachable: %v", name, env, err)
		}
		return db
	}
}

// Postgres returns a target on OUTBOX_POSTGRES_DSN, or skips.
func Postgres(t testing.TB) Target {
	t.Helper()
	open := server(t, "PostgreSQL", PostgresEnv, examplePostgresDSN, postgres.Open)
	return newTarget(t, "postgres", open, mysql.Config{})
}

// MySQL returns a target on OUTBOX_MYSQL_DSN with the default claim
// strategy, or skips.
func MySQL(t testing.TB) Target {
	t.Helper()
	return MySQLWith(mysql.Config{})(t)
}

// MySQLWith returns an opener of targets on OUTBOX_MYSQL_DSN whose stores use
// cfg (its Table is replaced by a fresh name), for running the suite with
// each claim strategy.
func MySQLWith(cfg mysql.Config) func(t testing.TB) Target {
	return func(t testing.TB) Target {
		t.Helper()
		open := server(t, "MySQL", MySQLEnv, exampleMySQLDSN, mysql.Open)
		return newTarget(t, "mysql", open, cfg)
	}
}

// MySQLWithSession is MySQLWith for pools whose every connection first sets
// the session variables of vars (name to SQL expression, such as
// "sql_mode" to "CONCAT(@@sql_mode, ',SIMULTANEOUS_ASSIGNMENT')"), for
// running the suite under another server configuration.
func MySQLWithSession(cfg mysql.Config, vars map[string]string) func(t testing.TB) Target {
	return func(t testing.TB) Target {
		t.Helper()
		open := server(t, "MySQL", MySQLEnv, exampleMySQLDSN, func(dsn string) (*sql.DB, error) {
			sep := "?"
			if strings.Contains(dsn[strings.LastIndexByte(dsn, '/')+1:], "?") {
				sep = "&"
			}
			for _, name := range slices.Sorted(maps.Keys(vars)) {
				dsn += sep + name + "=" + url.QueryEscape(vars[name])
				sep = "&"
			}
			return mysql.Open(dsn)
		})
		return newTarget(t, "mysql", open, cfg)
	}
}

// storeFactory returns the constructor of dialect's stores, which builds
// MySQL stores with mysqlCfg and the given table.
func storeFactory(dialect string, mysqlCfg mysql.Config) func(table string) (Store, error) {
	return orderedFactory(dialect, mysqlCfg, nil)
}

// orderedFactory is storeFactory for stores with ordering o.
func orderedFactory(dialect string, mysqlCfg mysql.Config, o core.Ordering) func(table string) (Store, error) {
	switch dialect {
	case "sqlite":
		return func(table string) (Store, error) { return asStore(sqlite.New(sqlite.Config{Table: table, Ordered: o})) }
	case "postgres":
		return func(table string) (Store, error) {
			return asStore(postgres.New(postgres.Config{Table: table, Ordered: o}))
		}
	case "mysql":
		return func(table string) (Store, error) {
			c := mysqlCfg
			c.Table, c.Ordered = table, o
			return asStore(mysql.New(c))
		}
	}
	panic("testdb: unknown dialect " + dialect)
}

// asStore returns s as a Store, and a nil interface (not a typed nil) with
// err.
func asStore[S Store](s S, err error) (Store, error) {
	if err != nil {
		return nil, err
	}
	return s, nil
}

func newTarget(t testing.TB, name string, open func(testing.TB) *sql.DB, mysqlCfg mysql.Config) Target {
	t.Helper()
	newStore := storeFactory(name, mysqlCfg)
	table := UniqueName("outbox")
	st, err := newStore(table)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	ordered, err := orderedFactory(name, mysqlCfg, storetest.Ordering)(table)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	return prepare(t, Target{Name: name, DB: open(t), Store: st, Reopen: open, NewStore: newStore, Ordered: ordered})
}
