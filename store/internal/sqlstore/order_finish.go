package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"slices"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
)

// MarkDoneOrdered implements core.OrderedStore: per 512 ids, the key
// strategy's markDone, the DONE update of the rows of ids owner still
// leases, then, per ordered key in key order, the key update and the
// promotion of the key's next event, in READ COMMITTED transactions (each
// retried after a deadlock when db is a pool). On PostgreSQL
// (KeysWritableCTE) and where Dialect.LockingReadSkip is set (MySQL 8,
// MariaDB 10.6+) a first pass (MarkDoneOrderedNoWait's) waits for no key
// row: it finishes the events whose key rows it can lock at once, so that
// their keys are held no longer than its statements and its commit take,
// whatever writers of other keys are doing; a second, only when some key
// row was held (by a writer of the key, until it commits), finishes the
// events of those keys, waiting for their rows. Elsewhere one transaction
// finishes the chunk, waiting.
// The promoted events are leased at now plus the time spent until then,
// so that a wait does not eat into their lease.
func (s *Store) MarkDoneOrdered(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time) (int64, []core.Event, error) {
	n, promoted, _, err := s.markDoneOrdered(ctx, db, owner, ids, now, true)
	return n, promoted, err
}

// MarkDoneOrderedNoWait implements core.OrderedNoWaitMarker: MarkDoneOrdered's
// first pass alone. On PostgreSQL that pass is one statement, run on its own
// (its own transaction) when db is a pool: the key rows it locks are held
// for that statement and its commit, one round trip.
func (s *Store) MarkDoneOrderedNoWait(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time) (int64, []core.Event, []string, error) {
	return s.markDoneOrdered(ctx, db, owner, ids, now, false)
}

// markDoneOrdered is MarkDoneOrdered, and, unless wait, returns the ids of
// the rows the first pass left for their held key rows instead of
// finishing them in a second pass.
func (s *Store) markDoneOrdered(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time, wait bool) (int64, []core.Event, []string, error) {
	start := time.Now()
	leaseAt := func() time.Time { return now.Add(time.Since(start)) }
	uniq := slices.Clone(ids)
	slices.Sort(uniq)
	uniq = slices.Compact(uniq)
	var total int64
	var promoted, p []core.Event
	var held, busy []string
	var n int64
	pass := func(chunk []string, wait bool) error {
		return s.retry(ctx, db, func() error {
			run := func(tx core.DBTX) error {
				var err error
				n, p, busy, err = s.keys.markDone(ctx, tx, owner, chunk, now, leaseAt(), wait)
				return err
			}
			if _, one := s.keys.(*cteKeys); one && !wait {
				// One statement: its own transaction on a pool.
				return run(db)
			}
			return inTx(ctx, db, run)
		})
	}
	for chunk := range slices.Chunk(uniq, batchChunk) {
		if err := pass(chunk, false); err != nil {
			return total, promoted, held, s.wrap("mark done", err)
		}
		total += n
		promoted = append(promoted, p...)
		if len(busy) == 0 {
			continue
		}
		if !wait {
			held = append(held, busy...)
			continue
		}
		if err := pass(busy, true); err != nil {
			return total, promoted, held, s.wrap("mark done", err)
		}
		total += n
		promoted = append(promoted, p...)
	}
	return total, promoted, held, nil
}

// MarkDeadOrdered implements core.OrderedStore: in one READ COMMITTED
// transaction, finish with the DEAD update, which moves the event's key only
// under core.DeadContinues.
func (s *Store) MarkDeadOrdered(ctx context.Context, db core.DBTX, owner, id string, now time.Time, lastErr string) (bool, []core.Event, error) {
	var n int64
	var promoted []core.Event
	err := s.retry(ctx, db, func() error {
		return inTx(ctx, db, func(tx core.DBTX) error {
			var err error
			n, promoted, _, err = s.finish(ctx, tx, owner, []string{id}, now, now, true, deadSet,
				[]any{s.ts(now), core.TruncateError(lastErr)},
				func(aggType string) bool { p, _ := s.ordering.Ordered(aggType); return p == core.DeadContinues })
			return err
		})
	})
	if err != nil {
		return false, nil, s.wrap("mark dead", err)
	}
	return n > 0, promoted, nil
}

// The SET clauses of finish.
var (
	doneSet = "status = " + stDone + ", done_at = ?, locked_by = NULL, locked_at = NULL"
	deadSet = "status = " + stDead + ", attempts = attempts + 1, done_at = ?, last_error = ?, locked_by = NULL, locked_at = NULL"
)

// everyKey is the advance of finish that moves the key of every finished
// ordered event.
func everyKey(string) bool { return true }

// finish sets set on the rows of ids (sorted, distinct) owner still leases,
// after a locking read of them, and moves past each of them, with the key
// strategy's advance, the keys of those that are ordered and whose
// aggregate type advance accepts, promoting the keys' next events leased by
// owner at leaseAt. Unless wait, and where the database can pass locked rows
// (Dialect.LockingReadSkip, KeysLimited), it takes limitedKeys.finishFree:
// it locks the rows of those keys without waiting, and leaves alone,
// returning their ids as busy, the rows of the keys another transaction
// holds. It runs in tx, a transaction.
func (s *Store) finish(ctx context.Context, tx core.DBTX, owner string, ids []string, now, leaseAt time.Time, wait bool,
	set string, setArgs []any, advance func(aggType string) bool) (int64, []core.Event, []string, error) {
	q, args := s.inList("SELECT event_id, aggregate_type, aggregate_id, seq FROM "+s.qt+s.pkHint()+
		" WHERE locked_by = ? AND "+notTerminal+" AND event_id IN (", s.padIDs(ids), owner)
	rows, err := tx.QueryContext(ctx, s.d.rebind(q+")"+lockingRead(s.d)), args...)
	if err != nil {
		return 0, nil, nil, err
	}
	var held []string
	var keys []finished
	keyOf := map[string]orderKey{} // the ordered rows of held
	for rows.Next() {
		var id, aggType string
		var aggID sql.NullString
		var seq sql.NullInt64
		if err := rows.Scan(&id, &aggType, &aggID, &seq); err != nil {
			rows.Close()
			return 0, nil, nil, err
		}
		held = append(held, id)
		if seq.Valid && aggID.Valid && advance(aggType) {
			k := orderKey{aggType, aggID.String}
			keys = append(keys, finished{k, seq.Int64})
			keyOf[id] = k
		}
	}
	if err := rows.Close(); err != nil {
		return 0, nil, nil, err
	}
	if err := rows.Err(); err != nil {
		return 0, nil, nil, err
	}
	if len(held) == 0 {
		return 0, nil, nil, nil
	}
	slices.SortFunc(keys, func(a, b finished) int {
		return cmp.Or(compareKeys(a.key, b.key), cmp.Compare(a.seq, b.seq))
	})
	if lk, ok := s.keys.(*limitedKeys); ok && !wait && len(keys) > 0 && s.d.LockingReadSkip != "" {
		// Unless wait, finish is MarkDoneOrdered's: set is doneSet.
		return lk.finishFree(ctx, tx, owner, held, keys, keyOf, now, leaseAt)
	}
	q, args = s.inList("UPDATE "+s.qt+s.pkHint()+" SET "+set+" WHERE locked_by = ? AND "+notTerminal+" AND event_id IN (",
		s.padIDs(held), append(setArgs, owner)...)
	res, err := tx.ExecContext(ctx, s.d.rebind(q+")"), args...)
	if err != nil {
		return 0, nil, nil, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, nil, nil, err
	}
	if len(keys) == 0 {
		return n, nil, nil, nil
	}
	promoted, err := s.keys.advance(ctx, tx, keys, owner, now, leaseAt)
	return n, promoted, nil, err
}

// pkHint returns Dialect.PrimaryKeyHint with a space before it, or "".
func (s *Store) pkHint() string {
	if s.d.PrimaryKeyHint == "" {
		return ""
	}
	return " " + s.d.PrimaryKeyHint
}

// keyChunk is the most keys one key statement of advance names. The key
// UPDATE's CASE costs keys squared (each moved row tries the WHENs in turn:
// 512 keys take four times as long in one statement as in chunks of 64 on
// SQLite), and past a couple of hundred OR-ed keys MySQL and MariaDB stop
// estimating each range (eq_range_index_dive_limit) and may scan the key
// table, or drive the promotion's join from it and scan the events. Chunks
// keep each statement a walk of its index, whatever the batch.
const keyChunk = 64

// keyPrefix returns the length of the longest prefix of fs, sorted by key,
// that holds at most max keys.
func keyPrefix(fs []finished, max int) int {
	keys := 0
	for i, f := range fs {
		if i == 0 || f.key != fs[i-1].key {
			if keys == max {
				return i
			}
			keys++
		}
	}
	return len(fs)
}

// promotionLease returns the lease promoted events get: owner at now, or
// under ClaimUpdateThenSelect at a stamp of its own, by which the read-back
// finds the rows its promotion leased; nil and nil without an owner.
func (s *Store) promotionLease(owner string, now time.Time) (by, lockedAt any) {
	if owner == "" {
		return nil, nil
	}
	at := now
	if s.d.Claim == ClaimUpdateThenSelect {
		at = s.leases.next(now)
	}
	return owner, s.ts(at)
}

// seqRun is a key's move over finished events that follow each other
// without a gap: from the seq before the first to the last.
type seqRun struct {
	key      orderKey
	from, to int64
}

// seqRuns returns the runs of fs (sorted by key and seq): per key, each
// stretch of seqs that follow each other without a gap.
func seqRuns(fs []finished) []seqRun {
	var runs []seqRun
	for _, f := range fs {
		if n := len(runs); n > 0 && runs[n-1].key == f.key && runs[n-1].to+1 == f.seq {
			runs[n-1].to = f.seq
			continue
		}
		runs = append(runs, seqRun{f.key, f.seq - 1, f.seq})
	}
	return runs
}

// promoteArgs returns the arguments of a promotion of the events after runs
// (see keyStrategy.promoteSQL), its runs padded like padMoves.
func (s *Store) promoteArgs(runs []seqRun, by, lockedAt any) []any {
	idx := s.padMoves(len(runs))
	args := make([]any, 0, 2+3*len(idx))
	args = append(args, by, lockedAt)
	for _, j := range idx {
		args = append(args, runs[j].key.aggType, runs[j].key.aggID, runs[j].to+1)
	}
	return args
}

// nextEvents returns the condition "((aggregate_type = ? AND aggregate_id =
// ? AND seq = ?) OR ...)" on n (key, seq) pairs, its columns prefixed by
// alias.
func nextEvents(alias string, n int) string {
	one := "(" + alias + "aggregate_type = ? AND " + alias + "aggregate_id = ? AND " + alias + "seq = ?)"
	return "(" + strings.TrimSuffix(strings.Repeat(one+" OR ", n), " OR ") + ")"
}

// keyMatch returns "(aggregate_type = ? AND aggregate_id = ?) OR ..." for
// keys, padded like padMoves, its columns prefixed by alias, and args
// followed by the keys' values.
func (s *Store) keyMatch(alias string, keys []orderKey, args []any) (string, []any) {
	var sb strings.Builder
	for i, j := range s.padMoves(len(keys)) {
		if i > 0 {
			sb.WriteString(" OR ")
		}
		sb.WriteString("(" + alias + "aggregate_type = ? AND " + alias + "aggregate_id = ?)")
		args = append(args, keys[j].aggType, keys[j].aggID)
	}
	return "(" + sb.String() + ")", args
}

// padMoves returns the indexes 0..n-1, padded with n-1 to a power of two
// under Dialect.PadIDLists, so that the set-based key statements share a few
// texts (see leasedBatch); a repeated key matches the same row again.
func (s *Store) padMoves(n int) []int {
	m := n
	if p := nextPow2(n); s.d.PadIDLists && p > n {
		m = p
	}
	out := make([]int, m)
	for i := range out {
		out[i] = min(i, n-1)
	}
	return out
}

// scanAll decodes rows into events; a row that cannot be decoded is an
// error, as the events are to be delivered.
func (s *Store) scanAll(rows *sql.Rows, err error) ([]core.Event, error) {
	if err != nil {
		return nil, err
	}
	evs, bad, err := scanEvents(rows)
	if err != nil {
		return nil, err
	}
	if len(bad) > 0 {
		return nil, bad[0]
	}
	return evs, nil
}

var _ core.OrderedStore = (*Store)(nil)
