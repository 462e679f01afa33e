package sqlstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
)

// limitedKeys is the key strategy KeysLimited (MySQL, MariaDB): no
// RETURNING, so the upsert and the key UPDATE report through the
// statement's insert id (LAST_INSERT_ID(expr)) and a promotion is read back
// by its lease; UPDATE takes ORDER BY, so a key UPDATE locks its rows in key
// order without a locking read first.
type limitedKeys struct {
	s      *Store
	upsert string // takeSeqs
}

func newLimitedKeys(s *Store) *limitedKeys {
	return &limitedKeys{s: s, upsert: s.d.rebind("INSERT INTO " + s.table.KeyTable().Quoted(s.d.Quote) +
		" (aggregate_type, aggregate_id, last_seq, done_seq, updated_at) VALUES (?, ?, ?, 0, ?)" +
		" ON DUPLICATE KEY UPDATE last_seq = LAST_INSERT_ID(2 * (last_seq + ?) + (done_seq = last_seq)) DIV 2, updated_at = ?")}
}

// insertAll implements keyStrategy: this strategy has no one-statement
// ordered write.
func (k *limitedKeys) insertAll(context.Context, core.DBTX, []core.Envelope, []keyCount, core.InsertOptions) (core.InsertResult, bool, error) {
	return core.InsertResult{}, false, nil
}

// takeSeqs implements keyStrategy in one statement without RETURNING: the
// upsert passes 2*last_seq, plus 1 for a head, through LAST_INSERT_ID(expr),
// which the server reports to the client as the statement's insert id, and
// stores that halved. Its one assignment reads the row's values before the
// statement, whatever the order in which the server makes assignments. A
// row it created (one affected row instead of two) is a fresh key:
// last_seq n, a head.
func (k *limitedKeys) takeSeqs(ctx context.Context, db core.DBTX, key orderKey, n int, now any) (last int64, head bool, err error) {
	res, err := db.ExecContext(ctx, k.upsert, key.aggType, key.aggID, n, now, n, now)
	if err != nil {
		return 0, false, err
	}
	affected, err := res.RowsAffected()
	if err != nil {
		return 0, false, err
	}
	if affected == 1 {
		return int64(n), true, nil
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, false, err
	}
	if last = id / 2; last < int64(n) {
		return 0, false, fmt.Errorf("key (%s, %s): the upsert reported last_seq %d for %d events", key.aggType, key.aggID, last, n)
	}
	return last, id%2 == 1, nil
}

// markDone implements keyStrategy with finish and advance.
func (k *limitedKeys) markDone(ctx context.Context, tx core.DBTX, owner string, ids []string, now, leaseAt time.Time, wait bool) (int64, []core.Event, []string, error) {
	return k.s.finish(ctx, tx, owner, ids, now, leaseAt, wait, doneSet, []any{k.s.ts(now)}, everyKey)
}

// advance implements keyStrategy in two statements per keyChunk keys
// instead of three (the read-back aside), without reading the key rows
// first. Each run of fs (finished seqs of one key that follow each other
// without a gap) moves its key from the seq before it to its last one, if
// the key's done_seq is the seq before it: key UPDATEs of keyChunk runs
// each, in key order, which so lock the rows they move in key order,
// waiting for their writers. The promotions,
// later statements, then promote the event after each run only where its
// key now stands right before it (a join on the key row), so that a key
// that did not move promotes nothing. A chunk's promotion runs only when
// its key UPDATE reports a moved key with events after its new done_seq:
// with every moved key finished up to its last event (a key's events
// delivered as they are written), the batch takes one statement fewer per
// chunk.
func (k *limitedKeys) advance(ctx context.Context, tx core.DBTX, fs []finished, owner string, now, leaseAt time.Time) ([]core.Event, error) {
	began := time.Now()
	runs := seqRuns(fs)
	var waiting [][]seqRun
	for chunk := range slices.Chunk(runs, keyChunk) {
		w, err := k.moveKeys(ctx, tx, chunk, now)
		if err != nil {
			return nil, err
		}
		if w {
			waiting = append(waiting, chunk)
		}
	}
	if len(waiting) == 0 {
		return nil, nil
	}
	// Stamped after the key UPDATEs, which may have waited for writers.
	by, lockedAt := k.s.promotionLease(owner, leaseAt.Add(time.Since(began)))
	var promoted []core.Event
	for _, chunk := range waiting {
		evs, err := k.promote(ctx, tx, chunk, by, lockedAt)
		if err != nil {
			return nil, err
		}
		promoted = append(promoted, evs...)
	}
	return promoted, nil
}

// moveKeys is one key UPDATE of advance: each key of runs moves from
// its from to its to, if it stands at from. It reports whether a moved key
// has events after its new done_seq.
func (k *limitedKeys) moveKeys(ctx context.Context, tx core.DBTX, runs []seqRun, now time.Time) (bool, error) {
	q, args := k.moveKeysStmt(runs, now)
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return false, err
	}
	if moved, err := res.RowsAffected(); err != nil || moved == 0 {
		return false, err
	}
	waiting, err := res.LastInsertId()
	return waiting != 0, err
}

// moveKeysStmt returns the key UPDATE of moveKeys and its arguments.
//
// Each key's WHEN moves it and reports, as the statement's insert id
// (LAST_INSERT_ID(expr), which returns expr), its new done_seq when its
// last_seq lies beyond: when no moved key has an event after its new
// done_seq, the insert id stays 0 and no event waits to be promoted. The
// statement assigns one column from values as they were before it, so that
// what it reports does not depend on the order in which the server makes
// assignments (MariaDB's sql_mode SIMULTANEOUS_ASSIGNMENT changes it).
func (k *limitedKeys) moveKeysStmt(runs []seqRun, now time.Time) (string, []any) {
	s := k.s
	var set, where strings.Builder
	uargs := make([]any, 0, 6*len(runs)+1)
	wargs := make([]any, 0, 3*len(runs))
	set.WriteString("UPDATE " + s.table.KeyTable().Quoted(s.d.Quote) + s.pkHint() + " SET done_seq = CASE")
	for i, r := range runs {
		set.WriteString(" WHEN aggregate_type = ? AND aggregate_id = ? AND done_seq = ? THEN IF(last_seq > ?, LAST_INSERT_ID(?), ?)")
		uargs = append(uargs, r.key.aggType, r.key.aggID, r.from, r.to, r.to, r.to)
		if i > 0 {
			where.WriteString(" OR ")
		}
		where.WriteString("(aggregate_type = ? AND aggregate_id = ? AND done_seq = ?)")
		wargs = append(wargs, r.key.aggType, r.key.aggID, r.from)
	}
	set.WriteString(" ELSE done_seq END, updated_at = ? WHERE ")
	uargs = append(uargs, s.ts(now))
	return s.d.rebind(set.String() + where.String() + " ORDER BY aggregate_type, aggregate_id"), append(uargs, wargs...)
}

// promote promotes the event after each run of runs whose key now stands
// right before it, leased by by at lockedAt (see promotionLease), and reads
// back the events it promoted.
func (k *limitedKeys) promote(ctx context.Context, tx core.DBTX, runs []seqRun, by, lockedAt any) ([]core.Event, error) {
	args := k.s.promoteArgs(runs, by, lockedAt)
	promote, read := k.promoteSQL((len(args) - 2) / 3)
	res, err := tx.ExecContext(ctx, promote, args...)
	if err != nil {
		return nil, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return nil, err
	}
	// The rows this statement promoted are those of the keys' next events
	// now leased by by at this lease's unique stamp.
	return k.s.scanAll(tx.QueryContext(ctx, read, args...))
}

// promoteSQL implements keyStrategy. advance moves the keys without reading
// them first: an event is promoted only if its key now stands right before
// it. The join starts from the events (STRAIGHT_JOIN), found by (key, seq):
// left to itself, the optimizer may start from the key rows and read every
// event of their keys, or scan the events. The read-back finds the rows it
// promoted as the keys' next events leased by the promotion's owner at its
// lease's unique stamp.
func (k *limitedKeys) promoteSQL(n int) (promote, read string) {
	s := k.s
	promote = "UPDATE " + s.qt + " e STRAIGHT_JOIN " + s.table.KeyTable().Quoted(s.d.Quote) + " k " +
		"ON k.aggregate_type = e.aggregate_type AND k.aggregate_id = e.aggregate_id AND k.done_seq = e.seq - 1 " +
		"SET e.status = " + stNew + ", e.locked_by = ?, e.locked_at = ? WHERE e.status = " + stWaiting + " AND " + nextEvents("e.", n)
	return s.d.rebind(promote), s.d.rebind("SELECT " + columns + " FROM " + s.qt +
		" WHERE status = " + stNew + " AND locked_by = ? AND locked_at = ? AND " + nextEvents("", n))
}

// finishFree is finish's first pass where Dialect.LockingReadSkip is set
// (MySQL 8, MariaDB 10.6+). Of held, the rows of ids owner still leases
// (locked by finish's locking read), with fs their finished ordered events
// (sorted by key and seq) and keyOf the keys of those rows, it marks DONE
// (at now) the rows of the keys whose rows it can lock at once and the
// unordered rows, moves those keys and promotes their next events, leased by
// owner at leaseAt, and returns the ids of the other rows as busy, for the
// pass that waits.
//
// Its key rows are held for three round trips, not five: one locking read
// per keyChunk keys (lockKeysNextSQL) locks the key rows no other
// transaction holds, passing the others (SKIP LOCKED), and returns each with
// its done_seq, its last_seq and, whole, the event after the run that moves
// it, locked too; then one UPDATE marks the rows DONE and promotes those
// events, by primary key, and a key UPDATE per keyChunk keys moves the keys.
// The promoted events are the rows that read returned, with the lease this
// pass gives them: no read-back. Under CPU contention each round trip is a
// wait for the scheduler while the writers of those keys queue behind them
// (see docs/design/ordered.md, "Where the time goes").
//
// Holding the key row, no writer of the key is open: the event after the
// run, when last_seq says there is one, is committed and WAITING. If the
// read returns the key without it (another transaction holds that event's
// row: SKIP LOCKED passes it and leaves the key's columns NULL-extended,
// as MariaDB does), the key is left busy, for the pass that waits.
func (k *limitedKeys) finishFree(ctx context.Context, tx core.DBTX, owner string, held []string, fs []finished,
	keyOf map[string]orderKey, now, leaseAt time.Time) (int64, []core.Event, []string, error) {
	s := k.s
	doneAt := s.ts(now)
	runs := seqRuns(fs)
	by, lockedAt := s.promotionLease(owner, leaseAt)
	free := make(map[orderKey]bool)
	var moves []seqRun
	var next []core.Event
	for start := 0; start < len(runs); {
		end := runKeyPrefix(runs[start:], keyChunk) + start
		q, args := k.lockKeysNextSQL(runs[start:end])
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return 0, nil, nil, err
		}
		var r row
		var key orderKey
		var doneSeq, lastSeq int64
		dest := append([]any{&key.aggType, &key.aggID, &doneSeq, &lastSeq}, r.dest()...)
		for rows.Next() {
			if err := rows.Scan(dest...); err != nil {
				rows.Close()
				return 0, nil, nil, err
			}
			i := slices.IndexFunc(runs[start:end], func(run seqRun) bool { return run.key == key && run.from == doneSeq })
			if i < 0 {
				// The key went past these events (a skipped or continued
				// DEAD event replayed): its rows are marked, the key stays.
				free[key] = true
				continue
			}
			run := runs[start+i]
			if lastSeq > run.to {
				if !r.seq.Valid || r.seq.Int64 != run.to+1 || r.status != int16(core.StatusWaiting) {
					continue // its next event's row is held: busy
				}
				ev, err := r.decode()
				if err != nil {
					rows.Close()
					return 0, nil, nil, fmt.Errorf("event %s: %w", r.id, err)
				}
				ev.Status = core.StatusNew
				if owner != "" {
					ev.LockedBy, ev.LockedAt = owner, leaseAt.UTC().Truncate(time.Microsecond)
				}
				next = append(next, ev)
			}
			free[key] = true
			moves = append(moves, run)
		}
		if err := rows.Close(); err != nil {
			return 0, nil, nil, err
		}
		if err := rows.Err(); err != nil {
			return 0, nil, nil, err
		}
		start = end
	}
	var busy []string
	held = slices.DeleteFunc(held, func(id string) bool {
		if key, ordered := keyOf[id]; ordered && !free[key] {
			busy = append(busy, id)
			return true
		}
		return false
	})
	if len(held) == 0 {
		return 0, nil, busy, nil
	}
	q, args := k.doneNextSQL(held, next, doneAt, owner, by, lockedAt)
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, nil, nil, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, nil, nil, err
	}
	// The promoted rows are locked by this transaction and WAITING: each
	// is changed.
	if n -= int64(len(next)); n < 0 {
		return 0, nil, nil, fmt.Errorf("the DONE update changed %d rows, fewer than the %d events it promotes", n+int64(len(next)), len(next))
	}
	for chunk := range slices.Chunk(moves, keyChunk) {
		if _, err := k.moveKeys(ctx, tx, chunk, now); err != nil {
			return 0, nil, nil, err
		}
	}
	return n, next, busy, nil
}

// runKeyPrefix returns the length of the longest prefix of runs, sorted by
// key, that holds at most max keys.
func runKeyPrefix(runs []seqRun, max int) int {
	keys := 0
	for i, r := range runs {
		if i == 0 || r.key != runs[i-1].key {
			if keys == max {
				return i
			}
			keys++
		}
	}
	return len(runs)
}

// lockKeysNextSQL returns the locking read of finishFree for runs (of at
// most keyChunk keys) and its arguments: the rows of the runs' keys that no
// other transaction holds (Dialect.LockingReadSkip), each with its done_seq
// and last_seq, and, joined, the event after the run that starts at the
// key's done_seq, found by (key, seq) in the seq index, its NOT NULL
// columns COALESCEd so that a key without one scans.
func (k *limitedKeys) lockKeysNextSQL(runs []seqRun) (string, []any) {
	s := k.s
	var b strings.Builder
	b.WriteString("SELECT k.aggregate_type, k.aggregate_id, k.done_seq, k.last_seq, " +
		"COALESCE(e.event_id, ''), COALESCE(e.event_type, ''), COALESCE(e.aggregate_type, ''), e.aggregate_id, e.tenant_id, " +
		"e.payload, e.headers, COALESCE(e.status, 0), COALESCE(e.attempts, 0), e.available_at, e.created_at, e.done_at, " +
		"e.last_error, e.locked_by, e.locked_at, e.seq FROM " + s.table.KeyTable().Quoted(s.d.Quote) + " k" + s.pkHint() +
		" LEFT JOIN " + s.qt + " e ON e.aggregate_type = k.aggregate_type AND e.aggregate_id = k.aggregate_id AND e.seq = CASE")
	var args []any
	var keys []orderKey
	for i, j := range s.padMoves(len(runs)) {
		r := runs[j]
		b.WriteString(" WHEN k.aggregate_type = ? AND k.aggregate_id = ? AND k.done_seq = ? THEN ?")
		args = append(args, r.key.aggType, r.key.aggID, r.from, r.to+1)
		if i == 0 || r.key != keys[len(keys)-1] {
			keys = append(keys, r.key)
		}
	}
	b.WriteString(" END WHERE ")
	match, args := s.keyMatch("k.", keys, args)
	return s.d.rebind(b.String() + match + " " + s.d.LockingReadSkip), args
}

// doneNextSQL returns finishFree's UPDATE and its arguments: the rows of
// held that owner still leases go DONE at doneAt, and the WAITING rows of
// next go NEW, leased by by at lockedAt, in one statement through the
// primary key. status is assigned last, so that each assignment reads the
// status the row had, whatever the order in which the server makes them
// (MariaDB's SIMULTANEOUS_ASSIGNMENT).
func (k *limitedKeys) doneNextSQL(held []string, next []core.Event, doneAt any, owner string, by, lockedAt any) (string, []any) {
	s := k.s
	if len(next) == 0 {
		q, args := s.inList("UPDATE "+s.qt+s.pkHint()+" SET "+doneSet+" WHERE locked_by = ? AND "+notTerminal+" AND event_id IN (",
			s.padIDs(held), doneAt, owner)
		return s.d.rebind(q + ")"), args
	}
	ids := make([]string, len(next))
	for i, ev := range next {
		ids[i] = ev.ID()
	}
	q, args := s.inList("UPDATE "+s.qt+s.pkHint()+" SET done_at = IF(status = "+stWaiting+", done_at, ?), "+
		"locked_by = IF(status = "+stWaiting+", ?, NULL), locked_at = IF(status = "+stWaiting+", ?, NULL), "+
		"status = IF(status = "+stWaiting+", "+stNew+", "+stDone+") "+
		"WHERE (locked_by = ? AND "+notTerminal+" AND event_id IN (", s.padIDs(held), doneAt, by, lockedAt, owner)
	q2, args := s.inList(")) OR (status = "+stWaiting+" AND event_id IN (", s.padIDs(ids), args...)
	return s.d.rebind(q + q2 + "))"), args
}
