package sqlite

import (
	"container/list"
	"context"
	"database/sql/driver"
	"errors"
)

// stmtCacheSize is how many statements each connection keeps prepared.
const stmtCacheSize = 64

// A pool from Open keeps, on each connection, the prepared statements of its
// last stmtCacheSize distinct Exec statements. database/sql with
// modernc.org/sqlite otherwise parses every statement on every call: in a
// write-heavy workload (the W1 benchmark) a fifth of the process's CPU went
// to sqlite3_prepare_v2. Only Exec is cached: a query's statement stays busy
// while its rows are read, and a second query of the same text on the same
// connection could then not use it.

// cachingConnector opens connections that cache their Exec statements.
type cachingConnector struct{ driver.Connector }

func (c cachingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return newCachingConn(conn)
}

// The interfaces of a modernc.org/sqlite connection that database/sql uses;
// cachingConn forwards them.
type sqliteConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// cachingConn is a connection whose ExecContext runs cached prepared
// statements. database/sql uses a connection from one goroutine at a time,
// so it needs no lock.
type cachingConn struct {
	sqliteConn
	stmts map[string]*list.Element // query -> element of lru
	lru   *list.List               // *cachedStmt, most recently used first
}

type cachedStmt struct {
	query string
	stmt  driver.StmtExecContext
	close func() error
}

func newCachingConn(conn driver.Conn) (driver.Conn, error) {
	sc, ok := conn.(sqliteConn)
	if !ok {
		_ = conn.Close()
		return nil, errors.New("sqlite: the driver's connection lacks an interface the statement cache needs")
	}
	return &cachingConn{sqliteConn: sc, stmts: make(map[string]*list.Element), lru: list.New()}, nil
}

// ExecContext implements driver.ExecerContext with a cached statement.
func (c *cachingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	st, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args)
}

// stmt returns the cached statement for query, preparing it on a miss and
// closing the least recently used one when the cache is full.
func (c *cachingConn) stmt(ctx context.Context, query string) (driver.StmtExecContext, error) {
	if e, ok := c.stmts[query]; ok {
		c.lru.MoveToFront(e)
		return e.Value.(*cachedStmt).stmt, nil
	}
	s, err := c.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	st, ok := s.(driver.StmtExecContext)
	if !ok {
		_ = s.Close()
		return nil, errors.New("sqlite: the driver's statement lacks ExecContext")
	}
	if c.lru.Len() >= stmtCacheSize {
		oldest := c.lru.Back()
		cs := c.lru.Remove(oldest).(*cachedStmt)
		delete(c.stmts, cs.query)
		_ = cs.close()
	}
	c.stmts[query] = c.lru.PushFront(&cachedStmt{query: query, stmt: st, close: s.Close})
	return st, nil
}

// Close closes the cached statements, then the connection.
func (c *cachingConn) Close() error {
	var errs []error
	for e := c.lru.Front(); e != nil; e = e.Next() {
		errs = append(errs, e.Value.(*cachedStmt).close())
	}
	c.lru.Init()
	clear(c.stmts)
	return errors.Join(append(errs, c.sqliteConn.Close())...)
}
