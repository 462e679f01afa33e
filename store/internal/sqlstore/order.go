package sqlstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
)

// Ordered delivery per key.
//
// The key table holds one row per key (aggregate type, aggregate id) of an
// ordered aggregate type: last_seq, the sequence number of the key's last
// written event, and done_seq, that of the last one finished (DONE, or DEAD
// under core.DeadContinues, or skipped). A key's events are seq
// done_seq+1 .. last_seq; done_seq+1 is its head.
//
//   - A write upserts the key's row, adding its n events to last_seq. The
//     upsert locks the row until the writing transaction ends, so two
//     writers of one key serialise there, and seq order is commit order;
//     within a write, seq follows write order. Keys are locked in sorted
//     order, so one write never deadlocks with itself; two transactions
//     writing the same keys in opposite orders can deadlock, and the
//     database aborts one of them.
//   - The first event of the write is the key's head when every earlier
//     event has finished (done_seq equals last_seq before the write): it is
//     inserted NEW, as an unordered event is (leased by its writer for the
//     hot path). Every other is inserted WAITING, which no claim reads.
//   - Finishing the head, fenced by its lease owner, updates done_seq from
//     seq-1 to seq, which takes the key's row lock and so waits for a
//     writer of the key to commit; only then, in a later statement (a new
//     snapshot under READ COMMITTED, a locking read under MySQL), is the
//     event seq+1 promoted from WAITING to NEW, leased by the finisher. So
//     a successor written concurrently is either seen and promoted, or is
//     written after done_seq moved and inserted NEW.

// rowPlan is the status and sequence number of one envelope of a write; seq
// 0 for unordered envelopes.
type rowPlan struct {
	status core.Status
	seq    int64
}

// orderKey is one key of ordered events.
type orderKey struct{ aggType, aggID string }

func compareKeys(a, b orderKey) int {
	return cmp.Or(strings.Compare(a.aggType, b.aggType), strings.Compare(a.aggID, b.aggID))
}

// WithOrdering sets the aggregate types whose events s delivers in order per
// key, and returns s. Call it before s is used. A bad ordering returns an
// error matching core.ErrInvalid.
func (s *Store) WithOrdering(o core.Ordering) (*Store, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if len(o) > 0 {
		s.ordering = make(core.Ordering, len(o))
		for k, v := range o {
			s.ordering[k] = v
		}
	}
	return s, nil
}

// Ordering implements core.OrderedStore. The map is the store's own: callers
// must not change it.
func (s *Store) Ordering() core.Ordering { return s.ordering }

// orderedKeys returns the keys of the ordered envelopes of envs, sorted, with
// how many envelopes each has; an ordered envelope without an aggregate id is
// an error matching core.ErrInvalid.
func (s *Store) orderedKeys(envs []core.Envelope) ([]keyCount, error) {
	if len(s.ordering) == 0 {
		return nil, nil
	}
	var counts map[orderKey]int
	for _, env := range envs {
		if _, ok := s.ordering.Ordered(env.AggregateType()); !ok {
			continue
		}
		if env.AggregateID() == "" {
			return nil, core.Invalid("aggregate id", "event %s is of ordered aggregate type %q and has no aggregate id", env.ID(), env.AggregateType())
		}
		if counts == nil {
			counts = make(map[orderKey]int)
		}
		counts[orderKey{env.AggregateType(), env.AggregateID()}]++
	}
	keys := make([]keyCount, 0, len(counts))
	for k, n := range counts {
		keys = append(keys, keyCount{k, n})
	}
	slices.SortFunc(keys, func(a, b keyCount) int { return compareKeys(a.key, b.key) })
	return keys, nil
}

type keyCount struct {
	key orderKey
	n   int
}

// allocate takes the sequence numbers of the ordered envelopes of envs (keys
// are their keys, sorted) and returns each envelope's plan and the ids of
// those to insert WAITING, and, even when it fails, the ranges it took. It
// returns nil plan and ids when nothing is ordered.
func (s *Store) allocate(ctx context.Context, db core.DBTX, envs []core.Envelope, keys []keyCount) ([]rowPlan, []string, []seqRange, error) {
	if len(keys) == 0 {
		return nil, nil, nil, nil
	}
	type alloc struct {
		next int64 // the next seq to hand out
		head bool  // the next one handed out is the key's head
	}
	allocs := make(map[orderKey]*alloc, len(keys))
	taken := make([]seqRange, 0, len(keys))
	now := s.ts(time.Now())
	for _, k := range keys {
		last, head, err := s.keys.takeSeqs(ctx, db, k.key, k.n, now)
		if err != nil {
			return nil, nil, taken, s.wrap("take sequence numbers", err)
		}
		taken = append(taken, seqRange{k, last})
		allocs[k.key] = &alloc{next: last - int64(k.n) + 1, head: head}
	}
	plan := make([]rowPlan, len(envs))
	var waiting []string
	for i, env := range envs {
		a, ok := allocs[orderKey{env.AggregateType(), env.AggregateID()}]
		if !ok {
			continue
		}
		plan[i] = rowPlan{status: core.StatusWaiting, seq: a.next}
		if a.head {
			plan[i].status = core.StatusNew
			a.head = false
		} else {
			waiting = append(waiting, env.ID())
		}
		a.next++
	}
	return plan, waiting, taken, nil
}

// seqRange is what a write took from a key: its n sequence numbers up to
// last.
type seqRange struct {
	keyCount
	last int64
}

// giveBack returns cause, after giving back the sequence numbers of taken
// when cause left the transaction open (Dialect.KeepsTx): each key's
// last_seq goes back to what it was, under the row lock the transaction
// still holds, so that the key waits for no event that will never exist. An
// undo that fails is joined to cause: the caller must then roll back.
func (s *Store) giveBack(ctx context.Context, db core.DBTX, taken []seqRange, cause error) error {
	if len(taken) == 0 || s.d.KeepsTx == nil || !s.d.KeepsTx(cause) {
		return cause
	}
	ctx = context.WithoutCancel(ctx)
	for _, t := range taken {
		res, err := db.ExecContext(ctx, s.keyGiveBack, t.n, t.key.aggType, t.key.aggID, t.last)
		var n int64
		if err == nil {
			n, err = res.RowsAffected()
		}
		if err == nil && n != 1 {
			err = errors.New("its row moved on")
		}
		if err != nil {
			return errors.Join(cause, fmt.Errorf("give back the sequence numbers of key (%s, %s), which will wait for them "+
				"until this transaction is rolled back: %w", t.key.aggType, t.key.aggID, err))
		}
	}
	return cause
}

// keyStrategy is how a family of dialects writes the key statements of
// ordered delivery: taking a key's sequence numbers, finishing a batch of
// DONE events, moving keys past finished events and promoting their next
// events. New picks one by Dialect.Keys; each lives in a file of its own
// (keys_returning.go, keys_cte.go, keys_limited.go). What all of them share
// (the locking read of finish, the key statements of SkipDead and giveBack)
// is the Store's.
type keyStrategy interface {
	// insertAll writes envs, whose ordered envelopes have the keys keys
	// (sorted, at least one), in one statement, when the strategy has one
	// that takes them all; ok false: it wrote nothing, and the caller takes
	// the sequence numbers with takeSeqs and inserts the rows itself.
	insertAll(ctx context.Context, db core.DBTX, envs []core.Envelope, keys []keyCount, opts core.InsertOptions) (res core.InsertResult, ok bool, err error)
	// takeSeqs adds n to key's last_seq (creating its row) and returns
	// last_seq after the change, and whether the first of the n is the
	// key's head (every earlier event finished: done_seq was last_seq
	// before the change). It locks the key's row until db's transaction
	// ends.
	takeSeqs(ctx context.Context, db core.DBTX, k orderKey, n int, now any) (last int64, head bool, err error)
	// markDone marks DONE the rows of ids (sorted, distinct) owner still
	// leases, in tx, moves their keys and promotes the keys' next events,
	// leased by owner at leaseAt; it returns how many rows it marked and
	// the promoted events. Unless wait, KeysWritableCTE, and the others
	// where Dialect.LockingReadSkip is set, wait for no key row another
	// transaction holds: they leave the rows of those keys as they are and
	// return their ids as busy, for a later call that waits.
	markDone(ctx context.Context, tx core.DBTX, owner string, ids []string, now, leaseAt time.Time, wait bool) (n int64, promoted []core.Event, busy []string, err error)
	// advance moves each key of fs (sorted by key and seq) from done_seq
	// through the finished seqs that follow it without a gap, and promotes
	// each moved key's next event from WAITING to NEW, leased by owner at
	// leaseAt (plus the time advance spent waiting for key rows, where it
	// can tell). A key whose done_seq+1 is not among them (it went past the
	// event already: a skipped or continued DEAD event replayed) is left
	// alone. It runs in tx, after the rows of fs were updated.
	advance(ctx context.Context, tx core.DBTX, fs []finished, owner string, now, leaseAt time.Time) ([]core.Event, error)
	// promoteSQL returns the statement that promotes the next events of n
	// keys (arguments: the lease owner and time, then each key's type, id
	// and next seq) and, when that statement returns no rows, the one that
	// reads back the rows it promoted (same arguments); for the plan tests.
	promoteSQL(n int) (promote, read string)
}

// KeyStrategy names the statements a dialect finishes ordered events with
// (see keyStrategy).
type KeyStrategy int

const (
	// KeysReturning: the key upsert and the promotion return what they
	// changed (RETURNING); finishing events reads their key rows with a
	// locking read in key order, then updates them (SQLite).
	KeysReturning KeyStrategy = iota
	// KeysWritableCTE is KeysReturning with data-modifying WITH clauses: an
	// ordered write takes its keys' sequence numbers and inserts its events
	// in one statement, and a DONE batch marks its rows, moves their keys
	// and promotes their next events in one (PostgreSQL).
	KeysWritableCTE
	// KeysLimited: no RETURNING, and UPDATE takes ORDER BY. The key upsert
	// reports through LAST_INSERT_ID(expr); a key UPDATE locks its rows in
	// key order, and the promotion joins the key rows (MySQL, MariaDB).
	KeysLimited
)

// String names the strategy.
func (k KeyStrategy) String() string {
	switch k {
	case KeysReturning:
		return "returning"
	case KeysWritableCTE:
		return "writable-cte"
	case KeysLimited:
		return "limited"
	}
	return "KeyStrategy(" + strconv.Itoa(int(k)) + ")"
}

// orderedStmts prepares the texts of the key statements every strategy
// shares, and the strategy of s.d.Keys.
func (s *Store) orderedStmts() {
	kt := s.table.KeyTable().Quoted(s.d.Quote)
	s.keyGiveBack = s.d.rebind("UPDATE " + kt + " SET last_seq = last_seq - ? " +
		"WHERE aggregate_type = ? AND aggregate_id = ? AND last_seq = ?")
	s.keyAdvance = s.d.rebind("UPDATE " + kt + " SET done_seq = ?, updated_at = ? " +
		"WHERE aggregate_type = ? AND aggregate_id = ? AND done_seq = ?")
	s.promoteFree = s.d.rebind("UPDATE " + s.qt + " SET status = " + stNew + ", locked_by = NULL, locked_at = NULL " +
		"WHERE aggregate_type = ? AND aggregate_id = ? AND seq = ? AND status = " + stWaiting)
	switch s.d.Keys {
	case KeysReturning:
		s.keys = newReturningKeys(s)
	case KeysWritableCTE:
		s.keys = newCTEKeys(s)
	case KeysLimited:
		s.keys = newLimitedKeys(s)
	default:
		panic(fmt.Sprintf("sqlstore: dialect %s: unknown key strategy %v", s.d.Name, s.d.Keys))
	}
}

func lockingRead(d Dialect) string {
	if d.LockingRead == "" {
		return ""
	}
	return " " + d.LockingRead
}

// finished is an event whose outcome was just written, as the key update
// needs it.
type finished struct {
	key orderKey
	seq int64
}
