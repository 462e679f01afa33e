package main

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/stdlib"
)

// Statement tracing (-w5-trace): the W5 processes open their pools through
// a database/sql driver wrapper that times, per transaction, every statement
// from the moment the client sends it until its result is read (rows
// closed), and the client's time between statements, during which the
// transaction holds its locks without the server doing anything for it
// ("idle in transaction"). Each committed or rolled-back transaction is one
// record; the parent sums the records of both processes by the kind of
// transaction (its first statement after BEGIN).

// w5TxTrace is one traced transaction.
type w5TxTrace struct {
	Steps []w5Step `json:"steps"`
	Ended bool     `json:"committed"` // false: rolled back
}

// w5Step is one statement of a transaction (BEGIN and COMMIT included):
// its kind (its first words, table names replaced), the client's time since
// the previous step ended, and its own duration, in microseconds.
type w5Step struct {
	Stmt string `json:"q"`
	Gap  int64  `json:"gap_us"`
	Took int64  `json:"us"`
}

// w5Tracer collects the transactions of one process.
type w5Tracer struct {
	mu  sync.Mutex
	txs []w5TxTrace
}

func (t *w5Tracer) add(tx w5TxTrace) {
	t.mu.Lock()
	t.txs = append(t.txs, tx)
	t.mu.Unlock()
}

func (t *w5Tracer) take() []w5TxTrace {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := t.txs
	t.txs = nil
	return out
}

// openTraced opens tg's database like tg.open, through the tracing wrapper.
func openTraced(tg *target, dsn string, conns int, tr *w5Tracer) (*sql.DB, error) {
	var inner driver.Connector
	switch tg.name {
	case "postgres":
		c, err := stdlib.GetDefaultDriver().(driver.DriverContext).OpenConnector(dsn)
		if err != nil {
			return nil, err
		}
		inner = c
	case "mysql":
		// As store/mysql.Open configures it.
		cfg, err := mysqldrv.ParseDSN(dsn)
		if err != nil {
			return nil, err
		}
		cfg.ParseTime, cfg.Loc = true, time.UTC
		if !strings.Contains(dsn, "interpolateParams") && !strings.Contains(dsn, "charset") {
			cfg.InterpolateParams = true
		}
		c, err := mysqldrv.NewConnector(cfg)
		if err != nil {
			return nil, err
		}
		inner = c
	default:
		return nil, fmt.Errorf("-w5-trace: not on %s", tg.name)
	}
	return pooled(sql.OpenDB(traceConnector{inner, tr}), conns), nil
}

type traceConnector struct {
	inner driver.Connector
	tr    *w5Tracer
}

func (c traceConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &traceConn{Conn: conn, tr: c.tr}, nil
}

func (c traceConnector) Driver() driver.Driver { return c.inner.Driver() }

// traceConn wraps a driver connection; database/sql uses one connection
// from one goroutine at a time, so its transaction needs no lock.
type traceConn struct {
	driver.Conn
	tr      *w5Tracer
	tx      *w5TxTrace
	lastEnd time.Time
}

func (c *traceConn) step(q string, start time.Time) {
	if c.tx == nil {
		return
	}
	end := time.Now()
	c.tx.Steps = append(c.tx.Steps, w5Step{Stmt: stmt(q), Gap: start.Sub(c.lastEnd).Microseconds(), Took: end.Sub(start).Microseconds()})
	c.lastEnd = end
}

func (c *traceConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	start := time.Now()
	tx, err := c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	c.tx, c.lastEnd = &w5TxTrace{}, start
	c.step("begin", start)
	return &traceTx{Tx: tx, c: c}, nil
}

func (c *traceConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	ex, ok := c.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	start := time.Now()
	res, err := ex.ExecContext(ctx, q, args)
	c.step(q, start)
	return res, err
}

func (c *traceConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	qu, ok := c.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	start := time.Now()
	rows, err := qu.QueryContext(ctx, q, args)
	if err != nil {
		c.step(q, start)
		return nil, err
	}
	return &traceRows{Rows: rows, done: func() { c.step(q, start) }}, nil
}

func (c *traceConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, q)
	}
	return c.Conn.Prepare(q)
}

func (c *traceConn) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := c.Conn.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (c *traceConn) Ping(ctx context.Context) error {
	if p, ok := c.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *traceConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *traceConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

type traceTx struct {
	driver.Tx
	c *traceConn
}

func (t *traceTx) end(q string, fn func() error) error {
	start := time.Now()
	err := fn()
	t.c.step(q, start)
	if t.c.tx != nil {
		t.c.tx.Ended = q == "commit" && err == nil
		t.c.tr.add(*t.c.tx)
		t.c.tx = nil
	}
	return err
}

func (t *traceTx) Commit() error   { return t.end("commit", t.Tx.Commit) }
func (t *traceTx) Rollback() error { return t.end("rollback", t.Tx.Rollback) }

type traceRows struct {
	driver.Rows
	done   func()
	closed bool
}

func (r *traceRows) Close() error {
	err := r.Rows.Close()
	if !r.closed {
		r.closed = true
		r.done()
	}
	return err
}

// printW5Trace prints the traced transactions of a run, by kind (the first
// statement after BEGIN), the most time-consuming kinds first: per step its
// count, duration and the client's gap before it, and per kind how long it
// ran after its first statement that locks a key row, until it ended.
func printW5Trace(txs []w5TxTrace) {
	type stepStats struct {
		took, gap []time.Duration
	}
	type kind struct {
		name      string
		n         int
		rolled    int
		total     []time.Duration
		gaps      []time.Duration // the client's time between statements, per transaction
		keyHeld   []time.Duration // from the end of the first key-locking statement to the end
		steps     map[string]*stepStats
		order     []string
		totalTime time.Duration
	}
	kinds := map[string]*kind{}
	for _, tx := range txs {
		if len(tx.Steps) < 2 {
			continue
		}
		name := tx.Steps[1].Stmt
		k := kinds[name]
		if k == nil {
			k = &kind{name: name, steps: map[string]*stepStats{}}
			kinds[name] = k
		}
		k.n++
		if !tx.Ended {
			k.rolled++
		}
		var total, gaps time.Duration
		held := time.Duration(-1)
		for _, s := range tx.Steps {
			took, gap := time.Duration(s.Took)*time.Microsecond, time.Duration(s.Gap)*time.Microsecond
			total += took + gap
			gaps += gap
			if held >= 0 {
				held += gap + took
			}
			if held < 0 && locksKey(s.Stmt) {
				held = 0
			}
			st := k.steps[s.Stmt]
			if st == nil {
				st = &stepStats{}
				k.steps[s.Stmt] = st
				k.order = append(k.order, s.Stmt)
			}
			st.took = append(st.took, took)
			st.gap = append(st.gap, gap)
		}
		k.total = append(k.total, total)
		k.gaps = append(k.gaps, gaps)
		k.totalTime += total
		if held >= 0 {
			k.keyHeld = append(k.keyHeld, held)
		}
	}
	var all []*kind
	for _, k := range kinds {
		all = append(all, k)
	}
	slices.SortFunc(all, func(a, b *kind) int { return cmp.Compare(b.totalTime, a.totalTime) })
	p := func(ds []time.Duration) string {
		slices.Sort(ds)
		return fmt.Sprintf("%6.1f / %6.1f", ms(percentile(ds, 0.5)), ms(percentile(ds, 0.99)))
	}
	fmt.Println("      traced transactions by kind (first statement after BEGIN), p50 / p99 ms:")
	for _, k := range all[:min(len(all), 6)] {
		fmt.Printf("      %d x %q (%d rolled back): whole %s, the client's gaps between statements %s",
			k.n, k.name, k.rolled, p(k.total), p(k.gaps))
		if len(k.keyHeld) > 0 {
			fmt.Printf(", from its first key-row lock to its end %s (%d)", p(k.keyHeld), len(k.keyHeld))
		}
		fmt.Println()
		for _, s := range k.order {
			st := k.steps[s]
			fmt.Printf("        %5d  took %s  gap before %s  %s\n", len(st.took), p(st.took), p(st.gap), s)
		}
	}
}

// locksKey reports whether a statement of this kind locks rows of the key
// table: the ordered insert's upsert, the DONE statements and the key
// updates. A kind is the statement's first words, so MySQL's locking read
// of the key rows, which names its table after its columns, is known by
// its first column.
func locksKey(q string) bool {
	return strings.Contains(q, "KEYS") || strings.HasPrefix(q, "WITH d AS") || strings.HasPrefix(q, "SELECT k.aggregate_type")
}
