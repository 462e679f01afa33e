package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/store"
	"github.com/outboxkit/outbox/store/migrations"
	"github.com/outboxkit/outbox/store/mysql"
	"github.com/outboxkit/outbox/store/postgres"
	"github.com/outboxkit/outbox/store/sqlite"
)

// Dialect names.
const (
	dialectPostgres = "postgres"
	dialectMySQL    = "mysql"
	dialectSQLite   = "sqlite"
)

// parseDSN returns the dialect a DSN names and what its driver (or, for
// SQLite, sqlite.Open) takes.
func parseDSN(dsn string) (dialect, conn string, err error) {
	lower := strings.ToLower(dsn)
	switch {
	case dsn == "":
		return "", "", usagef("no database: set --dsn or OUTBOX_DSN")
	case strings.HasPrefix(lower, "postgres://"), strings.HasPrefix(lower, "postgresql://"):
		return dialectPostgres, dsn, nil
	case strings.HasPrefix(lower, "mysql://"):
		conn = dsn[len("mysql://"):]
		if conn == "" {
			return "", "", usagef("mysql DSN is empty after mysql://")
		}
		if fixed, ok := mysqlAddress(conn); !ok {
			return "", "", usagef("mysql DSN %q: go-sql-driver/mysql wants the address as tcp(host:port) or unix(/path), e.g. mysql://%s",
				redact(dsn), redact(fixed))
		}
		return dialectMySQL, conn, nil
	case strings.HasPrefix(lower, "sqlite://"):
		conn = dsn[len("sqlite://"):]
	case strings.HasPrefix(lower, "file:"):
		conn = strings.TrimPrefix(dsn[len("file:"):], "//") // file:///abs/path
	default:
		return "", "", usagef("DSN %q: unknown scheme; want postgres://, postgresql://, mysql://, sqlite:// or file:",
			redact(dsn))
	}
	if strings.ContainsAny(conn, "?#") {
		return "", "", usagef("sqlite DSN %q: parameters are not supported; outboxctl sets the pragmas it needs", dsn)
	}
	if conn == "" {
		return "", "", usagef("sqlite DSN %q has no path", dsn)
	}
	return dialectSQLite, conn, nil
}

// mysqlAddress reports whether the address of a go-sql-driver/mysql DSN
// ([user[:pass]@][net(addr)]/db) names its protocol, and if not, the DSN
// with the address wrapped in tcp(...). An empty address (the driver's
// default, 127.0.0.1:3306) is fine.
func mysqlAddress(conn string) (fixed string, ok bool) {
	at := strings.LastIndex(conn, "@")
	rest := conn[at+1:]
	slash := strings.IndexByte(rest, '/')
	if paren := strings.IndexByte(rest, '('); paren >= 0 && (slash < 0 || paren < slash) {
		return conn, true // net(addr): the path of unix(/path) may hold slashes
	}
	if slash <= 0 {
		return conn, true // the default address, or no database part (the driver says what is wrong)
	}
	return conn[:at+1] + "tcp(" + rest[:slash] + ")" + rest[slash:], false
}

// hint returns advice for an error a user can fix on the command line, or
// "".
func hint(err error, table string) string {
	var pgErr *pgconn.PgError
	var myErr *mysqldriver.MySQLError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42P01",
		errors.As(err, &myErr) && myErr.Number == 1146,
		strings.Contains(err.Error(), "no such table"):
		return fmt.Sprintf("the table %q does not exist in this database: check --table (or $OUTBOX_TABLE) "+
			"and the database the DSN names; 'outboxctl schema' prints the DDL that creates it", table)
	}
	return ""
}

// redact hides a password in a DSN for error messages.
func redact(dsn string) string {
	at := strings.LastIndex(dsn, "@")
	if at < 0 {
		return dsn
	}
	start := strings.Index(dsn, "://") + 3
	if start < 3 {
		start = 0
	}
	if colon := strings.Index(dsn[start:at], ":"); colon >= 0 {
		return dsn[:start+colon+1] + "xxx" + dsn[at:]
	}
	return dsn
}

// opsStore is what outboxctl needs of a store.
type opsStore interface {
	store.SchemaManager
	core.Inspector
	migrations.Source
}

// newStore returns the store of dialect for table; it connects to nothing.
func newStore(dialect, table string) (opsStore, error) {
	var (
		st  opsStore
		err error
	)
	switch dialect {
	case dialectPostgres:
		st, err = postgres.New(postgres.Config{Table: table})
	case dialectMySQL:
		st, err = mysql.New(mysql.Config{Table: table})
	case dialectSQLite:
		st, err = sqlite.New(sqlite.Config{Table: table})
	default:
		return nil, usagef("unknown database %q; want postgres, mysql or sqlite", dialect)
	}
	if err != nil {
		return nil, &usageError{msg: err.Error()}
	}
	return st, nil
}

// session is an open database with the store and SQL helpers of its dialect.
type session struct {
	db      *sql.DB
	store   opsStore
	dialect string
	cancel  context.CancelFunc
}

// Close closes the pool and ends the --timeout deadline.
func (s *session) Close() error {
	err := s.db.Close()
	s.cancel()
	return err
}

// connect opens the database of --dsn, checks that it answers, and returns
// a session on --table, with the context the command runs in: ctx bounded
// by --timeout.
func (a *app) connect(ctx context.Context) (context.Context, *session, error) {
	if a.g.timeout < 0 {
		return nil, nil, usagef("--timeout %s is negative", a.g.timeout)
	}
	cancel := context.CancelFunc(func() {})
	if a.g.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, a.g.timeout)
	}
	s, err := a.open(ctx)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	s.cancel = cancel
	return ctx, s, nil
}

func (a *app) open(ctx context.Context) (*session, error) {
	dialect, conn, err := parseDSN(a.g.dsn)
	if err != nil {
		return nil, err
	}
	st, err := newStore(dialect, a.g.table)
	if err != nil {
		return nil, err
	}
	var db *sql.DB
	switch dialect {
	case dialectPostgres:
		db, err = postgres.Open(conn)
	case dialectMySQL:
		db, err = mysql.Open(conn)
	case dialectSQLite:
		// sqlite.Open would create a missing file: a typo must not look
		// like an empty outbox.
		if _, serr := os.Stat(conn); serr != nil {
			return nil, fmt.Errorf("sqlite database: %w", serr)
		}
		db, err = sqlite.Open(conn)
	}
	if err != nil {
		return nil, &usageError{msg: err.Error()}
	}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("connect to %s: %w", dialect, err)
	}
	return &session{db: db, store: st, dialect: dialect}, nil
}
