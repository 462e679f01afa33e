// Package pgxtx carries a pgx v5 transaction in a context.Context, as package
// txctx does for database/sql, so that a service built on pgxpool writes its
// outbox events inside its own pgx transactions and keeps the hot path.
//
// A Manager wraps a *pgxpool.Pool (or a *pgx.Conn). Manager.Do begins a
// transaction, runs a function with the pgx.Tx and with the transaction in
// its context, and commits when the function returns nil or rolls back when
// it returns an error or panics. core.Writer.Write finds the transaction in
// the context, inserts the events with it, and hands them to the
// dispatcher's hot queue once COMMIT has succeeded:
//
//	err := txm.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
//		if _, err := tx.Exec(ctx, "UPDATE orders SET state = 'placed' WHERE id = $1", id); err != nil {
//			return err
//		}
//		_, err := ob.Writer().Write(ctx, env)
//		return err
//	})
//
// The outbox's background side (dispatcher write-backs, poller, purger)
// runs on the same pool through pgx's database/sql adapter:
//
//	ob, err := outbox.New(outbox.Config{DB: stdlib.OpenDBFromPool(pool), Store: postgres.New(...), ...})
//
// so that a service needs one pool, and no database/sql in its own code.
//
// # The transaction
//
// The pgx.Tx that Do hands to fn has every pgx feature (batches, COPY,
// nested transactions as savepoints), except that Commit and Rollback are
// Do's: called by fn, they fail with ErrManagedTx and change nothing. A
// nested transaction begun with tx.Begin commits and rolls back its
// savepoint as usual.
//
// # BEGIN rides with the first statement
//
// On a *pgxpool.Pool or a *pgx.Conn, Do sends no BEGIN of its own: the
// transaction's first statement goes in one pgx batch behind it
// (pgx.Batch.BeginTx), and everything after runs on pgx's own transaction.
// A business statement, an outbox write and COMMIT cost three round trips
// instead of four (two with the write sent with COMMIT, below), and a
// function that runs no statement sends nothing at all. What the function sees is what an eager BEGIN would give: the first
// statement runs in the transaction, and an error of BEGIN is the error of
// that statement, after which the transaction is closed (pgx.ErrTxClosed)
// and nothing runs outside it. A first statement without arguments (pgx
// runs it with the simple protocol, which allows several statements in one
// string), or with a pgx.QueryExecMode, and a first CopyFrom, tx.Begin,
// tx.Conn or tx.LargeObjects begin on their own first, as before. With
// another Beginner, Do begins with its BeginTx.
//
// # Writes sent with COMMIT
//
// The outbox's INSERTs of events whose aggregate types are not ordered and
// whose ids the library generated are held and sent in the batch of the transaction's next
// statement, or of its COMMIT: a business statement, an outbox write and
// COMMIT cost two round trips. Held writes still run in the order written,
// before anything after them; a rollback drops them unsent. Write returns
// before a held INSERT has run, so that one that fails (the table missing,
// say) fails the statement it went with, or Do's COMMIT, with an error that
// names the outbox write, and the transaction rolls back. A generated id
// cannot be a duplicate, so that core.ErrDuplicateEvent still comes from
// Write, for ids the caller chose, which are sent at once. Config.HoldWrites
// holds those too (HoldAll) or nothing (HoldNone).
//
// Tx, the value in the context (see From and core.TxFromContext), is also a
// core.DBTX, so that any outbox store can write with it: ExecContext runs
// the statement with pgx directly. QueryContext and QueryRowContext return
// database/sql rows read from the pgx transaction; values arrive as
// database/sql would hold them (integers as int64, floats as float64, text
// as string, bytea as []byte, timestamps as time.Time, json and jsonb as
// their text, uuid as its text); a column of a type with no such form
// (arrays, composite types) fails the scan with an error that names it.
// Business code should use the pgx.Tx (or Tx.Pgx) instead.
//
// # Callbacks, joining and cancellation
//
// These behave as in package txctx. Tx.AfterCommit and Tx.AfterRollback
// register functions that run once the transaction has ended, in
// registration order, in the goroutine that called Do, before Do returns;
// their context is Do's without its cancellation and without this
// transaction. A panicking callback is recovered and logged; a callback
// registered after the end never runs and is logged.
//
// When the context given to Do already carries a transaction begun by a
// Manager over the same pool or connection, Do joins it: fn runs in that
// transaction with the same pgx.Tx, and the outer Do commits or rolls back.
// A transaction of another handle is not joined.
//
// Acquiring the connection honours ctx; BEGIN honours the context of the
// statement it goes with. Once begun, the transaction is Do's to end: Do commits
// whenever fn returns nil, even if ctx was cancelled after fn's last
// statement, and rolls back otherwise, whatever the state of ctx.
package pgxtx
