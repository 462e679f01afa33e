package txctx

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jmoiron/sqlx"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/txhooks"
	"github.com/outboxkit/outbox/internal/writectx"
)

var _ core.Tx = (*Tx)(nil)

func init() {
	// On a pool of store/postgres's Open, the INSERT of events whose ids
	// the library generated goes with the next statement or COMMIT.
	writectx.HoldsWith(func(tx any, generatedIDs bool) bool {
		t, ok := tx.(*Tx)
		return ok && t.holds && generatedIDs
	})
}

// Tx is a transaction begun by Manager.Do. It runs statements like the
// *sql.Tx it wraps and collects the callbacks to run when it ends. Like a
// *sql.Tx, it runs statements for one goroutine at a time; registering
// callbacks is safe from any goroutine.
//
// Do ends the transaction: never call Commit or Rollback on SQLTx or Sqlx.
type Tx struct {
	sqlTx  *sql.Tx
	sqlxTx *sqlx.Tx
	handle any
	holds  bool               // its driver holds marked writes of generated ids
	cancel context.CancelFunc // releases the context given to BeginTx
	hooks  txhooks.Hooks
}

// From returns the transaction ctx carries if Manager.Do began it, and false
// otherwise (no transaction, or a core.Tx of another kind). The returned Tx
// may have ended if ctx was kept beyond its Do call; its statements then fail
// with sql.ErrTxDone.
func From(ctx context.Context) (*Tx, bool) {
	tx, ok := core.TxFromContext(ctx)
	if !ok {
		return nil, false
	}
	t, ok := tx.(*Tx)
	return t, ok
}

// ExecContext runs a statement that returns no rows in the transaction.
func (t *Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return t.sqlTx.ExecContext(ctx, query, args...)
}

// QueryContext runs a query in the transaction and returns its rows.
func (t *Tx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return t.sqlTx.QueryContext(ctx, query, args...)
}

// QueryRowContext runs a query that returns at most one row in the
// transaction; errors are deferred to the row's Scan.
func (t *Tx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return t.sqlTx.QueryRowContext(ctx, query, args...)
}

// SQLTx returns the underlying *sql.Tx, for code that needs it (prepared
// statements, libraries that take a *sql.Tx).
func (t *Tx) SQLTx() *sql.Tx { return t.sqlTx }

// Sqlx returns the transaction as an *sqlx.Tx sharing the same *sql.Tx, as
// BeginTxx made it: with the handle's driver name, mapper and unsafe flag. It
// is nil unless the Manager that began the transaction was built from a
// *sqlx.DB or *sqlx.Conn.
func (t *Tx) Sqlx() *sqlx.Tx { return t.sqlxTx }

// AfterCommit registers fn to run once after a successful COMMIT (see the
// package documentation for order, context and panics). If the transaction
// has already ended, fn never runs and the registration is logged. A nil fn
// is ignored.
func (t *Tx) AfterCommit(fn func(ctx context.Context)) { t.hooks.AfterCommit(fn) }

// AfterRollback registers fn to run once after a rollback or a failed COMMIT
// (see the package documentation for order, context and panics). If the
// transaction has already ended, fn never runs and the registration is
// logged. A nil fn is ignored.
func (t *Tx) AfterRollback(fn func(ctx context.Context)) { t.hooks.AfterRollback(fn) }

func (t *Tx) ended() bool { return t.hooks.Ended() }

// rollback rolls the transaction back. sql.ErrTxDone is not an error here:
// the transaction is over either way.
func (t *Tx) rollback() error {
	err := t.sqlTx.Rollback()
	t.cancel()
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

func (t *Tx) commit() error {
	err := t.sqlTx.Commit()
	t.cancel()
	return err
}

// finish marks the transaction ended and runs the callbacks of its outcome.
func (t *Tx) finish(ctx context.Context, committed bool) { t.hooks.Finish(ctx, committed) }
