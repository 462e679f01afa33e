// Package outboxbun writes outbox events in Bun transactions, with delivery
// through the dispatcher's hot path right after COMMIT.
//
// Manager.Do begins a Bun transaction, carries it in the context as a
// core.Tx, and commits it when the function returns nil (rolls it back on an
// error or a panic). The Writer finds it there, so Write and WriteAll need no
// transaction argument, and the events it writes reach the hot queue after
// COMMIT:
//
//	txm, _ := outboxbun.New(bunDB, outboxbun.Config{})
//	err := txm.Do(ctx, func(ctx context.Context, tx bun.Tx) error {
//		if _, err := tx.NewInsert().Model(&order).Exec(ctx); err != nil {
//			return err
//		}
//		_, err := ob.Writer().Write(ctx, env)
//		return err
//	})
//
// A bun.Tx itself cannot be given to Writer.WriteTx: Bun runs every query
// through its own formatter, which drops the outbox's SQL arguments, and
// WriteTx refuses it with an error. In a transaction begun by Bun's RunInTx
// or BeginTx, pass its *sql.Tx (tx.Tx) to WriteTx instead; the events are
// then delivered by the poller (on PostgreSQL within milliseconds, woken by
// NOTIFY), since Bun offers no hook after COMMIT.
//
// The outbox's own components (outbox.Config.DB) run on the *sql.DB under
// the bun.DB (bunDB.DB), and the store is the one of the bun.DB's dialect.
package outboxbun

import (
	"context"
	"database/sql"
	"log/slog"

	"github.com/uptrace/bun"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/ormtx"
)

// Config configures a Manager. The zero value is valid.
type Config struct {
	// TxOptions sets the isolation level and read-only flag of the
	// transactions Do begins. New copies it. Default: nil (the driver's
	// defaults).
	TxOptions *sql.TxOptions
	// Logger receives panics recovered from after-commit and after-rollback
	// callbacks, and callbacks registered on an ended transaction. Nil:
	// outboxlog.Default(), which sends warnings and errors to slog.Default().
	// slog.New(slog.DiscardHandler) silences it; a zerolog.Logger zl is wired in
	// with slog.New(zerolog.NewSlogHandler(zl)).
	Logger *slog.Logger
}

// Manager begins Bun transactions that carry outbox events. It is safe for
// concurrent use.
type Manager struct {
	db   *bun.DB
	opts *sql.TxOptions
	log  *slog.Logger // nil: outboxlog.Default()
}

// New returns a Manager that begins its transactions on db. It returns an
// error matching core.ErrInvalid when db is nil.
func New(db *bun.DB, cfg Config) (*Manager, error) {
	if db == nil {
		return nil, core.Invalid("bun db", "is nil")
	}
	m := &Manager{db: db, log: cfg.Logger}
	if cfg.TxOptions != nil {
		opts := *cfg.TxOptions
		m.opts = &opts
	}
	return m, nil
}

// Do runs fn in a Bun transaction that the context fn receives carries (see
// From and core.TxFromContext). It commits when fn returns nil and rolls back
// when fn returns an error or panics (the panic goes on). Events written in
// it with a Writer whose hook is the dispatcher's are delivered through the
// hot path once COMMIT has succeeded; after a rollback or a failed COMMIT
// nothing is delivered.
//
// A Do whose context already carries a transaction of a Manager on the same
// bun.DB joins it: fn runs in that transaction, and the outer Do commits or
// rolls back. A nested transaction of Bun's own (tx.RunInTx) is a savepoint
// of the same transaction and needs nothing more.
//
// Do returns fn's error unchanged, or the error of BEGIN or COMMIT wrapped
// with context. A nil fn returns an error matching core.ErrInvalid.
func (m *Manager) Do(ctx context.Context, fn func(ctx context.Context, tx bun.Tx) error) error {
	if fn == nil {
		return core.Invalid("transaction function", "is nil")
	}
	return ormtx.Do(ctx, m.db, m.begin, func(ctx context.Context, t *ormtx.Tx) error {
		return fn(ctx, t.ORM().(bun.Tx))
	})
}

func (m *Manager) begin(ctx context.Context) (ormtx.Begun, error) {
	tx, err := m.db.BeginTx(ctx, m.opts)
	if err != nil {
		return ormtx.Begun{}, err
	}
	// The outbox's statements go to the *sql.Tx under Bun's, as written;
	// Bun's Commit and Rollback end it, so that its query hooks see them.
	return ormtx.Begun{End: tx, Exec: tx.Tx, ORM: tx, Key: m.db, Logger: m.log, Pool: m.db.DB}, nil
}

// From returns the Bun transaction ctx carries if a Manager's Do began it.
func From(ctx context.Context) (bun.Tx, bool) {
	t, ok := ormtx.From(ctx)
	if !ok {
		return bun.Tx{}, false
	}
	tx, ok := t.ORM().(bun.Tx)
	return tx, ok
}
