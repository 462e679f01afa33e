package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxkit/outbox/internal/pgxlazy"
	"github.com/outboxkit/outbox/internal/writectx"
)

// The pools Open returns run on pgx's database/sql driver
// (github.com/jackc/pgx/v5/stdlib), with one difference: their
// transactions begin as pgxtx's do (see package pgxlazy). BeginTx sends
// nothing; the transaction's first statement goes to the server in one
// round trip with its BEGIN, and the outbox's INSERT of events whose ids
// the library generated is sent with the transaction's next statement or
// its COMMIT. A business statement, an outbox write and COMMIT then cost
// two round trips instead of four.
//
// Statements and their results are pgx's driver's own: a query's rows come
// from pgx's *stdlib.Conn, as with sql.Open("pgx", dsn). A transaction
// whose first statement is a query, a statement without arguments or a
// prepared statement sends its BEGIN on its own first. A driver connection
// is not a *stdlib.Conn; sql.Conn.Raw hands code that needs pgx's
// connection one with its method Conn() *pgx.Conn.

// lazyDriver is the driver of the pools Open returns (what DB.Driver
// returns).
type lazyDriver struct{}

// Open opens a connection on dsn, for code that calls DB.Driver().Open;
// the pools themselves connect through their connector.
func (lazyDriver) Open(dsn string) (driver.Conn, error) {
	dc, err := stdlib.GetDefaultDriver().Open(dsn)
	if err != nil {
		return nil, err
	}
	return newConn(dc)
}

// HoldsWrites tells package txctx that the transactions of this driver's
// connections hold the outbox writes marked for them.
func (lazyDriver) HoldsWrites() {}

var (
	_ writectx.Driver = lazyDriver{}
	_ writectx.Driver = (*conn)(nil)
)

// connector connects through pgx's connector.
type connector struct{ base driver.Connector }

func (c connector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return newConn(dc)
}

func (connector) Driver() driver.Driver { return lazyDriver{} }

func newConn(dc driver.Conn) (driver.Conn, error) {
	sc, ok := dc.(*stdlib.Conn)
	if !ok {
		_ = dc.Close()
		return nil, fmt.Errorf("postgres: pgx's driver returned a %T, not a *stdlib.Conn", dc)
	}
	return &conn{sc: sc}, nil
}

// conn is pgx's driver connection whose transactions begin with their
// first statement. database/sql uses a connection from one goroutine at a
// time, so its fields need no lock.
type conn struct {
	sc *stdlib.Conn
	tx *pgxlazy.Tx // the transaction database/sql began, until it ends
}

var (
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
	_ driver.NamedValueChecker  = (*conn)(nil)
	_ driver.Pinger             = (*conn)(nil)
)

// HoldsWrites tells package txctx, on a *sql.Conn, that this connection's
// transactions hold the outbox writes marked for them.
func (c *conn) HoldsWrites() {}

// Conn returns pgx's connection, for code that has the driver connection
// from sql.Conn.Raw.
func (c *conn) Conn() *pgx.Conn { return c.sc.Conn() }

func (c *conn) Close() error                                { return c.sc.Close() }
func (c *conn) Ping(ctx context.Context) error              { return c.sc.Ping(ctx) }
func (c *conn) CheckNamedValue(nv *driver.NamedValue) error { return c.sc.CheckNamedValue(nv) }

func (c *conn) Begin() (driver.Tx, error) { return c.BeginTx(context.Background(), driver.TxOptions{}) }

// BeginTx begins a transaction that sends its BEGIN with its first
// statement.
func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if c.sc.Conn().IsClosed() {
		return nil, driver.ErrBadConn
	}
	var o pgx.TxOptions
	switch sql.IsolationLevel(opts.Isolation) {
	case sql.LevelDefault:
	case sql.LevelReadUncommitted:
		o.IsoLevel = pgx.ReadUncommitted
	case sql.LevelReadCommitted:
		o.IsoLevel = pgx.ReadCommitted
	case sql.LevelRepeatableRead, sql.LevelSnapshot:
		o.IsoLevel = pgx.RepeatableRead
	case sql.LevelSerializable:
		o.IsoLevel = pgx.Serializable
	default:
		return nil, fmt.Errorf("postgres: isolation level %v is not supported", sql.IsolationLevel(opts.Isolation))
	}
	if opts.ReadOnly {
		o.AccessMode = pgx.ReadOnly
	}
	c.tx = pgxlazy.New(c.sc.Conn(), o, true)
	return connTx{c: c, ctx: ctx}, nil
}

// ExecContext runs a statement; in a transaction, with its BEGIN if it is
// the first, or holds it if it is a marked outbox write.
func (c *conn) ExecContext(ctx context.Context, query string, named []driver.NamedValue) (driver.Result, error) {
	if c.tx == nil {
		return c.sc.ExecContext(ctx, query, named)
	}
	tag, held, err := pgxlazy.ExecMarked(ctx, c.tx, query, values(named))
	switch {
	case err != nil:
		return nil, badConn(err)
	case held:
		return pgxlazy.HeldResult{}, nil
	}
	return driver.RowsAffected(tag.RowsAffected()), nil
}

// QueryContext runs a query; in a transaction, once its BEGIN and the
// writes it holds have been sent.
func (c *conn) QueryContext(ctx context.Context, query string, named []driver.NamedValue) (driver.Rows, error) {
	if err := c.ready(ctx); err != nil {
		return nil, err
	}
	return c.sc.QueryContext(ctx, query, named)
}

// ready sends the BEGIN and the held writes of the transaction, if any,
// for a statement that goes to pgx's connection as it is.
func (c *conn) ready(ctx context.Context) error {
	if c.tx == nil {
		return nil
	}
	return badConn(c.tx.Ready(ctx))
}

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

// PrepareContext prepares a statement on the connection (outside any
// transaction: a prepared statement belongs to the connection), whose executions
// in a transaction come after its BEGIN.
func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	ds, err := c.sc.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &stmt{Stmt: ds.(*stdlib.Stmt), c: c}, nil
}

// ResetSession readies the connection for its next user: a transaction
// has always ended by then.
func (c *conn) ResetSession(ctx context.Context) error {
	c.tx = nil
	return c.sc.ResetSession(ctx)
}

// badConn is err as pgx's driver returns it: driver.ErrBadConn when
// nothing was sent, so that database/sql discards the connection.
func badConn(err error) error {
	if err != nil && pgconn.SafeToRetry(err) {
		return driver.ErrBadConn
	}
	return err
}

// values are the arguments as pgx's driver passes them (its
// CheckNamedValue takes every value as it is).
func values(named []driver.NamedValue) []any {
	args := make([]any, len(named))
	for i, nv := range named {
		args[i] = nv.Value
	}
	return args
}

// stmt is pgx's prepared statement, run after its transaction's BEGIN.
type stmt struct {
	*stdlib.Stmt
	c *conn
}

func (s *stmt) ExecContext(ctx context.Context, named []driver.NamedValue) (driver.Result, error) {
	if err := s.c.ready(ctx); err != nil {
		return nil, err
	}
	return s.Stmt.ExecContext(ctx, named)
}

func (s *stmt) QueryContext(ctx context.Context, named []driver.NamedValue) (driver.Rows, error) {
	if err := s.c.ready(ctx); err != nil {
		return nil, err
	}
	return s.Stmt.QueryContext(ctx, named)
}

// connTx ends the connection's transaction with the context it began
// with, as pgx's driver does.
type connTx struct {
	c   *conn
	ctx context.Context
}

// Commit commits, the held writes sent with the COMMIT.
func (t connTx) Commit() error {
	tx := t.c.tx
	t.c.tx = nil
	return tx.Commit(t.ctx)
}

// Rollback rolls back; the held writes are dropped unsent, and a
// transaction that sent nothing sends nothing.
func (t connTx) Rollback() error {
	tx := t.c.tx
	t.c.tx = nil
	if err := tx.Rollback(t.ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return err
	}
	return nil
}

// pgxConn returns the pgx connection under a driver connection of pgx's
// driver or of Open's.
func pgxConn(dc any) (*pgx.Conn, bool) {
	c, ok := dc.(interface{ Conn() *pgx.Conn })
	if !ok {
		return nil, false
	}
	return c.Conn(), true
}
