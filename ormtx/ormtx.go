// Package ormtx carries a transaction that an ORM begins and ends in the
// context, as the core.Tx that outbox.Write joins, and runs the
// transaction's after-commit callbacks (the hot path's hand-off to the
// dispatcher) once the ORM's COMMIT has succeeded. The integrations in
// github.com/outboxkit/outbox/contrib (GORM, Bun, ent) are built on it; an
// integration for another ORM, or for any library that begins and ends its
// own database/sql transactions, uses it the same way:
//
//	err := ormtx.Do(ctx, db, func(ctx context.Context) (ormtx.Begun, error) {
//		tx, err := db.BeginTx(ctx, nil) // the ORM's begin
//		if err != nil {
//			return ormtx.Begun{}, err
//		}
//		return ormtx.Begun{End: tx, Exec: tx, ORM: tx, Key: db, Pool: db}, nil
//	}, func(ctx context.Context, t *ormtx.Tx) error {
//		// the user's function: ob.Write(ctx, ...) joins t
//		return fn(ctx)
//	})
//
// The semantics are package txctx's: the transaction's lifetime is detached
// from the context once BEGIN has returned (so the rollback, the commit and
// the callbacks happen even after the context is cancelled), callbacks run
// in registration order in the goroutine that called Do, and a panicking
// callback is logged without stopping the others.
//
// The nested modules under contrib require this package at a released
// version of the root module: its API follows the root module's
// compatibility promise like every other exported package.
package ormtx

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/txhooks"
	"github.com/outboxkit/outbox/internal/writectx"
	"github.com/outboxkit/outbox/outboxlog"
)

// Ender ends a transaction: an ORM's transaction type (bun.Tx, ent's Tx,
// *sql.Tx).
type Ender interface {
	Commit() error
	Rollback() error
}

// Begun is what a begin function returns: how to end the transaction, the
// database/sql transaction the outbox writes on, and the ORM's own handle.
type Begun struct {
	End  Ender
	Exec core.DBTX
	ORM  any
	// Key identifies the handle the transaction was begun on; Do joins a
	// transaction of the same key. Nil: never joined.
	Key any
	// Logger receives the panics of callbacks (error) and the callbacks
	// registered on an ended transaction (warning). Nil:
	// outboxlog.Default().
	Logger *slog.Logger
	// Pool is the database/sql handle the transaction was begun on (a
	// *sql.DB or *sql.Conn), when known. On a pool of store/postgres's
	// Open, the INSERT of events whose ids the library generated is then
	// sent with the transaction's next statement or its COMMIT, one round
	// trip fewer, as in a transaction of package txctx on such a pool.
	// Nil, or another driver's pool: every write is sent when made.
	Pool any
}

var _ core.Tx = (*Tx)(nil)

// Tx is a transaction begun by Do: it runs the outbox's statements on the
// database/sql transaction under the ORM's, and collects the callbacks to run
// when the transaction ends.
type Tx struct {
	exec  core.DBTX
	orm   any
	key   any
	holds bool // its driver holds marked writes of generated ids (Begun.Pool)
	log   *slog.Logger
	hooks txhooks.Hooks
}

func init() {
	// On a pool of store/postgres's Open, the INSERT of events whose ids
	// the library generated goes with the next statement or COMMIT.
	writectx.HoldsWith(func(tx any, generatedIDs bool) bool {
		t, ok := tx.(*Tx)
		return ok && t.holds && generatedIDs
	})
}

// From returns the transaction ctx carries if Do began it.
func From(ctx context.Context) (*Tx, bool) {
	tx, ok := core.TxFromContext(ctx)
	if !ok {
		return nil, false
	}
	t, ok := tx.(*Tx)
	return t, ok
}

// ORM returns the ORM's transaction handle.
func (t *Tx) ORM() any { return t.orm }

// Key returns the key of the handle the transaction was begun on.
func (t *Tx) Key() any { return t.key }

// ExecContext runs a statement in the transaction.
func (t *Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return t.exec.ExecContext(ctx, query, args...)
}

// QueryContext runs a query in the transaction.
func (t *Tx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return t.exec.QueryContext(ctx, query, args...)
}

// QueryRowContext runs a query returning at most one row in the transaction.
func (t *Tx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return t.exec.QueryRowContext(ctx, query, args...)
}

// AfterCommit registers fn to run once after a successful COMMIT. A
// registration on an ended transaction is logged and dropped.
func (t *Tx) AfterCommit(fn func(ctx context.Context)) { t.hooks.AfterCommit(fn) }

// AfterRollback registers fn to run once after a rollback or a failed COMMIT.
// A registration on an ended transaction is logged and dropped.
func (t *Tx) AfterRollback(fn func(ctx context.Context)) { t.hooks.AfterRollback(fn) }

// Ended reports whether the transaction has committed or rolled back.
func (t *Tx) Ended() bool { return t.hooks.Ended() }

// Do runs fn in a transaction carried by the context fn receives. When ctx
// already carries a transaction of Do with the same non-nil key, fn runs in
// it (joined: no BEGIN, no COMMIT, fn's error returned unchanged). Otherwise
// begin starts one with a context detached from ctx's cancellation once it
// returns; Do commits with Begun.End when fn returns nil, rolls back
// otherwise (and when fn panics, letting the panic go on), then runs the
// callbacks of the outcome.
func Do(ctx context.Context, key any, begin func(ctx context.Context) (Begun, error), fn func(ctx context.Context, t *Tx) error) error {
	if fn == nil {
		return core.Invalid("transaction function", "is nil")
	}
	if t, ok := From(ctx); ok && key != nil && t.key == key {
		if t.Ended() {
			return fmt.Errorf("join transaction: %w", sql.ErrTxDone)
		}
		return fn(ctx, t)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("begin transaction: %w", context.Cause(ctx))
	}
	// Waiting for a connection and BEGIN honour ctx; the transaction itself
	// does not, so that its end is Do's to run (see package txctx).
	txCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	detach := context.AfterFunc(ctx, cancel)
	b, err := begin(txCtx)
	if !detach() {
		cancel()
		if err == nil && b.End != nil {
			_ = b.End.Rollback()
		}
		return fmt.Errorf("begin transaction: %w", context.Cause(ctx))
	}
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	t := NewTxFrom(b)

	cbCtx := context.WithoutCancel(ctx)
	returned := false
	defer func() {
		if returned {
			return
		}
		if err := b.End.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
			t.log.LogAttrs(cbCtx, slog.LevelError, "outbox: roll back transaction after panic", outboxlog.Err(err))
		}
		t.finish(cbCtx, false)
	}()

	err = fn(core.ContextWithTx(ctx, t), t)
	returned = true

	if err != nil {
		if rbErr := b.End.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
			err = errors.Join(err, fmt.Errorf("roll back transaction: %w", rbErr))
		}
		t.finish(cbCtx, false)
		return err
	}
	if err := b.End.Commit(); err != nil {
		t.finish(cbCtx, false)
		return fmt.Errorf("commit transaction: %w", err)
	}
	t.finish(cbCtx, true)
	return nil
}

// NewTx returns a transaction running its statements on exec, for an
// integration that ends transactions itself (inside the ORM's own commit and
// rollback) instead of through Do: it calls Finish once the transaction has
// ended. logger is Begun.Logger's.
func NewTx(exec core.DBTX, orm any, logger *slog.Logger) *Tx {
	return NewTxFrom(Begun{Exec: exec, ORM: orm, Logger: logger})
}

// NewTxFrom returns the transaction Do makes of b, for an integration that
// ends transactions itself, as NewTx: b.End is not used, and the
// integration calls Finish once the transaction has ended.
func NewTxFrom(b Begun) *Tx {
	log := outboxlog.Or(b.Logger)
	return &Tx{exec: b.Exec, orm: b.ORM, key: b.Key, holds: writectx.OnDriver(b.Pool), log: log, hooks: txhooks.Hooks{Log: log, Prefix: "outbox"}}
}

// Finish marks the transaction ended and runs the callbacks of its outcome
// with ctx: the after-commit ones when committed, the after-rollback ones
// otherwise. Only the first call does anything.
func (t *Tx) Finish(ctx context.Context, committed bool) { t.finish(ctx, committed) }

// finish marks the transaction ended and runs the callbacks of its outcome.
func (t *Tx) finish(ctx context.Context, ok bool) { t.hooks.Finish(ctx, ok) }
