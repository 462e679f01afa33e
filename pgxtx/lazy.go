package pgxtx

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// lazyTx is the transaction Do hands out on a pool or a connection. It sends
// no BEGIN of its own: the first statement goes in one pgx batch behind the
// BEGIN (Batch.BeginTx), so that a transaction pays no round trip for
// beginning. A business transaction of one statement and an outbox write
// costs three round trips (BEGIN with the statement, the INSERT, COMMIT)
// instead of four. From the first statement on, everything runs on pgx's
// own transaction (tx); a transaction that ran nothing sends nothing, not
// even its COMMIT.
//
// A statement whose BEGIN cannot share its round trip begins first, on its
// own: one without arguments (pgx runs it with the simple protocol, which
// allows several statements in one string), one that picks its own
// QueryExecMode, CopyFrom, a savepoint (Begin), and Conn and LargeObjects,
// through which statements reach the connection without passing here.
type lazyTx struct {
	conn *pgx.Conn
	opts pgx.TxOptions
	tx   pgx.Tx // pgx's transaction, once begun; closed after a BEGIN that failed
	err  error  // a BEGIN that failed where its error could not be returned
}

// closedTx returns a pgx transaction that is closed: every method fails
// with an error matching pgx.ErrTxClosed.
func closedTx() pgx.Tx {
	var b pgx.Batch
	b.BeginTx(pgx.TxOptions{})
	return pgx.FailedBatchResults(&b, pgx.ErrTxClosed).Tx()
}

// begin sends BEGIN on its own, if the transaction has not begun.
func (t *lazyTx) begin(ctx context.Context) pgx.Tx {
	if t.tx == nil {
		tx, err := t.conn.BeginTx(ctx, t.opts)
		if err != nil {
			t.tx, t.err = closedTx(), err
		} else {
			t.tx = tx
		}
	}
	return t.tx
}

// beginErr is the error of a statement that could not run because its
// BEGIN failed.
func (t *lazyTx) beginErr(err error) error {
	if t.err != nil && errors.Is(err, pgx.ErrTxClosed) {
		return t.err
	}
	return err
}

// send sends b behind the BEGIN, and returns its results with the BEGIN's
// result read: from here on the transaction is pgx's, or closed if BEGIN
// failed (its error is the batch's).
func (t *lazyTx) send(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	br := t.conn.SendBatch(ctx, b)
	t.tx = br.Tx()
	_, _ = br.Exec() // BEGIN; an error stays in br and is returned by the next read
	return br
}

// withBegin returns a batch that begins the transaction and then runs sql.
func (t *lazyTx) withBegin(sql string, args []any) *pgx.Batch {
	b := &pgx.Batch{}
	b.BeginTx(t.opts)
	b.Queue(sql, args...)
	return b
}

// pipelines reports whether a statement with args can go in a batch behind
// the BEGIN as pgx would run it on its own: it has arguments (pgx runs one
// without any with the simple protocol), and none of pgx's per-query
// options but a QueryRewriter (named arguments), which a batch honours too.
func pipelines(args []any) bool {
	if len(args) == 0 {
		return false
	}
	switch args[0].(type) {
	case pgx.QueryExecMode, pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
		return false
	}
	return true
}

func (t *lazyTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.tx != nil || !pipelines(args) {
		tag, err := t.begin(ctx).Exec(ctx, sql, args...)
		return tag, t.beginErr(err)
	}
	br := t.send(ctx, t.withBegin(sql, args))
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (t *lazyTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.tx != nil || !pipelines(args) {
		rows, err := t.begin(ctx).Query(ctx, sql, args...)
		return rows, t.beginErr(err)
	}
	br := t.send(ctx, t.withBegin(sql, args))
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return rows, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (t *lazyTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.tx != nil || !pipelines(args) {
		return t.begin(ctx).QueryRow(ctx, sql, args...)
	}
	br := t.send(ctx, t.withBegin(sql, args))
	return batchRow{row: br.QueryRow(), br: br}
}

func (t *lazyTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.tx != nil || len(b.QueuedQueries) == 0 {
		return t.begin(ctx).SendBatch(ctx, b)
	}
	all := &pgx.Batch{}
	all.BeginTx(t.opts)
	all.QueuedQueries = append(all.QueuedQueries, b.QueuedQueries...)
	return noTx{t.send(ctx, all)}
}

func (t *lazyTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	n, err := t.begin(ctx).CopyFrom(ctx, table, cols, src)
	return n, t.beginErr(err)
}

// Begin begins a pseudo nested transaction (a savepoint), as pgx's does.
func (t *lazyTx) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := t.begin(ctx).Begin(ctx)
	return tx, t.beginErr(err)
}

// Prepare prepares a statement on the connection; a prepared statement
// belongs to the session, so it needs no BEGIN.
func (t *lazyTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if t.tx != nil {
		return t.tx.Prepare(ctx, name, sql)
	}
	return t.conn.Prepare(ctx, name, sql)
}

// LargeObjects begins the transaction, on its own and without a context
// (a large object lives only in a transaction).
func (t *lazyTx) LargeObjects() pgx.LargeObjects {
	return t.begin(context.Background()).LargeObjects()
}

// Conn begins the transaction, on its own and without a context, so that
// the statements run on the connection are in it.
func (t *lazyTx) Conn() *pgx.Conn {
	t.begin(context.Background())
	return t.conn
}

// Commit commits what the transaction ran; one that ran nothing has
// nothing to commit.
func (t *lazyTx) Commit(ctx context.Context) error {
	if t.tx == nil {
		t.tx = closedTx()
		return nil
	}
	if t.err != nil {
		return t.err
	}
	return t.tx.Commit(ctx)
}

// Rollback rolls back what the transaction ran.
func (t *lazyTx) Rollback(ctx context.Context) error {
	if t.tx == nil {
		t.tx = closedTx()
		return nil
	}
	return t.tx.Rollback(ctx)
}

// batchRows are the rows of a query sent behind the BEGIN: the batch is
// closed, and the connection free again, when the rows are.
type batchRows struct {
	pgx.Rows
	br  pgx.BatchResults
	err error // the batch's Close
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.close()
	return false
}

func (r *batchRows) Close() {
	r.Rows.Close()
	r.close()
}

func (r *batchRows) close() {
	if r.br != nil {
		r.err = r.br.Close()
		r.br = nil
	}
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// batchRow is the row of a QueryRow sent behind the BEGIN.
type batchRow struct {
	row pgx.Row
	br  pgx.BatchResults
}

func (r batchRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

// noTx are the results of a caller's batch sent behind the BEGIN: the
// caller's batch began no transaction.
type noTx struct{ pgx.BatchResults }

func (noTx) Tx() pgx.Tx { return nil }
