package core

import (
	"context"
	"database/sql"
	"strings"
	"time"
)

// DBTX is what every store method runs its SQL on: *sql.DB, *sql.Tx, *sql.Conn,
// *sqlx.DB and *sqlx.Tx all satisfy it. Pass the business transaction to
// Insert; pass the pool to everything else.
type DBTX interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// TxBeginner is implemented by pools (*sql.DB, *sql.Conn, *sqlx.DB). Stores
// whose claim needs its own transaction detect it by type assertion; handed a
// transaction instead, they run inside it.
type TxBeginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// InsertOptions controls how Store.Insert writes new rows.
type InsertOptions struct {
	// LeaseOwner, when set, inserts the rows already leased by this owner at
	// LeaseAt, so that no other instance's poller claims them while this
	// process delivers them through its hot path.
	LeaseOwner string
	LeaseAt    time.Time
}

// ClaimParams selects the events a claim leases.
type ClaimParams struct {
	Owner string    // lease owner token; required
	Now   time.Time // current time; rows with available_at <= Now qualify
	// LeaseTimeout: a lease older than Now-LeaseTimeout has expired and the
	// row is claimable again. Required (> 0).
	LeaseTimeout time.Duration
	// SkipRecent leaves rows created within this duration before Now alone.
	SkipRecent time.Duration
	Limit      int // at most this many rows; required (> 0)
	// From, when not zero, leaves out rows created before it: the claim
	// starts its walk of the pending rows at From instead of at the oldest
	// one. A poller draining a backlog passes the created_at of the last row
	// its previous claim took, so that the claim does not step again over
	// the rows delivered since (on PostgreSQL their dead index entries stay
	// at the head of the pending index until VACUUM) nor over the rows it
	// holds. Rows left behind From (retries, released or expired leases,
	// late commits) are found by the next claim without From; the caller
	// must make one often enough. A store may ignore From: claiming from the
	// oldest row is always correct.
	From time.Time
}

// RowError is a stored row that could not be decoded into an Event.
type RowError struct {
	ID  string
	Err error
}

func (e RowError) Error() string { return "decode event " + e.ID + ": " + e.Err.Error() }

// DeadFilter narrows dead-event queries. Empty fields match everything.
type DeadFilter struct {
	EventType     string
	AggregateType string
	Limit         int // for queries; 0 means the store's default (100)
}

// Store is the service-provider interface each SQL dialect implements. Every
// method takes the handle to run on. Write-backs after a claim are fenced by
// the owner token: they change nothing (and report false) when the row is no
// longer leased by that owner, and they never move a terminal row.
//
// # Optional capabilities and wrappers
//
// A store may offer more than this interface: the package documentation
// lists every optional capability (BatchMarker, DoneDeleter, LeaseRenewer,
// OrderedStore, Inspector, Locker, InsertNotifier, WakeSource, and those
// of packages purge, store and migrations), what implements it and what
// uses it. The library finds them with StoreAs, never with a plain type
// assertion. A store that wraps another, for instance to add
// metrics or tracing by embedding Store, implements StoreUnwrapper
// (Unwrap() Store) so that the capabilities of the store it wraps stay
// visible:
//
//	type timedStore struct{ core.Store }
//
//	func (s timedStore) Unwrap() core.Store { return s.Store }
//
// Without Unwrap such a wrapper hides them: the dispatcher then marks events
// DONE one statement at a time and refuses DeleteDelivered.
type Store interface {
	// Insert writes envs as NEW rows in one or more multi-row statements. A
	// duplicate event id returns an error matching ErrDuplicateEvent.
	Insert(ctx context.Context, db DBTX, envs []Envelope, opts InsertOptions) error

	// Claim leases up to p.Limit deliverable rows for p.Owner in
	// (created_at, event_id) order and returns them. Concurrent claimers never
	// receive the same row while its lease is live. Rows that were leased but
	// cannot be decoded are reported in bad (the caller marks them DEAD).
	Claim(ctx context.Context, db DBTX, p ClaimParams) (events []Event, bad []RowError, err error)

	// Release drops owner's lease on ids without counting an attempt, so that
	// any poller may claim them at once. It returns how many rows it released.
	Release(ctx context.Context, db DBTX, owner string, ids []string) (int64, error)

	// MarkDone records a delivery.
	MarkDone(ctx context.Context, db DBTX, owner, id string, now time.Time) (bool, error)
	// MarkRetry records a failure: attempts+1, RETRY, next attempt at next.
	MarkRetry(ctx context.Context, db DBTX, owner, id string, next time.Time, lastErr string) (bool, error)
	// MarkDead records a final failure: attempts+1, DEAD.
	MarkDead(ctx context.Context, db DBTX, owner, id string, now time.Time, lastErr string) (bool, error)

	// Get returns one event by id, whatever its status; an error matching
	// ErrNotFound when it does not exist.
	Get(ctx context.Context, db DBTX, id string) (Event, error)

	DeadStore
	Purger
}

// DeadStore is the part of Store the dead-event manager uses.
type DeadStore interface {
	// QueryDead returns DEAD events matching f, oldest first.
	QueryDead(ctx context.Context, db DBTX, f DeadFilter) ([]Event, error)
	// CountDead counts DEAD events matching f.
	CountDead(ctx context.Context, db DBTX, f DeadFilter) (int64, error)
	// ReplayDead moves the DEAD events ids back to NEW with attempts 0 and the
	// error cleared; it returns how many it moved (non-DEAD ids are skipped).
	ReplayDead(ctx context.Context, db DBTX, ids []string, now time.Time) (int64, error)
	// ReplayDeadBatch replays up to limit DEAD events matching f, oldest first,
	// and returns how many it moved.
	ReplayDeadBatch(ctx context.Context, db DBTX, f DeadFilter, limit int, now time.Time) (int64, error)
}

// PurgeParams selects the terminal rows a purge deletes.
type PurgeParams struct {
	// DoneBefore: DONE rows that finished before this time go. Zero keeps them.
	DoneBefore time.Time
	// DeadBefore: DEAD rows that died before this time go. Zero keeps them.
	DeadBefore time.Time
	// Limit caps the rows deleted by one call; required (> 0).
	Limit int
}

// Purger deletes old terminal rows.
type Purger interface {
	// Purge deletes up to p.Limit terminal rows selected by p, oldest first,
	// and returns how many it deleted. Each call is one short statement.
	Purge(ctx context.Context, db DBTX, p PurgeParams) (int64, error)
}

// TruncateError returns msg as stored in last_error: valid UTF-8 without NUL
// bytes, cut to MaxLastErrorLen bytes on a character boundary.
func TruncateError(msg string) string {
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	msg = strings.ReplaceAll(msg, "\x00", "\uFFFD")
	if len(msg) <= MaxLastErrorLen {
		return msg
	}
	cut := MaxLastErrorLen
	for cut > 0 && !utf8RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
