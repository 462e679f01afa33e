package core

import "context"

// Tx is a transaction that can run code after it ends. The Writer registers
// its hook callbacks through it; package txctx provides the implementation
// for database/sql and sqlx, and other transaction managers can provide their
// own.
type Tx interface {
	DBTX
	// AfterCommit registers fn to run once after a successful COMMIT.
	AfterCommit(fn func(ctx context.Context))
	// AfterRollback registers fn to run once after a rollback or a failed
	// COMMIT.
	AfterRollback(fn func(ctx context.Context))
}

type txKey struct{}

// ContextWithTx returns a copy of ctx that carries tx. Writer.Write finds it
// there.
func ContextWithTx(ctx context.Context, tx Tx) context.Context {
	return context.WithValue(ctx, txKey{}, tx)
}

// TxFromContext returns the transaction ctx carries, if any.
func TxFromContext(ctx context.Context) (Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(Tx)
	return tx, ok && tx != nil
}
