package core

import (
	"context"
	"fmt"
	"time"
)

// StatusWaiting is an ordered event whose predecessor of the same key has not
// finished yet. It is not pending: claims never see it. Finishing the
// predecessor promotes it to NEW.
const StatusWaiting Status = 4

// DeadPolicy is what a DEAD event does to the later events of its key.
type DeadPolicy int

const (
	// DeadBlocks (the default) keeps the key at the dead event: later events
	// wait until the dead one is replayed and delivered, or skipped.
	DeadBlocks DeadPolicy = iota
	// DeadContinues moves the key past the dead event: the next event of
	// the key is delivered as if the dead one had been delivered.
	DeadContinues
)

// String returns "block" or "continue".
func (p DeadPolicy) String() string {
	switch p {
	case DeadBlocks:
		return "block"
	case DeadContinues:
		return "continue"
	}
	return fmt.Sprintf("DeadPolicy(%d)", int(p))
}

// Ordering names the aggregate types whose events are delivered in order per
// key (aggregate type and aggregate id), each with its DeadPolicy. The nil
// Ordering orders nothing.
//
// For the events of one key, the listener call of an event starts only after
// the previous event of that key finished with DONE (or, with DeadContinues,
// DEAD), whichever instance wrote or claims them. A key's order is the commit
// order of the transactions that wrote its events, and the write order
// within a transaction; the clocks of the writing hosts play no part.
//
// Every process sharing a table must use the same Ordering: it is part of
// the store's configuration (postgres.Config, mysql.Config, sqlite.Config),
// which the Writer, the Dispatcher and the dead-event tools all share.
type Ordering map[string]DeadPolicy

// Validate reports an empty or over-long aggregate type name, or an unknown
// policy, as an error matching ErrInvalid.
func (o Ordering) Validate() error {
	for name, p := range o {
		switch {
		case name == "":
			return Invalid("ordering", "aggregate type name is empty")
		case len(name) > MaxAggregateTypeLen:
			return Invalid("ordering", "aggregate type %q is longer than %d bytes", name, MaxAggregateTypeLen)
		case p != DeadBlocks && p != DeadContinues:
			return Invalid("ordering", "aggregate type %q has unknown DEAD policy %d", name, int(p))
		}
	}
	return nil
}

// Ordered reports whether events of aggregate type aggType are ordered, and
// with which DEAD policy.
func (o Ordering) Ordered(aggType string) (DeadPolicy, bool) {
	p, ok := o[aggType]
	return p, ok
}

// BlockedKey is a key whose head event is DEAD and whose policy is
// DeadBlocks: its later events wait until the head is replayed or skipped.
type BlockedKey struct {
	AggregateType string
	AggregateID   string
	EventID       string    // the dead head
	EventType     string    // of the dead head
	Seq           int64     // the head's position in its key
	DeadAt        time.Time // when the head went DEAD
	LastError     string    // the head's last error
	Waiting       int64     // later events of the key waiting behind it
}

// InsertResult is what OrderedStore.InsertOrdered reports of a write.
type InsertResult struct {
	// Seqs holds the sequence number of each envelope, in the order of the
	// write; 0 for unordered envelopes. Nil when none is ordered.
	Seqs []int64
	// Waiting holds the ids of the envelopes stored as StatusWaiting.
	Waiting []string
}

// OrderedStore is the optional capability of a Store that delivers the events
// of the aggregate types of its Ordering in order per key. The SQL stores of
// this module implement it; the library finds it with StoreAs.
//
// Each ordered event carries a sequence number (Event.Seq) taken from a
// per-key counter row, which the writing transaction updates and so locks
// until it commits: two transactions writing one key serialise on that
// row, and sequence order is commit order. Only a key's head (the first
// event whose predecessors all finished) is pending; the others are stored
// as StatusWaiting, which no claim reads. Finishing the head promotes its
// successor, in the same transaction.
type OrderedStore interface {
	// Ordering returns the store's ordering; nil when it orders nothing.
	Ordering() Ordering

	// InsertOrdered is Insert that also reports the sequence number of each
	// envelope and the ids of those it stored as StatusWaiting: they are
	// not leased by opts.LeaseOwner and must not be delivered until
	// promoted. An ordered envelope without an aggregate id is an error
	// matching ErrInvalid, and nothing is written.
	InsertOrdered(ctx context.Context, db DBTX, envs []Envelope, opts InsertOptions) (InsertResult, error)

	// MarkDoneOrdered records the delivery of ids, all leased by owner, as
	// MarkDoneBatch does, and, in the same transaction, moves the key of
	// each ordered one past it and promotes the key's next event from
	// WAITING to NEW, leased by owner at now. It returns how many rows it
	// marked DONE and the promoted events, which the caller delivers (or
	// releases). Unordered ids are marked DONE as MarkDoneBatch would.
	MarkDoneOrdered(ctx context.Context, db DBTX, owner string, ids []string, now time.Time) (int64, []Event, error)

	// MarkDeadOrdered records the final failure of id as MarkDead does. When
	// the event is ordered and its aggregate type's policy is DeadContinues,
	// the key moves past it and its next event is promoted, leased by owner,
	// and returned, as in MarkDoneOrdered.
	MarkDeadOrdered(ctx context.Context, db DBTX, owner, id string, now time.Time, lastErr string) (bool, []Event, error)

	// BlockedKeys lists the keys blocked by a DEAD head, oldest dead head
	// first; f filters by aggregate type (EventType filters the head's) and
	// caps the list (0: 100).
	BlockedKeys(ctx context.Context, db DBTX, f DeadFilter) ([]BlockedKey, error)

	// SkipDead moves the keys of the DEAD ordered events ids past them
	// without delivering them, and makes each key's next event NEW (not
	// leased, for any poller). A skipped event stays DEAD, with its error,
	// so that it can still be inspected, replayed or purged; replaying it
	// later delivers it out of its key's order. It returns how many keys
	// it moved; ids that are not DEAD heads of a key are left alone.
	SkipDead(ctx context.Context, db DBTX, ids []string, now time.Time) (int64, error)
}

// OrderedNoWaitMarker is the optional capability of an OrderedStore whose
// DONE writes can pass the key rows other transactions hold (the SQL stores
// of this module on PostgreSQL, MySQL 8 and MariaDB 10.6; on the others it
// waits as MarkDoneOrdered does and leaves nothing held). A key's row is
// locked by each writer of the key until it commits: the dispatcher writes
// its DONE outcomes with MarkDoneOrderedNoWait, so that they do not queue
// behind the writers of a few keys, and hands the held ones to a writer of
// their own that waits for them with MarkDoneOrdered.
//
// The dispatcher uses it only on the value that implements OrderedStore, not
// through StoreUnwrapper: a wrapper that changes MarkDoneOrdered is not
// bypassed unless it also implements this method.
type OrderedNoWaitMarker interface {
	// MarkDoneOrderedNoWait is MarkDoneOrdered for the ids whose key rows
	// no other transaction holds, and for the unordered ones: it records
	// them as MarkDoneOrdered does, in transactions of its own, and returns
	// as held, untouched, the ids of the ordered rows whose key rows another
	// transaction held, for a later MarkDoneOrdered.
	MarkDoneOrderedNoWait(ctx context.Context, db DBTX, owner string, ids []string, now time.Time) (n int64, promoted []Event, held []string, err error)
}
