package pgxtx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/pgxlazy"
	"github.com/outboxkit/outbox/internal/txhooks"
	"github.com/outboxkit/outbox/outboxlog"
)

// Beginner begins pgx transactions: *pgxpool.Pool and *pgx.Conn implement it.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Config configures a Manager. The zero value is valid.
type Config struct {
	// TxOptions sets the isolation level, access mode and deferrable mode
	// of the transactions the Manager begins. Default: the server's.
	TxOptions pgx.TxOptions

	// HoldWrites says which of the outbox's INSERTs of events a
	// transaction holds back and sends with its next statement, or with
	// its COMMIT, in the same round trip: a business statement, an outbox
	// write and COMMIT then cost two round trips instead of three. Only
	// core.Writer's INSERTs of events none of whose aggregate types is
	// ordered are held (in position delivery too: the positions come back
	// with the COMMIT's batch). Held writes
	// still run in the order written, before anything after them, so that
	// later statements see their rows and a savepoint rolled back undoes
	// them; a rollback drops them unsent. The NOTIFY with which a Writer
	// without a hot path signals its write is held with it.
	//
	// What changes for a held write: Write returns before its INSERT has
	// run, so that an INSERT that fails fails the statement it was sent
	// with, with an error naming the outbox write, or Do's COMMIT, and the
	// transaction rolls back; a WriterHook's AfterWrite runs before the
	// INSERT. Holding stops for the rest of a transaction at tx.Begin,
	// tx.Conn and tx.LargeObjects, whose statements reach the connection
	// directly. Only on a *pgxpool.Pool or a *pgx.Conn.
	//
	// Default HoldGeneratedIDs: the writes of events whose ids the library
	// generated (core.EnvelopeSpec.ID left empty), which no duplicate id
	// can fail, so that core.ErrDuplicateEvent still comes from Write for
	// an id the caller chose.
	HoldWrites Hold

	// Logger receives panics recovered from callbacks, callbacks registered on a
	// transaction that has ended, and rollback failures Do cannot return because
	// fn panicked. Nil: outboxlog.Default(), which sends warnings and errors to
	// slog.Default(). slog.New(slog.DiscardHandler) silences it; a zerolog.Logger
	// zl is wired in with slog.New(zerolog.NewSlogHandler(zl)).
	Logger *slog.Logger
}

// Hold says which of the outbox's INSERTs a transaction holds back to send
// with its next statement or its COMMIT; see Config.HoldWrites.
type Hold int

const (
	// HoldGeneratedIDs holds the INSERTs of events whose ids the library
	// generated. The default.
	HoldGeneratedIDs Hold = iota
	// HoldAll holds every INSERT it can, also of events whose ids the
	// caller chose: a duplicate id then fails the statement the write went
	// with, or the COMMIT, instead of Write.
	HoldAll
	// HoldNone sends every INSERT when Write is called.
	HoldNone
)

// String returns the constant's name.
func (h Hold) String() string {
	switch h {
	case HoldGeneratedIDs:
		return "HoldGeneratedIDs"
	case HoldAll:
		return "HoldAll"
	case HoldNone:
		return "HoldNone"
	}
	return fmt.Sprintf("Hold(%d)", int(h))
}

// holds reports whether a write of events whose ids the library generated
// (generatedIDs) or not may be held.
func (h Hold) holds(generatedIDs bool) bool {
	return h == HoldAll || h == HoldGeneratedIDs && generatedIDs
}

// Manager begins pgx transactions on one pool or connection and carries them
// in contexts. It is safe for concurrent use (as its pool is; a *pgx.Conn
// runs one transaction at a time).
type Manager struct {
	db   Beginner
	opts pgx.TxOptions
	hold Hold
	log  *slog.Logger
}

// ErrManagedTx is returned by Commit and Rollback of the pgx.Tx that Do hands
// to its function: Do ends the transaction when the function returns.
var ErrManagedTx = errors.New("pgxtx: the transaction is ended by Do: return nil to commit, an error to roll back")

// New returns a Manager that begins its transactions on db, a
// *pgxpool.Pool or *pgx.Conn. It returns an error matching core.ErrInvalid
// when db is nil.
func New(db Beginner, cfg Config) (*Manager, error) {
	if db == nil || (reflect.ValueOf(db).Kind() == reflect.Pointer && reflect.ValueOf(db).IsNil()) {
		return nil, core.Invalid("pgxtx handle", "is nil")
	}
	if !reflect.TypeOf(db).Comparable() {
		return nil, core.Invalid("pgxtx handle", "%T cannot be compared, so Do could not tell its transactions from another handle's", db)
	}
	if cfg.HoldWrites < HoldGeneratedIDs || cfg.HoldWrites > HoldNone {
		return nil, core.Invalid("pgxtx HoldWrites", "%v is not one of HoldGeneratedIDs, HoldAll, HoldNone", cfg.HoldWrites)
	}
	return &Manager{db: db, opts: cfg.TxOptions, hold: cfg.HoldWrites, log: outboxlog.Or(cfg.Logger)}, nil
}

// Do runs fn in a transaction: fn receives the pgx.Tx, and a context that
// carries the transaction (see From and core.TxFromContext) for the code it
// calls, core.Writer.Write among it. Do begins a transaction, or joins the
// one ctx already carries (see the package documentation), commits when fn
// returns nil and rolls back otherwise.
//
// On a pool or a connection, BEGIN goes with fn's first statement (see the
// package documentation), so that its error is that statement's.
//
// Do returns fn's error unchanged (joined with the rollback error if the
// rollback failed too), or the error of acquiring the connection (of BEGIN,
// with another Beginner) or of COMMIT wrapped with context. When fn panics,
// Do rolls back, runs the after-rollback callbacks and lets the panic
// continue. A nil fn returns an error matching core.ErrInvalid.
func (m *Manager) Do(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if fn == nil {
		return core.Invalid("transaction function", "is nil")
	}
	if t, ok := From(ctx); ok && t.handle == m.db {
		if t.hooks.Ended() {
			return fmt.Errorf("join transaction: %w", pgx.ErrTxClosed)
		}
		return fn(ctx, t.user)
	}

	if err := ctx.Err(); err != nil {
		return fmt.Errorf("begin transaction: %w", context.Cause(ctx))
	}
	ptx, release, err := m.begin(ctx)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	t := &Tx{dbtx: dbtx{ptx}, user: managedTx{ptx}, handle: m.db, hold: m.hold, hooks: txhooks.Hooks{Log: m.log, Prefix: "pgxtx"}}

	// The end of the transaction and the callbacks get ctx without its
	// cancellation and without this transaction, which is over by then.
	endCtx := context.WithoutCancel(ctx)
	returned := false
	defer func() {
		if returned {
			return
		}
		// fn panicked (or called runtime.Goexit); the panic goes on once
		// this returns.
		if err := t.rollback(endCtx); err != nil {
			m.log.LogAttrs(endCtx, slog.LevelError, "pgxtx: roll back transaction after panic", outboxlog.Err(err))
		}
		release()
		t.hooks.Finish(endCtx, false)
	}()

	err = fn(core.ContextWithTx(ctx, t), t.user)
	returned = true

	if err != nil {
		if rbErr := t.rollback(endCtx); rbErr != nil {
			err = errors.Join(err, fmt.Errorf("roll back transaction: %w", rbErr))
		}
		release()
		t.hooks.Finish(endCtx, false)
		return err
	}
	err = ptx.Commit(endCtx)
	release() // before the callbacks, which may want a connection of the pool
	if err != nil {
		t.hooks.Finish(endCtx, false)
		return fmt.Errorf("commit transaction: %w", err)
	}
	t.hooks.Finish(endCtx, true)
	return nil
}

// begin returns the transaction for Do, and what gives its connection back
// once it has ended. On a pool or a connection the transaction is begun
// with its first statement (see package pgxlazy); another Beginner's begins now.
func (m *Manager) begin(ctx context.Context) (pgx.Tx, func(), error) {
	switch db := m.db.(type) {
	case *pgxpool.Pool:
		c, err := db.Acquire(ctx)
		if err != nil {
			return nil, nil, err
		}
		return pgxlazy.New(c.Conn(), m.opts, m.hold != HoldNone), c.Release, nil
	case *pgx.Conn:
		return pgxlazy.New(db, m.opts, m.hold != HoldNone), func() {}, nil
	}
	tx, err := m.db.BeginTx(ctx, m.opts)
	return tx, func() {}, err
}

// managedTx is the pgx.Tx that Do hands to fn: pgx's own, whose Commit and
// Rollback are Do's.
type managedTx struct{ pgx.Tx }

func (managedTx) Commit(context.Context) error   { return ErrManagedTx }
func (managedTx) Rollback(context.Context) error { return ErrManagedTx }
