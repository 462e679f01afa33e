package sqlstore

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
)

// returningKeys is the key strategy KeysReturning (SQLite): statements that
// return what they changed, and a locking read of the key rows before their
// UPDATE.
type returningKeys struct {
	s      *Store
	upsert string // takeSeqs
}

func newReturningKeys(s *Store) *returningKeys {
	return &returningKeys{s: s, upsert: s.d.rebind("INSERT INTO " + s.table.KeyTable().Quoted(s.d.Quote) +
		" AS k (aggregate_type, aggregate_id, last_seq, done_seq, updated_at) VALUES (?, ?, ?, 0, ?)" +
		" ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_seq = k.last_seq + excluded.last_seq, " +
		"updated_at = excluded.updated_at RETURNING last_seq, done_seq")}
}

// insertAll implements keyStrategy: this strategy has no one-statement
// ordered write.
func (k *returningKeys) insertAll(context.Context, core.DBTX, []core.Envelope, []keyCount, core.InsertOptions) (core.InsertResult, bool, error) {
	return core.InsertResult{}, false, nil
}

// takeSeqs implements keyStrategy with one upsert that returns the key's
// last_seq and done_seq after the change.
func (k *returningKeys) takeSeqs(ctx context.Context, db core.DBTX, key orderKey, n int, now any) (last int64, head bool, err error) {
	var done int64
	err = db.QueryRowContext(ctx, k.upsert, key.aggType, key.aggID, n, now).Scan(&last, &done)
	return last, done == last-int64(n), err
}

// markDone implements keyStrategy with finish and advance.
func (k *returningKeys) markDone(ctx context.Context, tx core.DBTX, owner string, ids []string, now, leaseAt time.Time, wait bool) (int64, []core.Event, []string, error) {
	return k.s.finish(ctx, tx, owner, ids, now, leaseAt, wait, doneSet, []any{k.s.ts(now)}, everyKey)
}

// advance implements keyStrategy: per keyChunk keys, in key order, three
// statements: a locking read of the key rows in key order, so that two
// transactions locking several keys never wait on each other in a cycle;
// one UPDATE of those rows; and, as a later statement that sees the WAITING
// rows of writers that held a key's lock until they committed, one UPDATE
// promoting the next events, which it leaves out when no moved key has an
// event after its new done_seq (the read returns last_seq too).
func (k *returningKeys) advance(ctx context.Context, tx core.DBTX, fs []finished, owner string, now, leaseAt time.Time) ([]core.Event, error) {
	var promoted []core.Event
	for len(fs) > 0 {
		n := keyPrefix(fs, keyChunk)
		p, err := k.advanceKeys(ctx, tx, fs[:n], owner, now, leaseAt)
		if err != nil {
			return nil, err
		}
		promoted = append(promoted, p...)
		fs = fs[n:]
	}
	return promoted, nil
}

// advanceKeys is advance for fs, sorted by key and seq, of at most keyChunk
// keys.
func (k *returningKeys) advanceKeys(ctx context.Context, tx core.DBTX, fs []finished, owner string, now, leaseAt time.Time) ([]core.Event, error) {
	s := k.s
	var keys []orderKey
	for i, f := range fs {
		if i == 0 || f.key != fs[i-1].key {
			keys = append(keys, f.key)
		}
	}
	kt := s.table.KeyTable().Quoted(s.d.Quote)
	match, args := s.keyMatch("", keys, nil)
	rows, err := tx.QueryContext(ctx, s.d.rebind("SELECT aggregate_type, aggregate_id, done_seq, last_seq FROM "+kt+
		" WHERE "+match+" ORDER BY aggregate_type, aggregate_id"+lockingRead(s.d)), args...)
	if err != nil {
		return nil, err
	}
	// seqs holds each key row's done_seq and last_seq.
	seqs := make(map[orderKey][2]int64, len(keys))
	for rows.Next() {
		var key orderKey
		var d, l int64
		if err := rows.Scan(&key.aggType, &key.aggID, &d, &l); err != nil {
			rows.Close()
			return nil, err
		}
		seqs[key] = [2]int64{d, l}
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// moves: each key that goes forward, from its done_seq to the last of
	// its finished events that follow it without a gap.
	var moves []seqRun
	for _, f := range fs {
		ks, ok := seqs[f.key]
		if !ok {
			continue
		}
		d := ks[0]
		if n := len(moves); n > 0 && moves[n-1].key == f.key {
			if f.seq == moves[n-1].to+1 {
				moves[n-1].to = f.seq
			}
			continue
		}
		if f.seq == d+1 {
			moves = append(moves, seqRun{f.key, d, f.seq})
		}
	}
	if len(moves) == 0 {
		return nil, nil
	}
	var set, where strings.Builder
	uargs := make([]any, 0, 6*len(moves)+1)
	wargs := make([]any, 0, 3*len(moves))
	set.WriteString("UPDATE " + kt + " SET done_seq = CASE")
	for i, j := range s.padMoves(len(moves)) {
		m := moves[j]
		set.WriteString(" WHEN aggregate_type = ? AND aggregate_id = ? THEN ?")
		uargs = append(uargs, m.key.aggType, m.key.aggID, m.to)
		if i > 0 {
			where.WriteString(" OR ")
		}
		where.WriteString("(aggregate_type = ? AND aggregate_id = ? AND done_seq = ?)")
		wargs = append(wargs, m.key.aggType, m.key.aggID, m.from)
	}
	set.WriteString(" ELSE done_seq END, updated_at = ? WHERE ")
	uargs = append(uargs, s.ts(now))
	if _, err := tx.ExecContext(ctx, s.d.rebind(set.String()+where.String()), append(uargs, wargs...)...); err != nil {
		return nil, err
	}
	// The key rows are locked (or, on SQLite, the database is) since they
	// were read: a moved key whose last_seq is its new done_seq has no
	// event to promote, and none can be written before this commits.
	if !slices.ContainsFunc(moves, func(m seqRun) bool { return seqs[m.key][1] > m.to }) {
		return nil, nil
	}
	by, lockedAt := s.promotionLease(owner, leaseAt)
	return k.promote(ctx, tx, moves, by, lockedAt)
}

// promote promotes the event after each run of runs, leased by by at
// lockedAt (see promotionLease), and returns the events it promoted.
func (k *returningKeys) promote(ctx context.Context, tx core.DBTX, runs []seqRun, by, lockedAt any) ([]core.Event, error) {
	promote, _ := k.promoteSQL(len(k.s.padMoves(len(runs))))
	return k.s.scanAll(tx.QueryContext(ctx, promote, k.s.promoteArgs(runs, by, lockedAt)...))
}

// promoteSQL implements keyStrategy: one UPDATE ... RETURNING, which finds
// each (key, seq) through the seq index.
func (k *returningKeys) promoteSQL(n int) (promote, read string) {
	return k.s.d.rebind("UPDATE " + k.s.qt + " SET status = " + stNew + ", locked_by = ?, locked_at = ? WHERE status = " + stWaiting +
		" AND " + nextEvents("", n) + " RETURNING " + columns), ""
}
