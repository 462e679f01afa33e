// Package outboxgorm writes outbox events in GORM transactions, with
// delivery through the dispatcher's hot path right after COMMIT.
//
// A GORM transaction is a *gorm.DB session whose connection pool is a
// *sql.Tx. Manager.Do begins that *sql.Tx with package txctx, which carries
// it in the context with after-commit callbacks, and hands fn a GORM session
// on it: GORM's statements and the Writer's INSERT run in one transaction,
// and the events reach the hot queue once COMMIT has succeeded:
//
//	txm, _ := outboxgorm.New(gormDB, outboxgorm.Config{})
//	err := txm.Do(ctx, func(ctx context.Context, tx *gorm.DB) error {
//		if err := tx.Create(&order).Error; err != nil {
//			return err
//		}
//		_, err := ob.Writer().Write(ctx, env)
//		return err
//	})
//
// Because the transaction is txctx's, Do joins a transaction begun by
// outbox.Outbox.Do or a txctx.Manager on the same *sql.DB, and they join
// Do's; Tx gives the GORM session of such a transaction to code that only
// has the context. A nested tx.Transaction is a savepoint, as in GORM.
//
// In a transaction begun by GORM itself (db.Transaction, db.Begin), pass
// DBTX(tx) to Writer.WriteTx. GORM offers no hook after COMMIT, so those
// events are delivered by the poller (on PostgreSQL within milliseconds,
// woken by NOTIFY), unless the *gorm.DB was opened on a Pool: its
// transactions run the outbox's callbacks after COMMIT, and the events go
// through the hot path.
//
// The outbox's own components (outbox.Config.DB) run on the *sql.DB under
// the *gorm.DB (gormDB.DB()), and the store is the one of its database.
package outboxgorm

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"

	"gorm.io/gorm"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/txctx"
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

// Manager begins GORM transactions that carry outbox events. It is safe for
// concurrent use.
type Manager struct {
	db  *gorm.DB
	txm *txctx.Manager
}

// New returns a Manager that begins its transactions on the *sql.DB under
// db. It returns an error matching core.ErrInvalid when db is nil or has no
// *sql.DB (db.DB() fails, e.g. a session already in a transaction).
func New(db *gorm.DB, cfg Config) (*Manager, error) {
	if db == nil {
		return nil, core.Invalid("gorm db", "is nil")
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, core.Invalid("gorm db", "has no *sql.DB: %v", err)
	}
	if isTx(db) {
		return nil, core.Invalid("gorm db", "is a transaction; pass the *gorm.DB of gorm.Open")
	}
	txm, err := txctx.New(sqlDB, txctx.Config{TxOptions: cfg.TxOptions, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	return &Manager{db: db, txm: txm}, nil
}

// TxManager returns the txctx.Manager under Do, on the same *sql.DB.
func (m *Manager) TxManager() *txctx.Manager { return m.txm }

// Do runs fn in a transaction on a GORM session of it, tx, with ctx
// carrying the transaction (see txctx.From and core.TxFromContext). It
// commits when fn returns nil and rolls back when fn returns an error or
// panics (the panic goes on). Events written in it with a Writer whose hook
// is the dispatcher's are delivered through the hot path once COMMIT has
// succeeded; after a rollback or a failed COMMIT nothing is delivered.
//
// A context that already carries a txctx transaction on the same *sql.DB is
// joined, as txctx.Manager.Do joins: fn runs in it, and the outer Do commits
// or rolls back. fn must not call tx.Commit or tx.Rollback.
//
// Do returns fn's error unchanged, or the error of BEGIN or COMMIT wrapped
// with context. A nil fn returns an error matching core.ErrInvalid.
func (m *Manager) Do(ctx context.Context, fn func(ctx context.Context, tx *gorm.DB) error) error {
	if fn == nil {
		return core.Invalid("transaction function", "is nil")
	}
	return m.txm.Do(ctx, func(ctx context.Context) error {
		t, _ := txctx.From(ctx)
		return fn(ctx, bind(ctx, m.db, t.SQLTx()))
	})
}

// Tx returns a GORM session of db on the txctx transaction ctx carries
// (begun by Manager.Do, outbox.Outbox.Do or a txctx.Manager), with ctx as
// its context. It returns false when ctx carries no such transaction, or
// one on another *sql.DB than db's.
func Tx(ctx context.Context, db *gorm.DB) (*gorm.DB, bool) {
	t, ok := txctx.From(ctx)
	if !ok || db == nil {
		return nil, false
	}
	want, err := db.DB()
	if err != nil {
		return nil, false
	}
	tx := bind(ctx, db, t.SQLTx())
	if got, err := tx.DB(); err != nil || got != want {
		return nil, false
	}
	return tx, true
}

// bind returns a session of db whose statements run on sqlTx, as GORM's
// own Begin makes one (keeping prepared statements when db prepares them).
func bind(ctx context.Context, db *gorm.DB, sqlTx *sql.Tx) *gorm.DB {
	tx := db.Session(&gorm.Session{Context: ctx, NewDB: true})
	if p, ok := tx.Statement.ConnPool.(*gorm.PreparedStmtDB); ok {
		tx.Statement.ConnPool = &gorm.PreparedStmtTX{Tx: sqlTx, PreparedStmtDB: p}
	} else {
		tx.Statement.ConnPool = sqlTx
	}
	return tx
}

// isTx reports whether db is a session in a transaction.
func isTx(db *gorm.DB) bool {
	_, ok := db.Statement.ConnPool.(gorm.TxCommitter)
	return ok
}

// DBTX returns the transaction under a GORM transaction tx (one begun by
// db.Transaction or db.Begin), for Writer.WriteTx. When the *gorm.DB was
// opened on a Pool, the transaction is a core.Tx and its events are
// delivered through the hot path after COMMIT; otherwise GORM runs nothing
// after its COMMIT and the poller delivers them. It returns an error
// matching core.ErrNoTransaction when tx is not in a transaction.
func DBTX(tx *gorm.DB) (core.DBTX, error) {
	if tx == nil || tx.Statement == nil || !isTx(tx) {
		return nil, fmt.Errorf("%w: the *gorm.DB is not in a transaction (use the tx of db.Transaction or db.Begin)", core.ErrNoTransaction)
	}
	pool := tx.Statement.ConnPool
	if p, ok := pool.(*gorm.PreparedStmtTX); ok {
		// The transaction under GORM's statement cache: a core.Tx on a Pool.
		pool = p.Tx
	}
	if p, ok := pool.(*poolTx); ok {
		// Its ormtx.Tx: the same *sql.Tx and callbacks, and on a pool of
		// store/postgres's Open the Writer's INSERT goes with COMMIT.
		return p.cb, nil
	}
	return pool, nil
}
