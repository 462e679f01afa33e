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
	"github.com/outboxkit/outbox/internal/dsn"
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
// SQLite, sqlite.Open) takes. It reads the forms every Open of the library
// reads (package internal/dsn).
func parseDSN(s string) (dialect, conn string, err error) {
	if s == "" {
		return "", "", usagef("no database: set --dsn or OUTBOX_DSN (%s)", dsn.Forms)
	}
	d, err := dsn.Parse(s)
	if err != nil {
		return "", "", usagef("--dsn %v", err)
	}
	return string(d.Dialect), d.Conn, nil
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
			"and the database the DSN names; 'outboxctl migrate up' creates it ('outboxctl schema' prints its DDL)", table)
	}
	return ""
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
			if !strings.Contains(strings.ToLower(a.g.dsn), ":") {
				// A DSN without a scheme reads as a SQLite path: say so, in
				// case it was meant as another database's.
				serr = fmt.Errorf("%w (a --dsn without a scheme is a SQLite file path; the forms are %s)", serr, dsn.Forms)
			}
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
