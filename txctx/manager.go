package txctx

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"reflect"

	"github.com/jmoiron/sqlx"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/txhooks"
	"github.com/outboxkit/outbox/internal/writectx"
	"github.com/outboxkit/outbox/outboxlog"
)

// Config configures a Manager. The zero value is valid.
type Config struct {
	// TxOptions sets the isolation level and read-only flag of the
	// transactions the Manager begins. New copies it. Default: nil (the
	// driver's defaults).
	TxOptions *sql.TxOptions

	// Logger receives panics recovered from callbacks, callbacks registered on a
	// transaction that has ended, and rollback failures Do cannot return because
	// fn panicked. Nil: outboxlog.Default(), which sends warnings and errors to
	// slog.Default(). slog.New(slog.DiscardHandler) silences it; a zerolog.Logger
	// zl is wired in with slog.New(zerolog.NewSlogHandler(zl)).
	Logger *slog.Logger
}

// Manager begins transactions on one handle and carries them in contexts. It
// is safe for concurrent use.
type Manager struct {
	db     core.TxBeginner
	sqlxDB sqlxBeginner // non-nil when db is a *sqlx.DB or *sqlx.Conn
	handle any          // identifies db for joining
	holds  bool         // db's driver holds marked writes (writectx.OnDriver)
	txOpts *sql.TxOptions
	log    *slog.Logger
}

// sqlxBeginner is implemented by *sqlx.DB and *sqlx.Conn.
type sqlxBeginner interface {
	BeginTxx(ctx context.Context, opts *sql.TxOptions) (*sqlx.Tx, error)
}

// New returns a Manager that begins its transactions on db: a *sql.DB,
// *sql.Conn, *sqlx.DB, *sqlx.Conn or anything else with BeginTx. Build it from
// a *sqlx.DB (sqlx.NewDb(db, driverName)) or *sqlx.Conn for Tx.Sqlx. It returns
// an error matching core.ErrInvalid when db is nil.
func New(db core.TxBeginner, cfg Config) (*Manager, error) {
	if isNil(db) {
		return nil, core.Invalid("txctx handle", "is nil")
	}
	m := &Manager{db: db, handle: handleOf(db), holds: writectx.OnDriver(db), log: outboxlog.Or(cfg.Logger)}
	if cfg.TxOptions != nil {
		opts := *cfg.TxOptions
		m.txOpts = &opts
	}
	if x, ok := db.(sqlxBeginner); ok {
		m.sqlxDB = x
	}
	return m, nil
}

// Do runs fn in a transaction carried by the context fn receives (see From
// and core.TxFromContext). It begins a transaction, or joins the one ctx
// already carries (see the package documentation), commits when fn returns
// nil and rolls back otherwise.
//
// Do returns fn's error unchanged (joined with the rollback error if the
// rollback failed too), or the error of BEGIN or COMMIT wrapped with context.
// When fn panics, Do rolls back, runs the after-rollback callbacks and lets
// the panic continue. A nil fn returns an error matching core.ErrInvalid.
func (m *Manager) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	if fn == nil {
		return core.Invalid("transaction function", "is nil")
	}
	if t, ok := From(ctx); ok && t.handle == m.handle {
		if t.ended() {
			return fmt.Errorf("join transaction: %w", sql.ErrTxDone)
		}
		return fn(ctx)
	}

	// The callbacks get ctx as it came in: no cancellation, and no trace of
	// this transaction, which is over by the time they run. The
	// transaction's own context starts from it too (see begin).
	cbCtx := context.WithoutCancel(ctx)
	t, err := m.begin(ctx, cbCtx)
	if err != nil {
		return err
	}
	returned := false
	defer func() {
		if returned {
			return
		}
		// fn panicked (or called runtime.Goexit). Not recovering keeps the
		// panic's value and stack intact; it goes on once this returns.
		if err := t.rollback(); err != nil {
			m.log.LogAttrs(cbCtx, slog.LevelError, "txctx: roll back transaction after panic", outboxlog.Err(err))
		}
		t.finish(cbCtx, false)
	}()

	err = fn(core.ContextWithTx(ctx, t))
	returned = true

	if err != nil {
		if rbErr := t.rollback(); rbErr != nil {
			err = errors.Join(err, fmt.Errorf("roll back transaction: %w", rbErr))
		}
		t.finish(cbCtx, false)
		return err
	}
	if err := t.commit(); err != nil {
		t.finish(cbCtx, false)
		return fmt.Errorf("commit transaction: %w", err)
	}
	t.finish(cbCtx, true)
	return nil
}

// begin starts a transaction whose lifetime is detached from ctx.
//
// database/sql rolls a transaction back, in a goroutine of its own, as soon
// as the context given to BeginTx is done; Commit then fails and Rollback
// reports sql.ErrTxDone while the rollback may still be running. Do owns the
// end of the transaction instead, so that after-rollback callbacks run only
// once the rollback has happened. Waiting for a pooled connection and BEGIN
// must still honour ctx, so the context given to BeginTx follows ctx's
// cancellation until BeginTx returns and is detached from it afterwards.
//
// detached is context.WithoutCancel(ctx), which Do also needs.
func (m *Manager) begin(ctx, detached context.Context) (*Tx, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("begin transaction: %w", context.Cause(ctx))
	}
	txCtx, cancel := context.WithCancel(detached)
	detach := context.AfterFunc(ctx, cancel)

	t := &Tx{handle: m.handle, holds: m.holds, cancel: cancel, hooks: txhooks.Hooks{Log: m.log, Prefix: "txctx"}}
	var err error
	if m.sqlxDB != nil {
		t.sqlxTx, err = m.sqlxDB.BeginTxx(txCtx, m.txOpts)
		if err == nil {
			t.sqlTx = t.sqlxTx.Tx
		}
	} else {
		t.sqlTx, err = m.db.BeginTx(txCtx, m.txOpts)
	}

	if !detach() {
		// ctx ended while BEGIN was running: database/sql rolls back what
		// it may have begun; Rollback makes sure of it before we return.
		cancel()
		if err == nil {
			_ = t.sqlTx.Rollback()
		}
		return nil, fmt.Errorf("begin transaction: %w", context.Cause(ctx))
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("begin transaction: %w", err)
	}
	return t, nil
}

// handleOf returns what identifies db when Do decides whether to join a
// transaction: the *sql.DB or *sql.Conn under an sqlx wrapper, db itself
// otherwise.
func handleOf(db core.TxBeginner) any {
	switch h := db.(type) {
	case *sqlx.DB:
		return h.DB
	case *sqlx.Conn:
		return h.Conn
	}
	if !reflect.TypeOf(db).Comparable() {
		// Cannot be compared, so cannot be recognised: a unique key
		// makes Do never join across Managers over such a handle.
		return new(byte)
	}
	return db
}

func isNil(db core.TxBeginner) bool {
	if db == nil {
		return true
	}
	switch v := reflect.ValueOf(db); v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return v.IsNil()
	}
	return false
}
