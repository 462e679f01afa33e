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
// last stmtCacheSize distinct statements, Exec and Query alike.
// database/sql with modernc.org/sqlite otherwise parses every statement on
// every call: in a write-heavy workload (the W1 benchmark) a fifth of the
// process's CPU went to sqlite3_prepare_v2, and an ordered write, whose key
// upsert returns the key's sequence number, spent ~46 µs parsing it.
//
// A query's statement stays busy while its rows are open: a statement of the
// same text run meanwhile on the same connection (a query inside the loop
// over another's rows) runs uncached, and a busy statement evicted from the
// cache is closed when its rows are.

// cachingConnector opens connections that cache their statements.
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

// cachingConn is a connection whose ExecContext and QueryContext run cached
// prepared statements. database/sql uses a connection, and closes the rows
// read on it, under the connection's lock, so it needs no lock of its own.
type cachingConn struct {
	sqliteConn
	stmts map[string]*list.Element // query -> element of lru
	lru   *list.List               // *cachedStmt, most recently used first
}

type cachedStmt struct {
	query   string
	stmt    cachedDriverStmt
	busy    bool // its rows are open
	evicted bool // out of the cache: closed when its rows are
}

type cachedDriverStmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
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
	cs, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if cs.busy {
		return c.sqliteConn.ExecContext(ctx, query, args)
	}
	return cs.stmt.ExecContext(ctx, args)
}

// QueryContext implements driver.QueryerContext with a cached statement,
// busy until its rows are closed.
func (c *cachingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	cs, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if cs.busy {
		return c.sqliteConn.QueryContext(ctx, query, args)
	}
	rows, err := cs.stmt.QueryContext(ctx, args)
	if err != nil {
		return nil, err
	}
	cs.busy = true
	return &cachedRows{Rows: rows, cs: cs}, nil
}

// cachedRows frees its statement for the next call when closed.
type cachedRows struct {
	driver.Rows
	cs *cachedStmt // nil once closed
}

func (r *cachedRows) Close() error {
	if r.cs == nil {
		return nil
	}
	err := r.Rows.Close()
	cs := r.cs
	r.cs, cs.busy = nil, false
	if cs.evicted {
		err = errors.Join(err, cs.stmt.Close())
	}
	return err
}

// stmt returns the cached statement for query, preparing it on a miss and
// closing the least recently used one when the cache is full.
func (c *cachingConn) stmt(ctx context.Context, query string) (*cachedStmt, error) {
	if e, ok := c.stmts[query]; ok {
		c.lru.MoveToFront(e)
		return e.Value.(*cachedStmt), nil
	}
	s, err := c.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	st, ok := s.(cachedDriverStmt)
	if !ok {
		_ = s.Close()
		return nil, errors.New("sqlite: the driver's statement lacks ExecContext or QueryContext")
	}
	if c.lru.Len() >= stmtCacheSize {
		oldest := c.lru.Back()
		cs := c.lru.Remove(oldest).(*cachedStmt)
		delete(c.stmts, cs.query)
		if cs.busy {
			cs.evicted = true
		} else {
			_ = cs.stmt.Close()
		}
	}
	cs := &cachedStmt{query: query, stmt: st}
	c.stmts[query] = c.lru.PushFront(cs)
	return cs, nil
}

// Close closes the cached statements, then the connection.
func (c *cachingConn) Close() error {
	var errs []error
	for e := c.lru.Front(); e != nil; e = e.Next() {
		errs = append(errs, e.Value.(*cachedStmt).stmt.Close())
	}
	c.lru.Init()
	clear(c.stmts)
	return errors.Join(append(errs, c.sqliteConn.Close())...)
}
