// Package pgxlazy is the pgx transaction that pgxtx's Manager.Do and the
// database/sql driver of store/postgres's Open begin: one whose BEGIN goes
// with its first statement, and which may hold the outbox's INSERTs until
// its next statement or COMMIT.
package pgxlazy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/writectx"
)

// Tx is a pgx transaction on a connection that sends no BEGIN of its own:
// the first statement goes in one pgx batch behind the BEGIN
// (Batch.BeginTx), so that a transaction pays no round trip for beginning.
// A business transaction of one statement and an outbox write costs three
// round trips (BEGIN with the statement, the INSERT, COMMIT) instead of
// four, two when the write is held. From the first statement on, everything
// runs on pgx's own transaction (tx); a transaction that ran nothing sends
// nothing, not even its COMMIT.
//
// A statement whose BEGIN cannot share its round trip begins first, on its
// own: one without arguments (pgx runs it with the simple protocol, which
// allows several statements in one string), one that picks its own
// QueryExecMode, CopyFrom, a savepoint (Begin), and Conn and LargeObjects,
// through which statements reach the connection without passing here.
//
// A Tx that holds writes (New's hold) holds the outbox's INSERTs (the
// statements core.Writer marks, see package writectx, run with Exec) and
// sends them in the batch of the transaction's next statement, or of its
// COMMIT, ahead of it: in the order they were written, before anything that
// comes after them. A rollback drops them unsent. Holding stops for the rest
// of the transaction at Begin, Conn and LargeObjects, whose statements do
// not pass here.
type Tx struct {
	conn *pgx.Conn
	opts pgx.TxOptions
	tx   pgx.Tx      // pgx's transaction, once begun; closed after a BEGIN that failed
	err  error       // a BEGIN that failed where its error could not be returned
	hold bool        // holding writes; false once holding has stopped
	held []heldWrite // in the order written
	// beginFailed: BEGIN failed, so that no statement may be sent any more: a
	// held write would run outside a transaction.
	beginFailed bool
}

// New returns a transaction on conn, begun with opts at its first
// statement, holding writes if hold.
func New(conn *pgx.Conn, opts pgx.TxOptions, hold bool) *Tx {
	return &Tx{conn: conn, opts: opts, hold: hold}
}

// Holds reports whether the transaction holds the writes marked for it.
func (t *Tx) Holds() bool { return t.hold && !t.beginFailed }

type heldWrite struct {
	sql  string
	args []any
	rows writectx.Rows // nil, or what receives the rows it returns
}

// closed is a pgx transaction that is closed, shared: its methods change
// nothing.
var closed = closedTx()

// closedTx returns a pgx transaction that is closed: every method fails
// with an error matching pgx.ErrTxClosed.
func closedTx() pgx.Tx {
	var b pgx.Batch
	b.BeginTx(pgx.TxOptions{})
	return pgx.FailedBatchResults(&b, pgx.ErrTxClosed).Tx()
}

// holdWrite holds the statement if the transaction holds writes and ctx
// marks it as the outbox's INSERT; false when it must run now.
func (t *Tx) holdWrite(ctx context.Context, sql string, args []any) bool {
	if !t.hold || t.beginFailed || !writectx.Marked(ctx) {
		return false
	}
	// A copy: the caller may reuse args once ExecContext has returned, as
	// database/sql allows (a store builds its next statement in them).
	t.held = append(t.held, heldWrite{sql, slices.Clone(args), writectx.RowsOf(ctx)})
	return true
}

// ExecMarked runs a statement that returns no rows on tx as core.Writer's
// statements need (see package writectx): when tx is a Tx that holds the
// outbox's INSERT, it is held (held is true, and the statement's result
// comes with the transaction's next statement or COMMIT); a statement
// whose rows go to writectx.RowsOf(ctx) and is not held runs as a query
// that hands them over before ExecMarked returns.
func ExecMarked(ctx context.Context, tx pgx.Tx, sql string, args []any) (tag pgconn.CommandTag, held bool, err error) {
	if lt, ok := tx.(*Tx); ok && lt.holdWrite(ctx, sql, args) {
		return pgconn.CommandTag{}, true, nil
	}
	if to := writectx.RowsOf(ctx); to != nil {
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			return pgconn.CommandTag{}, false, err
		}
		if err := feed(rows, to); err != nil {
			return pgconn.CommandTag{}, false, err
		}
		return rows.CommandTag(), false, nil
	}
	tag, err = tx.Exec(ctx, sql, args...)
	return tag, false, err
}

// HeldResult is the database/sql result of a write ExecMarked held: what
// it did is not known until the transaction's next statement or COMMIT.
type HeldResult struct{}

var errHeld = errors.New("the outbox write is sent with the transaction's next statement or COMMIT: its result is not known yet")

func (HeldResult) RowsAffected() (int64, error) { return 0, errHeld }
func (HeldResult) LastInsertId() (int64, error) { return 0, errHeld }

// Ready begins the transaction, if it has not begun, and sends the held
// writes: for a statement that goes to the connection without passing
// here. It returns the error of the BEGIN or of a held write.
func (t *Tx) Ready(ctx context.Context) error {
	if _, err := t.ready(ctx, withStatement); err != nil {
		return err
	}
	if t.beginFailed {
		return t.beginErr(pgx.ErrTxClosed)
	}
	return nil
}

// begin sends BEGIN on its own, if the transaction has not begun.
func (t *Tx) begin(ctx context.Context) pgx.Tx {
	if t.tx == nil {
		tx, err := t.conn.BeginTx(ctx, t.opts)
		if err != nil {
			t.tx, t.err, t.beginFailed = closed, err, true
		} else {
			t.tx = tx
		}
	}
	return t.tx
}

// ready returns pgx's transaction, begun, with the held writes sent: for a
// statement that runs on its own.
func (t *Tx) ready(ctx context.Context, with string) (pgx.Tx, error) {
	if len(t.held) == 0 {
		return t.begin(ctx), nil
	}
	b, held := t.batch()
	br, err := t.send(ctx, b, held, with)
	if err == nil {
		err = br.Close()
	}
	return t.tx, err
}

// beginErr is the error of a statement that could not run because its
// BEGIN failed.
func (t *Tx) beginErr(err error) error {
	if t.err != nil && errors.Is(err, pgx.ErrTxClosed) {
		return t.err
	}
	return err
}

// batch returns a batch that begins the transaction, if it has not begun,
// and sends the held writes, and those writes; the caller's statements go
// after them.
func (t *Tx) batch() (*pgx.Batch, []heldWrite) {
	// Room for BEGIN, the held writes and the caller's statement.
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(t.held)+2)}
	if t.tx == nil {
		b.BeginTx(t.opts)
	}
	for _, w := range t.held {
		b.Queue(w.sql, w.args...)
	}
	held := t.held
	t.held = nil
	return b, held
}

// send sends b and reads what goes before the caller's statements: the
// BEGIN, if b begins the transaction, and the held writes. It returns the
// results at the caller's first statement, or the error of BEGIN or of a
// write (naming it as sent with the statement with), the batch closed.
// From here on the transaction is pgx's, or closed if BEGIN failed.
func (t *Tx) send(ctx context.Context, b *pgx.Batch, held []heldWrite, with string) (pgx.BatchResults, error) {
	begins := t.tx == nil
	br := t.conn.SendBatch(ctx, b)
	if begins {
		t.tx = br.Tx()
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			t.beginFailed = true // the held writes, skipped by the server, are dropped
			return nil, err
		}
	}
	for _, w := range held {
		if err := readHeld(br, w); err != nil {
			_ = br.Close()
			if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "23505" {
				// The outbox table's one unique key is the event id.
				err = fmt.Errorf("%w: %w", core.ErrDuplicateEvent, err)
			}
			return nil, fmt.Errorf("the outbox write sent with %s failed: %w", with, err)
		}
	}
	return br, nil
}

// readHeld reads the result of the held write w from br, handing its
// rows, if it returns any, to w.rows.
func readHeld(br pgx.BatchResults, w heldWrite) error {
	if w.rows == nil {
		_, err := br.Exec()
		return err
	}
	rows, err := br.Query()
	if err != nil {
		return err
	}
	return feed(rows, w.rows)
}

// feed hands each of rows to to, and closes rows.
func feed(rows pgx.Rows, to writectx.Rows) error {
	defer rows.Close()
	for rows.Next() {
		if err := to(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

// direct reports whether a statement with args runs on pgx's transaction
// as it is: the transaction has begun and holds no writes, or the
// statement cannot go in a batch (see pipelines).
func (t *Tx) direct(args []any) bool {
	return t.tx != nil && len(t.held) == 0 || !pipelines(args)
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

const withStatement = "this statement"

// sendOne sends sql behind what the transaction has not sent yet (its
// BEGIN, its held writes), in one round trip.
func (t *Tx) sendOne(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	b, held := t.batch()
	b.Queue(sql, args...)
	return t.send(ctx, b, held, withStatement)
}

func (t *Tx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.direct(args) {
		tx, err := t.ready(ctx, withStatement)
		if err != nil {
			return pgconn.CommandTag{}, err
		}
		tag, err := tx.Exec(ctx, sql, args...)
		return tag, t.beginErr(err)
	}
	br, err := t.sendOne(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (t *Tx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.direct(args) {
		tx, err := t.ready(ctx, withStatement)
		if err != nil {
			return failed(err).Query()
		}
		rows, err := tx.Query(ctx, sql, args...)
		return rows, t.beginErr(err)
	}
	br, err := t.sendOne(ctx, sql, args)
	if err != nil {
		return failed(err).Query()
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return rows, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (t *Tx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.direct(args) {
		tx, err := t.ready(ctx, withStatement)
		if err != nil {
			return failed(err).QueryRow()
		}
		return tx.QueryRow(ctx, sql, args...)
	}
	br, err := t.sendOne(ctx, sql, args)
	if err != nil {
		return failed(err).QueryRow()
	}
	return batchRow{row: br.QueryRow(), br: br}
}

func (t *Tx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if len(b.QueuedQueries) == 0 || t.tx != nil && len(t.held) == 0 {
		tx, err := t.ready(ctx, "this batch")
		if err != nil {
			return pgx.FailedBatchResults(b, err)
		}
		return tx.SendBatch(ctx, b)
	}
	all, held := t.batch()
	all.QueuedQueries = append(all.QueuedQueries, b.QueuedQueries...)
	br, err := t.send(ctx, all, held, "this batch")
	if err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return noTx{br}
}

func (t *Tx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	tx, err := t.ready(ctx, "this COPY")
	if err != nil {
		return 0, err
	}
	n, err := tx.CopyFrom(ctx, table, cols, src)
	return n, t.beginErr(err)
}

// Begin begins a pseudo nested transaction (a savepoint), as pgx's does.
// The savepoint's statements go to the connection directly: the writes
// held so far go first, and no write is held after.
func (t *Tx) Begin(ctx context.Context) (pgx.Tx, error) {
	t.hold = false
	tx, err := t.ready(ctx, "SAVEPOINT")
	if err != nil {
		return nil, err
	}
	sp, err := tx.Begin(ctx)
	return sp, t.beginErr(err)
}

// Prepare prepares a statement on the connection; a prepared statement
// belongs to the connection, not to a transaction, so it needs no BEGIN.
func (t *Tx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if t.tx != nil {
		return t.tx.Prepare(ctx, name, sql)
	}
	return t.conn.Prepare(ctx, name, sql)
}

// LargeObjects begins the transaction, on its own and without a context
// (a large object lives only in a transaction), and sends the held writes;
// no write is held after.
func (t *Tx) LargeObjects() pgx.LargeObjects {
	t.hold = false
	tx, err := t.ready(context.Background(), "LargeObjects")
	if err != nil && t.err == nil {
		t.err = err
	}
	return tx.LargeObjects()
}

// Conn begins the transaction, on its own and without a context, so that
// the statements run on the connection are in it, and sends the held
// writes; no write is held after.
func (t *Tx) Conn() *pgx.Conn {
	t.hold = false
	if _, err := t.ready(context.Background(), "Conn"); err != nil && t.err == nil {
		t.err = err
	}
	return t.conn
}

// Commit commits what the transaction ran, the held writes sent with the
// COMMIT; one that ran nothing has nothing to commit.
func (t *Tx) Commit(ctx context.Context) error {
	t.hold = false
	if len(t.held) > 0 {
		return t.commitHeld(ctx)
	}
	if t.tx == nil {
		t.tx = closed
		return nil
	}
	if t.err != nil {
		return t.err
	}
	return t.tx.Commit(ctx)
}

// commitHeld sends the held writes and COMMIT in one batch (with BEGIN if
// the transaction has not begun). When a write fails, the server skips the
// COMMIT and the transaction is rolled back.
func (t *Tx) commitHeld(ctx context.Context) error {
	if t.err != nil {
		return t.err
	}
	b, held := t.batch()
	b.Queue(cmp.Or(t.opts.CommitQuery, "commit"))
	br, err := t.send(ctx, b, held, "COMMIT")
	if err == nil {
		var tag pgconn.CommandTag
		tag, err = br.Exec()
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err == nil && tag.String() == "ROLLBACK" {
			err = pgx.ErrTxCommitRollback
		}
	}
	t.tx = closed
	if err != nil && t.conn.PgConn().TxStatus() != 'I' {
		if _, rerr := t.conn.Exec(context.WithoutCancel(ctx), "rollback"); rerr != nil {
			_ = t.conn.Close(context.WithoutCancel(ctx)) // its state unknown: not to be used again
		}
	}
	return err
}

// Rollback rolls back what the transaction ran; the held writes are
// dropped unsent.
func (t *Tx) Rollback(ctx context.Context) error {
	t.hold, t.held = false, nil
	if t.tx == nil {
		t.tx = closed
		return nil
	}
	return t.tx.Rollback(ctx)
}

// failed returns pgx's results of a statement that did not run because of
// err: its Query gives rows (never nil) that report err.
func failed(err error) pgx.BatchResults { return pgx.FailedBatchResults(&pgx.Batch{}, err) }

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
