package pgxtx

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/pgxlazy"
	"github.com/outboxkit/outbox/internal/txhooks"
	"github.com/outboxkit/outbox/internal/writectx"
)

var (
	_ core.Tx   = (*Tx)(nil)
	_ core.DBTX = dbtx{}
)

// Tx is a transaction begun by Manager.Do, as the context carries it: the
// pgx transaction, the callbacks to run when it ends, and the core.DBTX that
// outbox stores write with. Like a pgx.Tx, it runs statements for one
// goroutine at a time; registering callbacks is safe from any goroutine.
type Tx struct {
	dbtx             // pgx's transaction; Do commits or rolls it back
	user   managedTx // what fn and Pgx hand out
	handle Beginner
	hold   Hold // Config.HoldWrites
	hooks  txhooks.Hooks
}

func init() {
	writectx.HoldsWith(func(tx any, generatedIDs bool) bool {
		t, ok := tx.(*Tx)
		if !ok {
			return false
		}
		lt, ok := t.tx.(*pgxlazy.Tx)
		return ok && t.hold.holds(generatedIDs) && lt.Holds()
	})
}

// From returns the transaction ctx carries if Manager.Do began it, and false
// otherwise (no transaction, or a core.Tx of another kind).
func From(ctx context.Context) (*Tx, bool) {
	tx, ok := core.TxFromContext(ctx)
	if !ok {
		return nil, false
	}
	t, ok := tx.(*Tx)
	return t, ok
}

// Pgx returns the pgx transaction, as Do handed it to its function (Commit
// and Rollback are Do's).
func (t *Tx) Pgx() pgx.Tx { return t.user }

// AfterCommit registers fn to run once after a successful COMMIT.
func (t *Tx) AfterCommit(fn func(ctx context.Context)) { t.hooks.AfterCommit(fn) }

// AfterRollback registers fn to run once after a rollback or a failed
// COMMIT.
func (t *Tx) AfterRollback(fn func(ctx context.Context)) { t.hooks.AfterRollback(fn) }

// DBTX returns tx, a pgx transaction of your own, as a core.DBTX for
// core.Writer.WriteTx: the events commit with tx. Nothing runs after its
// COMMIT, so they are delivered by a poller (on PostgreSQL within
// milliseconds: the write sends a NOTIFY that wakes the pollers), not
// through the hot path; begin the transaction with Manager.Do for that.
func DBTX(tx pgx.Tx) core.DBTX { return dbtx{tx} }

// dbtx runs core.DBTX's statements on a pgx transaction.
type dbtx struct{ tx pgx.Tx }

// ExecContext runs a statement that returns no rows in the transaction,
// with pgx. The result's LastInsertId is not supported (PostgreSQL has
// RETURNING instead).
func (t dbtx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	tag, held, err := pgxlazy.ExecMarked(ctx, t.tx, query, args)
	if err != nil {
		return nil, err
	}
	if held {
		return pgxlazy.HeldResult{}, nil
	}
	return result(tag), nil
}

// QueryContext runs a query in the transaction and returns its rows through
// database/sql (see the package documentation for the values' types).
func (t dbtx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return sqlView().QueryContext(withTx(ctx, t.tx), query, args...)
}

// QueryRowContext runs a query in the transaction that returns at most one
// row, through database/sql like QueryContext.
func (t dbtx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return sqlView().QueryRowContext(withTx(ctx, t.tx), query, args...)
}

// rollback rolls the transaction back; one already closed is not an error.
func (t *Tx) rollback(ctx context.Context) error {
	if err := t.tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return err
	}
	return nil
}

// result is a pgx command tag as a sql.Result.
type result pgconn.CommandTag

func (r result) RowsAffected() (int64, error) { return pgconn.CommandTag(r).RowsAffected(), nil }

func (result) LastInsertId() (int64, error) {
	return 0, errors.New("pgxtx: LastInsertId is not supported by PostgreSQL; use RETURNING")
}
