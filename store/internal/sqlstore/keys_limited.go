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
	var runs []seqRun
	for _, f := range fs {
		if n := len(runs); n > 0 && runs[n-1].key == f.key && runs[n-1].to+1 == f.seq {
			runs[n-1].to = f.seq
			continue
		}
		runs = append(runs, seqRun{f.key, f.seq - 1, f.seq})
	}
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
