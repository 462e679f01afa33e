package outboxgorm

import (
	"context"
	"database/sql"
	"log/slog"

	"gorm.io/gorm"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/ormtx"
)

// Pool returns db as the connection pool of a GORM dialector (the Conn of
// its Config), so that the transactions GORM itself begins on it
// (db.Transaction, db.Begin) can carry outbox events with the hot path:
// their connection pool is a core.Tx, whose after-commit callbacks run once
// GORM's COMMIT has succeeded, and DBTX hands it to Writer.WriteTx.
//
//	gdb, err := gorm.Open(postgres.New(postgres.Config{Conn: outboxgorm.Pool(db, outboxgorm.Config{})}))
//	err = gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
//		if err := tx.Create(&order).Error; err != nil {
//			return err
//		}
//		dbtx, err := outboxgorm.DBTX(tx)
//		if err != nil {
//			return err
//		}
//		_, err = ob.Writer().WriteTx(ctx, dbtx, env) // hot path after COMMIT
//		return err
//	})
//
// cfg.Logger receives panics of the callbacks; cfg.TxOptions is not used
// (GORM passes its own). gormDB.DB() still returns db.
func Pool(db *sql.DB, cfg Config) gorm.ConnPool {
	return &pool{DB: db, log: cfg.Logger}
}

// pool is a *sql.DB whose BeginTx returns transactions with callbacks.
type pool struct {
	*sql.DB
	log *slog.Logger // nil: outboxlog.Default()
}

var (
	_ gorm.ConnPoolBeginner = (*pool)(nil)
	_ gorm.GetDBConnector   = (*pool)(nil)
	_ gorm.Tx               = (*poolTx)(nil)
	_ core.Tx               = (*poolTx)(nil)
)

// BeginTx begins a transaction whose Commit and Rollback run the outbox's
// callbacks.
func (p *pool) BeginTx(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
	tx, err := p.DB.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &poolTx{Tx: tx, cb: ormtx.NewTxFrom(ormtx.Begun{Exec: tx, Logger: p.log, Pool: p.DB}), ctx: context.WithoutCancel(ctx)}, nil
}

// GetDBConn returns the *sql.DB, for gorm.DB.DB.
func (p *pool) GetDBConn() (*sql.DB, error) { return p.DB, nil }

// poolTx is a transaction GORM began on a pool: a *sql.Tx for GORM's
// statements and a core.Tx for the Writer's.
type poolTx struct {
	*sql.Tx
	cb  *ormtx.Tx
	ctx context.Context // BeginTx's, without its cancellation: the callbacks'
}

// Commit commits, then runs the after-commit callbacks, or the
// after-rollback ones when COMMIT failed.
func (t *poolTx) Commit() error {
	err := t.Tx.Commit()
	t.cb.Finish(t.ctx, err == nil)
	return err
}

// Rollback rolls back, then runs the after-rollback callbacks.
func (t *poolTx) Rollback() error {
	err := t.Tx.Rollback()
	t.cb.Finish(t.ctx, false)
	return err
}

// AfterCommit registers fn to run once after a successful COMMIT.
func (t *poolTx) AfterCommit(fn func(ctx context.Context)) { t.cb.AfterCommit(fn) }

// AfterRollback registers fn to run once after a rollback or a failed COMMIT.
func (t *poolTx) AfterRollback(fn func(ctx context.Context)) { t.cb.AfterRollback(fn) }
