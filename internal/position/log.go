// Package position is the position delivery mode (outbox.DeliveryPosition):
// events are written with core.StatusStream and a monotonic integer, their
// position, and one reader per table delivers them in position order from a
// persisted position, so that a delivered event costs no write after its
// INSERT. Only failures (RETRY, DEAD) write the row again; the claim path
// serves them from there.
//
// The store side is Log, implemented by the SQL stores; the reader, its gap
// tracking and the store wrapper that routes the dispatcher's outcomes are
// here. docs/design/position.md has the argument.
package position

import (
	"context"
	"time"

	"github.com/outboxkit/outbox/core"
)

// Row is one STREAM row read by position: its event, or the error that
// kept it from decoding.
type Row struct {
	Pos   int64
	ID    string
	Event core.Event
	Err   error // the row could not be decoded: the reader marks it DEAD
}

// Token is what a read hands a gap it leaves: the gap is final once the
// store's Horizon has reached it (see Log.Horizon). 0 means final at once.
type Token uint64

// State is what the reader persists: every position at or below Floor is
// resolved; Cursor is the largest position read; Open are the positions in
// (Floor, Cursor] not known to be resolved (gaps, and events whose outcome
// had not landed), as ranges.
type State struct {
	Floor, Cursor int64
	Open          []Range
	Owner         string
	UpdatedAt     time.Time
}

// Range is the positions Lo to Hi, both included.
type Range struct{ Lo, Hi int64 }

// Log is the store side of position delivery, implemented by the SQL stores
// whose dialect supports it. Every method takes the handle to run on.
// HeldInserter is a Log whose STREAM INSERT a transaction may hold and
// send with its next statement or its COMMIT (see package writectx).
type HeldInserter interface {
	// InsertStreamHeld is InsertStream for a ctx that writectx marks: at
	// receives the position of each event (by its index in envs) when its
	// INSERT runs, which may be after InsertStreamHeld has returned, or
	// never when the transaction rolls back first.
	InsertStreamHeld(ctx context.Context, db core.DBTX, envs []core.Envelope, at func(i int, pos int64)) error
}

type Log interface {
	// CheckSchema is core.SchemaChecker's for a table used by position
	// delivery: a *core.SchemaError when it lacks the pos column or the
	// position table (migration 0003).
	CheckSchema(ctx context.Context, db core.DBTX) error
	// InsertStream writes envs as STREAM rows in db (the business
	// transaction) and returns the position of each, in the order of envs.
	// The caller has validated nothing: InsertStream validates like
	// core.Store.Insert.
	InsertStream(ctx context.Context, db core.DBTX, envs []core.Envelope) ([]int64, error)
	// ReadAfter returns up to limit STREAM rows with a position above
	// after, in position order, and the token of the read: a position below
	// the largest returned that the read did not see may still commit until
	// Horizon reaches the token.
	ReadAfter(ctx context.Context, db core.DBTX, after int64, limit int) ([]Row, Token, error)
	// ReadKeysAfter is ReadAfter returning the positions and ids alone
	// (Row.Event zero): what the reader reads while the hot path delivers
	// most rows itself.
	ReadKeysAfter(ctx context.Context, db core.DBTX, after int64, limit int) ([]Row, Token, error)
	// ReadRanges returns the STREAM rows whose position lies in one of rs,
	// in position order.
	ReadRanges(ctx context.Context, db core.DBTX, rs []Range) ([]Row, error)
	// Horizon returns the horizon, the token below which no transaction
	// that took a position is still running (a gap whose token is at most
	// the horizon, read again after Horizon returned, is final), and the
	// token of a read made now.
	Horizon(ctx context.Context, db core.DBTX) (horizon, now Token, err error)
	// ClaimState makes owner the writer of the table's persisted position
	// and returns it (the zero State, saved, when there is none yet).
	ClaimState(ctx context.Context, db core.DBTX, owner string, now time.Time) (State, error)
	// SaveState writes st if owner still owns the position; false when
	// another reader took it over.
	SaveState(ctx context.Context, db core.DBTX, owner string, st State, now time.Time) (bool, error)
	// LoadState returns the persisted position without taking it, for
	// statistics; the zero State when there is none.
	LoadState(ctx context.Context, db core.DBTX) (State, error)
	// PurgeStream deletes up to limit STREAM rows at or below the
	// persisted floor created before before, and returns how many.
	PurgeStream(ctx context.Context, db core.DBTX, before time.Time, limit int) (int64, error)
	// MarkFailed moves the STREAM row id to RETRY (next attempt at at) or,
	// when dead, to DEAD (done_at at), counting an attempt and keeping
	// lastErr; false when the row is not STREAM any more.
	MarkFailed(ctx context.Context, db core.DBTX, id string, dead bool, at time.Time, lastErr string) (bool, error)
	// Divert moves the STREAM rows ids of key k (ordered aggregate type),
	// given in the key's order, to the claim path's ordered delivery, in
	// one transaction: it takes their sequence numbers from the key table
	// and writes each row with its seq, the first NEW (or, with f, RETRY or
	// DEAD as f says) when every earlier event of the key has finished, the
	// others WAITING; rows no longer STREAM are left out. With f, ids[0] is
	// the key's failed head and Divert reports whether its row was still
	// STREAM. Without f, a key with no unfinished event in the key table is
	// left to position delivery: Divert writes nothing and reports false;
	// else true.
	Divert(ctx context.Context, db core.DBTX, k Key, ids []string, f *Failure) (bool, error)
	// OpenKeys returns the keys whose events the claim path's ordered
	// delivery has not finished (done_seq below last_seq in the key
	// table): their later events wait behind them.
	OpenKeys(ctx context.Context, db core.DBTX) ([]Key, error)
}

// Key is one key of an ordered aggregate type.
type Key struct{ AggregateType, AggregateID string }

// Failure is the outcome Divert writes for a key's failed head.
type Failure struct {
	Dead    bool
	At      time.Time // the next attempt (RETRY), or when it died (DEAD)
	LastErr string
}

// Source is implemented by the stores that offer a Log, through an
// embedded Provider. Its method is unexported, so that the Log, a type of
// this internal package, is reachable only from inside the module; a type
// that embeds a store, or a wrapper that unwraps to one (core.StoreAs),
// keeps it. LogOf is the accessor.
type Source interface {
	positionLog() Log
}

// Provider gives a store the Source capability: the store embeds it under
// an unexported alias (type positionProvider = position.Provider), so that
// neither the field nor the method shows in the store's exported API.
type Provider struct{ log func() Log }

// NewProvider returns a Provider whose Log is log(); log may return nil
// when the store's database has no position delivery yet.
func NewProvider(log func() Log) Provider { return Provider{log: log} }

func (p Provider) positionLog() Log {
	if p.log == nil {
		return nil
	}
	return p.log()
}

// LogOf returns the position log of st, looking through wrappers with
// core.StoreAs; nil when st has none, or its database has no position
// delivery yet.
func LogOf(st core.Store) Log {
	src, ok := core.StoreAs[Source](st)
	if !ok {
		return nil
	}
	return src.positionLog()
}
