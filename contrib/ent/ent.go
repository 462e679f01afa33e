// Package outboxent writes outbox events in ent transactions, with delivery
// through the dispatcher's hot path right after COMMIT.
//
// ent generates its transaction type for each schema, so this package works
// on any generated client through two pieces: a Driver, the ent SQL driver
// the client runs on, which lets Do see the *sql.Tx under each transaction
// the client begins; and Do, which begins the transaction with the client's
// own Tx method, carries it in the context as a core.Tx, and commits it with
// the generated Tx's Commit (so ent's commit hooks run as usual):
//
//	drv, _ := outboxent.NewDriver(entsql.OpenDB(dialect.Postgres, db), outboxent.Config{})
//	client := ent.NewClient(ent.Driver(drv))
//	err := outboxent.Do(ctx, client.Tx, func(ctx context.Context, tx *ent.Tx) error {
//		if _, err := tx.Order.Create().SetID("o-1").Save(ctx); err != nil {
//			return err
//		}
//		_, err := ob.Writer().Write(ctx, env)
//		return err
//	})
//
// The Writer finds the transaction in the context and writes on its *sql.Tx;
// the events reach the hot queue once COMMIT has succeeded, and nothing is
// delivered after a rollback or a failed COMMIT.
//
// The outbox's own components (outbox.Config.DB) run on the *sql.DB given to
// entsql.OpenDB, and the store is the one of its database.
package outboxent

import (
	"context"
	"database/sql"
	"log/slog"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/ormtx"
)

// Config configures a Driver. The zero value is valid.
type Config struct {
	// Logger receives panics recovered from after-commit and after-rollback
	// callbacks of the transactions begun on the Driver, and callbacks registered
	// on an ended transaction. Nil: outboxlog.Default(), which sends warnings and
	// errors to slog.Default(). slog.New(slog.DiscardHandler) silences it; a
	// zerolog.Logger zl is wired in with slog.New(zerolog.NewSlogHandler(zl)).
	Logger *slog.Logger
}

// Driver is an ent SQL driver whose transactions Do can carry outbox events
// in. It behaves as the *entsql.Driver it wraps; build the ent client on it
// (ent.NewClient(ent.Driver(drv))).
type Driver struct {
	*entsql.Driver
	log *slog.Logger // nil: outboxlog.Default()
}

var _ dialect.Driver = (*Driver)(nil)

// NewDriver wraps drv. It returns an error matching core.ErrInvalid when drv
// is nil.
func NewDriver(drv *entsql.Driver, cfg Config) (*Driver, error) {
	if drv == nil {
		return nil, core.Invalid("ent driver", "is nil")
	}
	return &Driver{Driver: drv, log: cfg.Logger}, nil
}

// Tx begins a transaction, as the wrapped driver does.
func (d *Driver) Tx(ctx context.Context) (dialect.Tx, error) { return d.BeginTx(ctx, nil) }

// BeginTx begins a transaction with options, as the wrapped driver does, and
// hands it to the Do that asked for it, if any.
func (d *Driver) BeginTx(ctx context.Context, opts *sql.TxOptions) (dialect.Tx, error) {
	tx, err := d.Driver.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	if s, ok := ctx.Value(slotKey{}).(*slot); ok && s.tx == nil {
		s.tx, s.drv = tx, d
	}
	return tx, nil
}

// slot receives, from the Driver, the transaction that a begin function
// called by Do starts.
type slot struct {
	tx  dialect.Tx
	drv *Driver
}

type slotKey struct{}

// Committer is an ent transaction: the *Tx of a generated client.
type Committer interface {
	Commit() error
	Rollback() error
}

// Do runs fn in a transaction that begin starts (the generated client's Tx
// or a function calling its BeginTx), with the context fn receives carrying
// it (see core.TxFromContext). It commits with the transaction's Commit when
// fn returns nil and rolls back when fn returns an error or panics (the panic
// goes on). Events written in it with a Writer whose hook is the
// dispatcher's are delivered through the hot path once COMMIT has
// succeeded; after a rollback or a failed COMMIT nothing is delivered.
//
// The client must run on a Driver: otherwise Do rolls back and returns an
// error matching core.ErrInvalid. Do does not join a transaction the
// context already carries: like the client's Tx, a Do inside a Do begins a
// second, independent transaction.
//
// Do returns fn's error unchanged, or the error of BEGIN or COMMIT wrapped
// with context. A nil begin or fn returns an error matching core.ErrInvalid.
func Do[T Committer](ctx context.Context, begin func(ctx context.Context) (T, error), fn func(ctx context.Context, tx T) error) error {
	if begin == nil {
		return core.Invalid("ent begin function", "is nil")
	}
	if fn == nil {
		return core.Invalid("transaction function", "is nil")
	}
	return ormtx.Do(ctx, nil, func(ctx context.Context) (ormtx.Begun, error) {
		s := &slot{}
		tx, err := begin(context.WithValue(ctx, slotKey{}, s))
		if err != nil {
			return ormtx.Begun{}, err
		}
		sqlTx, ok := sqlTxOf(s.tx)
		if !ok {
			_ = tx.Rollback()
			return ormtx.Begun{}, core.Invalid("ent client",
				"does not run on an outboxent.Driver, so the outbox cannot write in its transactions: "+
					"build it with ent.NewClient(ent.Driver(drv)), drv from outboxent.NewDriver")
		}
		return ormtx.Begun{End: tx, Exec: sqlTx, ORM: tx, Logger: s.drv.log, Pool: s.drv.Driver.ExecQuerier}, nil
	}, func(ctx context.Context, t *ormtx.Tx) error {
		return fn(ctx, t.ORM().(T))
	})
}

// sqlTxOf returns the *sql.Tx under a transaction of an entsql.Driver.
func sqlTxOf(tx dialect.Tx) (*sql.Tx, bool) {
	etx, ok := tx.(*entsql.Tx)
	if !ok {
		return nil, false
	}
	sqlTx, ok := etx.Tx.(*sql.Tx)
	return sqlTx, ok
}

// From returns the ent transaction ctx carries if Do began it with T's
// client.
func From[T Committer](ctx context.Context) (T, bool) {
	var zero T
	t, ok := ormtx.From(ctx)
	if !ok {
		return zero, false
	}
	tx, ok := t.ORM().(T)
	return tx, ok
}
