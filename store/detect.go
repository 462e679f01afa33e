package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/dbkind"
	"github.com/outboxkit/outbox/store/mysql"
	"github.com/outboxkit/outbox/store/postgres"
	"github.com/outboxkit/outbox/store/sqlite"
)

// ErrUnknownDatabase is returned by Detect for a handle that is neither
// PostgreSQL, MySQL/MariaDB/TiDB nor SQLite.
var ErrUnknownDatabase = errors.New("outbox: unknown database")

// detectTimeout bounds the queries Detect sends to the server.
const detectTimeout = 10 * time.Second

// Detect returns the outbox store for the database behind db, on table
// ("" means "outbox_event"). The result is a *postgres.Store, *mysql.Store or
// *sqlite.Store; it creates nothing (call its CreateSchema for that).
//
// The driver decides: pgx's stdlib driver is PostgreSQL, go-sql-driver/mysql
// is MySQL, modernc.org/sqlite is SQLite. For MySQL, Detect asks the server
// for its version to choose the claim strategy (mysql.StrategyFor). A driver
// it does not know (a wrapping driver, for instance) is identified by asking
// the server. Detect returns an error matching core.ErrInvalid for a bad
// table name, and one matching ErrUnknownDatabase, naming the driver type,
// when the database is none of the three. It is DetectContext with a
// background context and a 10 s limit on the queries it sends.
func Detect(db *sql.DB, table string) (core.Store, error) {
	ctx, cancel := context.WithTimeout(context.Background(), detectTimeout)
	defer cancel()
	return DetectContext(ctx, db, table)
}

// DetectContext is Detect with a context for the queries it may send.
func DetectContext(ctx context.Context, db *sql.DB, table string) (core.Store, error) {
	// The same detection as the inbox's (internal/dbkind).
	switch dbkind.Of(db) {
	case dbkind.Postgres:
		return asStore(postgres.New(postgres.Config{Table: table}))
	case dbkind.MySQL:
		return newMySQL(ctx, db, table)
	case dbkind.SQLite:
		return asStore(sqlite.New(sqlite.Config{Table: table}))
	default:
		return detectByServer(ctx, db, table, dbkind.TypeName(db.Driver()))
	}
}

func newMySQL(ctx context.Context, db *sql.DB, table string) (core.Store, error) {
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return nil, fmt.Errorf("detect store: mysql version: %w", err)
	}
	return asStore(mysql.New(mysql.Config{Table: table, Claim: mysql.StrategyFor(version)}))
}

// asStore returns s as a core.Store, and a nil interface (not a typed nil
// pointer) with err.
func asStore[S core.Store](s S, err error) (core.Store, error) {
	if err != nil {
		return nil, err
	}
	return s, nil
}

// detectByServer identifies the database behind an unknown driver by what it
// answers: PostgreSQL's version() names it, MySQL has @@version_comment, and
// SQLite has sqlite_version().
func detectByServer(ctx context.Context, db *sql.DB, table, driverType string) (core.Store, error) {
	var version string
	err := db.QueryRowContext(ctx, "SELECT version()").Scan(&version)
	switch {
	case err == nil && strings.HasPrefix(version, "PostgreSQL"):
		return asStore(postgres.New(postgres.Config{Table: table}))
	case err == nil:
		var comment string
		if err := db.QueryRowContext(ctx, "SELECT @@version_comment").Scan(&comment); err == nil {
			return asStore(mysql.New(mysql.Config{Table: table, Claim: mysql.StrategyFor(version)}))
		}
	default:
		if ctx.Err() != nil {
			return nil, fmt.Errorf("detect store: driver %s: %w", driverType, err)
		}
		if err := db.QueryRowContext(ctx, "SELECT sqlite_version()").Scan(&version); err == nil {
			return asStore(sqlite.New(sqlite.Config{Table: table}))
		}
	}
	return nil, fmt.Errorf("detect store: driver %s, server version %q: %w (supported: PostgreSQL, MySQL 8, MariaDB, TiDB, SQLite)",
		driverType, version, ErrUnknownDatabase)
}
