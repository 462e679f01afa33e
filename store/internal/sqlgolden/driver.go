package sqlgolden

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"strings"
	"sync"
	"time"
)

// recorder is a database/sql driver that runs nothing: it records the text
// of every statement it is given and answers with just enough for the store
// to go on to its next statement (one pending row for a claim's SELECT, one
// affected row for every write, and a zero for the index look-up of MySQL's
// CreateSchema, so that the golden DDL shows the index it adds to an older
// table).
type recorder struct {
	mu  sync.Mutex
	log []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, s)
}

// take returns the statements recorded since the last call.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.log
	r.log = nil
	return out
}

// Connect implements driver.Connector.
func (r *recorder) Connect(context.Context) (driver.Conn, error) { return &conn{r}, nil }

// Driver implements driver.Connector.
func (r *recorder) Driver() driver.Driver { return nil }

// open returns a pool on a new recorder.
func open() (*sql.DB, *recorder) {
	r := &recorder{}
	db := sql.OpenDB(r)
	db.SetMaxOpenConns(1)
	return db, r
}

type conn struct{ r *recorder }

var errNoPrepare = errors.New("sqlgolden: statements are not prepared")

func (c *conn) Prepare(string) (driver.Stmt, error) { return nil, errNoPrepare }
func (c *conn) Close() error                        { return nil }
func (c *conn) Begin() (driver.Tx, error)           { return c.BeginTx(context.Background(), driver.TxOptions{}) }

func (c *conn) BeginTx(_ context.Context, opts driver.TxOptions) (driver.Tx, error) {
	level := ""
	if opts.Isolation != driver.IsolationLevel(sql.LevelDefault) {
		level = " ISOLATION LEVEL " + strings.ToUpper(sql.IsolationLevel(opts.Isolation).String())
	}
	c.r.add("BEGIN" + level)
	return tx{c.r}, nil
}

// CheckNamedValue accepts every argument: nothing is sent anywhere.
func (c *conn) CheckNamedValue(*driver.NamedValue) error { return nil }

func (c *conn) ExecContext(_ context.Context, query string, _ []driver.NamedValue) (driver.Result, error) {
	c.r.add(query)
	return result{}, nil
}

// result is every statement's result: one row affected, and insert id 1
// (which MySQL's ordered DONE batch reads as "a moved key has events
// waiting", so that its promotion is recorded too).
type result struct{}

func (result) LastInsertId() (int64, error) { return 1, nil }
func (result) RowsAffected() (int64, error) { return 1, nil }

func (c *conn) QueryContext(_ context.Context, query string, _ []driver.NamedValue) (driver.Rows, error) {
	c.r.add(query)
	switch {
	case strings.HasPrefix(query, "SELECT event_id, event_type"):
		return &rows{cols: eventColumns, vals: [][]driver.Value{pendingRow()}}, nil
	case strings.HasPrefix(query, "SELECT event_id, aggregate_type, aggregate_id, seq"):
		return &rows{cols: []string{"event_id", "aggregate_type", "aggregate_id", "seq"}, vals: [][]driver.Value{{"e-1", "Order", "o-1", int64(1)}}}, nil
	case strings.HasPrefix(query, "SELECT aggregate_type, aggregate_id, seq"):
		return &rows{cols: []string{"aggregate_type", "aggregate_id", "seq"}, vals: [][]driver.Value{{"Order", "o-1", int64(1)}}}, nil
	case strings.Contains(query, "RETURNING last_seq") || strings.HasPrefix(query, "SELECT last_seq"):
		// A new key: the write's first event is its head.
		return &rows{cols: []string{"last_seq", "done_seq"}, vals: [][]driver.Value{{int64(2), int64(0)}}}, nil
	case strings.HasPrefix(query, "UPDATE") && strings.Contains(query, "RETURNING event_id, event_type"):
		return &rows{cols: eventColumns, vals: [][]driver.Value{pendingRow()}}, nil
	case strings.HasPrefix(query, "SELECT COUNT(*) FROM information_schema"):
		return &rows{cols: []string{"n"}, vals: [][]driver.Value{{int64(0)}}}, nil
	case isLockQuery(query):
		return &rows{cols: []string{"ok"}, vals: [][]driver.Value{{true}}}, nil
	}
	return &rows{}, nil
}

// isLockQuery reports a statement of the named locks (core.Locker), which
// the recorder answers as taken, held and released, so that all three show.
func isLockQuery(query string) bool {
	return strings.Contains(query, "advisory") || strings.Contains(query, "_LOCK(")
}

type tx struct{ r *recorder }

func (t tx) Commit() error   { t.r.add("COMMIT"); return nil }
func (t tx) Rollback() error { t.r.add("ROLLBACK"); return nil }

var eventColumns = strings.Split("event_id,event_type,aggregate_type,aggregate_id,tenant_id,payload,headers,"+
	"status,attempts,available_at,created_at,done_at,last_error,locked_by,locked_at,seq", ",")

func pendingRow() []driver.Value {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return []driver.Value{"e-1", "Tested", "Global", nil, nil, []byte(`{}`), nil,
		int64(0), int64(0), at, at, nil, nil, nil, nil, nil}
}

type rows struct {
	cols []string
	vals [][]driver.Value
}

func (r *rows) Columns() []string { return r.cols }
func (r *rows) Close() error      { return nil }

func (r *rows) Next(dest []driver.Value) error {
	if len(r.vals) == 0 {
		return io.EOF
	}
	copy(dest, r.vals[0])
	r.vals = r.vals[1:]
	return nil
}
