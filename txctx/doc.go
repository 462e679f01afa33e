// Package txctx carries a database/sql transaction in a context.Context, so
// that code deep in a call chain, core.Writer.Write among it, joins the
// business transaction without a transaction parameter on every function.
//
// A Manager wraps a pool or connection (*sql.DB, *sql.Conn, *sqlx.DB,
// *sqlx.Conn). Manager.Do begins a transaction, runs a function with the
// transaction in its context, and commits when the function returns nil or
// rolls back when it returns an error or panics:
//
//	err := txm.Do(ctx, func(ctx context.Context) error {
//		tx, _ := txctx.From(ctx)
//		if _, err := tx.ExecContext(ctx, "UPDATE orders SET state = 'placed' WHERE id = ?", id); err != nil {
//			return err
//		}
//		_, err := writer.Write(ctx, env) // finds the transaction with core.TxFromContext
//		return err
//	})
//
// On a pool of store/postgres's Open (or OpenDB), the transaction sends its
// BEGIN with its first statement, and Write's INSERT of events whose ids the
// library generated goes with the transaction's next statement or its
// COMMIT: Write returns before the row is written, and an INSERT that fails
// fails that statement or Do's COMMIT (see postgres.Open). The transaction
// above costs two round trips instead of four.
//
// # Callbacks
//
// Tx.AfterCommit and Tx.AfterRollback register functions that run once the
// transaction has ended: after-commit callbacks only after COMMIT succeeded,
// after-rollback callbacks after a rollback or a failed COMMIT. They run in
// registration order, synchronously in the goroutine that called Do, before
// Do returns (or, after a panic, before the panic goes on). Their context is
// the one given to Do without its cancellation (context.WithoutCancel) and it
// carries no transaction of this Do, so a callback that writes again has to
// begin a transaction of its own, and core.Writer.Write in it fails with
// core.ErrNoTransaction instead of writing into a transaction that is over.
//
// A panic in a callback is recovered and logged to Config.Logger (nil:
// slog.Default(), see package outboxlog); the remaining callbacks still run and Do's result is unchanged.
// A callback registered after the transaction has ended never runs; the
// registration is logged to Config.Logger. Registration is safe for
// concurrent use; statements on a Tx are not, as on a *sql.Tx.
//
// # Joining
//
// When the context given to Do already carries a transaction begun by a
// Manager over the same handle (a *sqlx.DB and the *sql.DB it wraps count as
// the same handle), Do joins it: it runs fn in that transaction, with the
// same context, and returns fn's error unchanged. A joined Do never begins,
// commits or rolls back: an error from the inner function rolls nothing back
// by itself but goes to the outer function, which decides (returning it rolls
// the whole transaction back; handling it and returning nil commits everything
// done so far, the inner function's statements included). A panic passes
// through a joined Do untouched. Callbacks registered in the inner call run
// when the outer transaction ends, with the outer transaction's outcome. The
// inner Manager's Config.TxOptions do not apply to a joined transaction.
//
// A transaction of a different handle, or a core.Tx from another package, is
// not joined: Do begins an independent transaction on its own handle, which
// commits or rolls back on its own, and fn's context carries the new one.
// A context that carries a transaction of the same handle that has already
// ended (a context kept beyond its Do call) makes Do fail with an error
// matching sql.ErrTxDone.
//
// # Cancellation
//
// Waiting for a connection and BEGIN honour ctx. Once begun, the transaction
// is detached from ctx's cancellation: statements that fn runs with ctx still
// fail when ctx is cancelled, and fn reports that by returning an error, but
// the rollback (and the commit) are Do's to run, so they and the callbacks
// happen even after ctx is cancelled. Do commits whenever fn returns nil, even
// if ctx was cancelled after fn's last statement.
package txctx
