package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
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
		last, head, err := s.takeSeqs(ctx, db, k.key, k.n, now)
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

// takeSeqs adds n to key's last_seq (creating its row) and returns last_seq
// after the change, and whether the first of the n is the key's head (every
// earlier event finished: done_seq was last_seq before the change). It locks
// the key's row until db's transaction ends.
//
// Without RETURNING (MySQL) it is still one statement: the upsert passes
// 2*last_seq, plus 1 for a head, through LAST_INSERT_ID(expr), which the
// server reports to the client as the statement's insert id, and stores
// that halved. A row it created (one affected row instead of two) is a
// fresh key: last_seq n, a head.
func (s *Store) takeSeqs(ctx context.Context, db core.DBTX, k orderKey, n int, now any) (last int64, head bool, err error) {
	if s.d.NoReturning {
		res, err := db.ExecContext(ctx, s.keyUpsert, k.aggType, k.aggID, n, now, n, now)
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
			return 0, false, fmt.Errorf("key (%s, %s): the upsert reported last_seq %d for %d events", k.aggType, k.aggID, last, n)
		}
		return last, id%2 == 1, nil
	}
	var done int64
	err = db.QueryRowContext(ctx, s.keyUpsert, k.aggType, k.aggID, n, now).Scan(&last, &done)
	return last, done == last-int64(n), err
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

// orderedStmts prepares the texts of the ordered statements.
func (s *Store) orderedStmts() {
	kt := s.table.KeyTable().Quoted(s.d.Quote)
	cols := "(aggregate_type, aggregate_id, last_seq, done_seq, updated_at) VALUES (?, ?, ?, 0, ?)"
	if s.d.NoReturning {
		s.keyUpsert = s.d.rebind("INSERT INTO " + kt + " " + cols +
			" ON DUPLICATE KEY UPDATE last_seq = LAST_INSERT_ID(2 * (last_seq + ?) + (done_seq = last_seq)) DIV 2, updated_at = ?")
	} else {
		s.keyUpsert = s.d.rebind("INSERT INTO " + kt + " AS k " + cols +
			" ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_seq = k.last_seq + excluded.last_seq, " +
			"updated_at = excluded.updated_at RETURNING last_seq, done_seq")
	}
	s.keyGiveBack = s.d.rebind("UPDATE " + kt + " SET last_seq = last_seq - ? " +
		"WHERE aggregate_type = ? AND aggregate_id = ? AND last_seq = ?")
	s.keyAdvance = s.d.rebind("UPDATE " + kt + " SET done_seq = ?, updated_at = ? " +
		"WHERE aggregate_type = ? AND aggregate_id = ? AND done_seq = ?")
	if s.d.WritableCTE {
		s.doneAdvance = s.doneAdvanceStmt()
		s.insertCTE1 = s.insertCTEText(1, 1)
		s.readByIDs = s.d.rebind("SELECT " + columns + " FROM " + s.qt + " WHERE event_id = ANY (?::text[])")
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

// MarkDoneOrdered implements core.OrderedStore: in one READ COMMITTED
// transaction (retried after a deadlock when db is a pool), a locking read
// of the rows of ids owner still leases, the DONE update of those rows,
// then, per ordered key in key order, the key update and the promotion of
// the key's next event.
func (s *Store) MarkDoneOrdered(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time) (int64, []core.Event, error) {
	uniq := slices.Clone(ids)
	slices.Sort(uniq)
	uniq = slices.Compact(uniq)
	var total int64
	var promoted []core.Event
	for chunk := range slices.Chunk(uniq, batchChunk) {
		var n int64
		var p []core.Event
		err := s.retry(ctx, db, func() error {
			return inTx(ctx, db, func(tx core.DBTX) error {
				var err error
				if s.doneAdvance != "" {
					n, p, err = s.finishDoneCTE(ctx, tx, owner, chunk, now)
					return err
				}
				n, p, err = s.finish(ctx, tx, owner, chunk, now,
					"status = "+stDone+", done_at = ?, locked_by = NULL, locked_at = NULL", []any{s.ts(now)},
					func(string) bool { return true })
				return err
			})
		})
		if err != nil {
			return total, promoted, s.wrap("mark done", err)
		}
		total += n
		promoted = append(promoted, p...)
	}
	return total, promoted, nil
}

// MarkDeadOrdered implements core.OrderedStore.
func (s *Store) MarkDeadOrdered(ctx context.Context, db core.DBTX, owner, id string, now time.Time, lastErr string) (bool, []core.Event, error) {
	var n int64
	var promoted []core.Event
	err := s.retry(ctx, db, func() error {
		return inTx(ctx, db, func(tx core.DBTX) error {
			var err error
			n, promoted, err = s.finish(ctx, tx, owner, []string{id}, now,
				"status = "+stDead+", attempts = attempts + 1, done_at = ?, last_error = ?, locked_by = NULL, locked_at = NULL",
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

// finish sets set on the rows of ids (sorted, distinct) owner still leases,
// and moves past each of them the keys of those that are ordered and whose
// aggregate type advance accepts, promoting the keys' next events leased by
// owner. It runs in tx, a transaction.
func (s *Store) finish(ctx context.Context, tx core.DBTX, owner string, ids []string, now time.Time, set string, setArgs []any, advance func(aggType string) bool) (int64, []core.Event, error) {
	q, args := s.inList("SELECT event_id, aggregate_type, aggregate_id, seq FROM "+s.qt+
		" WHERE locked_by = ? AND "+notTerminal+" AND event_id IN (", s.padIDs(ids), owner)
	rows, err := tx.QueryContext(ctx, s.d.rebind(q+")"+lockingRead(s.d)), args...)
	if err != nil {
		return 0, nil, err
	}
	var held []string
	var keys []finished
	for rows.Next() {
		var id, aggType string
		var aggID sql.NullString
		var seq sql.NullInt64
		if err := rows.Scan(&id, &aggType, &aggID, &seq); err != nil {
			rows.Close()
			return 0, nil, err
		}
		held = append(held, id)
		if seq.Valid && aggID.Valid && advance(aggType) {
			keys = append(keys, finished{orderKey{aggType, aggID.String}, seq.Int64})
		}
	}
	if err := rows.Close(); err != nil {
		return 0, nil, err
	}
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	if len(held) == 0 {
		return 0, nil, nil
	}
	q, args = s.inList("UPDATE "+s.qt+" SET "+set+" WHERE locked_by = ? AND "+notTerminal+" AND event_id IN (",
		s.padIDs(held), append(setArgs, owner)...)
	res, err := tx.ExecContext(ctx, s.d.rebind(q+")"), args...)
	if err != nil {
		return 0, nil, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, nil, err
	}
	promoted, err := s.advance(ctx, tx, keys, owner, now)
	return n, promoted, err
}

// keyChunk is the most keys one key statement of advance names. The key
// UPDATE's CASE costs keys squared (each moved row tries the WHENs in turn:
// 512 keys take four times as long in one statement as in chunks of 64 on
// SQLite), and past a couple of hundred OR-ed keys MySQL and MariaDB stop
// estimating each range (eq_range_index_dive_limit) and may scan the key
// table, or drive the promotion's join from it and scan the events. Chunks
// keep each statement a walk of its index, whatever the batch.
const keyChunk = 64

// advance moves each key of fs past its finished events and promotes the
// key's next event from WAITING to NEW, leased by owner at now. A key moves
// from done_seq through the finished seqs that follow it without a gap; a
// key whose done_seq+1 is not among them (it went past the event already: a
// skipped or continued DEAD event replayed) is left alone.
//
// Per keyChunk keys, in key order, it takes three statements (four without
// RETURNING): a locking read of the key rows in key order, so that two
// transactions locking several keys never wait on each other in a cycle;
// one UPDATE of those rows; and, as a later statement that sees the WAITING
// rows of writers that held a key's lock until they committed, one UPDATE
// promoting the next events, which it leaves out when no moved key has an
// event after its new done_seq (the read returns last_seq too).
func (s *Store) advance(ctx context.Context, tx core.DBTX, fs []finished, owner string, now time.Time) ([]core.Event, error) {
	if len(fs) == 0 {
		return nil, nil
	}
	slices.SortFunc(fs, func(a, b finished) int {
		return cmp.Or(compareKeys(a.key, b.key), cmp.Compare(a.seq, b.seq))
	})
	if s.d.LimitedWrites {
		return s.advanceLimited(ctx, tx, fs, owner, now)
	}
	var promoted []core.Event
	for len(fs) > 0 {
		n := keyPrefix(fs, keyChunk)
		p, err := s.advanceKeys(ctx, tx, fs[:n], owner, now)
		if err != nil {
			return nil, err
		}
		promoted = append(promoted, p...)
		fs = fs[n:]
	}
	return promoted, nil
}

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

// advanceKeys is advance for fs, sorted by key and seq, of at most keyChunk
// keys.
func (s *Store) advanceKeys(ctx context.Context, tx core.DBTX, fs []finished, owner string, now time.Time) ([]core.Event, error) {
	var keys []orderKey
	for i, f := range fs {
		if i == 0 || f.key != fs[i-1].key {
			keys = append(keys, f.key)
		}
	}
	kt := s.table.KeyTable().Quoted(s.d.Quote)
	match, args := s.keyMatch(keys, nil)
	rows, err := tx.QueryContext(ctx, s.d.rebind("SELECT aggregate_type, aggregate_id, done_seq, last_seq FROM "+kt+
		" WHERE "+match+" ORDER BY aggregate_type, aggregate_id"+lockingRead(s.d)), args...)
	if err != nil {
		return nil, err
	}
	// seqs holds each key row's done_seq and last_seq.
	seqs := make(map[orderKey][2]int64, len(keys))
	for rows.Next() {
		var k orderKey
		var d, l int64
		if err := rows.Scan(&k.aggType, &k.aggID, &d, &l); err != nil {
			rows.Close()
			return nil, err
		}
		seqs[k] = [2]int64{d, l}
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
	by, lockedAt := s.promotionLease(owner, now)
	return s.promoteNext(ctx, tx, moves, by, lockedAt)
}

// promoteNext promotes the event after each run of runs, leased by by at
// lockedAt (see promotionLease), and returns the events it promoted.
func (s *Store) promoteNext(ctx context.Context, tx core.DBTX, runs []seqRun, by, lockedAt any) ([]core.Event, error) {
	idx := s.padMoves(len(runs))
	nargs := make([]any, 0, 2+3*len(idx))
	nargs = append(nargs, by, lockedAt)
	for _, j := range idx {
		nargs = append(nargs, runs[j].key.aggType, runs[j].key.aggID, runs[j].to+1)
	}
	promote, read := s.promoteStmts(len(idx))
	if !s.d.NoReturning {
		return s.scanAll(tx.QueryContext(ctx, promote, nargs...))
	}
	res, err := tx.ExecContext(ctx, promote, nargs...)
	if err != nil {
		return nil, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return nil, err
	}
	// The rows this statement promoted are those of the keys' next events
	// now leased by by at this lease's unique stamp.
	return s.scanAll(tx.QueryContext(ctx, read, nargs...))
}

// advanceLimited is advance for dialects whose UPDATE takes ORDER BY
// (MySQL), in two statements per keyChunk keys instead of three (the
// read-back aside), fs sorted by key and seq. Each run of fs (finished seqs
// of one key that follow each other without a gap) moves its key from the
// seq before it to its last one, if the key's done_seq is the seq before
// it: key UPDATEs of keyChunk runs each, in key order, which so lock the
// rows they move in key order, waiting for their writers. The promotions,
// later statements, then promote the event after each run only where its
// key now stands right before it (a join on the key row), so that a key
// that did not move promotes nothing. A chunk's promotion runs only when
// its key UPDATE reports a moved key with events after its new done_seq:
// with every moved key finished up to its last event (a key's events
// delivered as they are written), the batch takes one statement fewer per
// chunk.
func (s *Store) advanceLimited(ctx context.Context, tx core.DBTX, fs []finished, owner string, now time.Time) ([]core.Event, error) {
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
		w, err := s.moveKeys(ctx, tx, chunk, now)
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
	by, lockedAt := s.promotionLease(owner, now)
	var promoted []core.Event
	for _, chunk := range waiting {
		evs, err := s.promoteNext(ctx, tx, chunk, by, lockedAt)
		if err != nil {
			return nil, err
		}
		promoted = append(promoted, evs...)
	}
	return promoted, nil
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

// moveKeys is one key UPDATE of advanceLimited: each key of runs moves from
// its from to its to, if it stands at from. It reports whether a moved key
// has events after its new done_seq.
func (s *Store) moveKeys(ctx context.Context, tx core.DBTX, runs []seqRun, now time.Time) (bool, error) {
	q, args := s.moveKeysStmt(runs, now)
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
func (s *Store) moveKeysStmt(runs []seqRun, now time.Time) (string, []any) {
	var set, where strings.Builder
	uargs := make([]any, 0, 7*len(runs)+1)
	wargs := make([]any, 0, 3*len(runs))
	set.WriteString("UPDATE " + s.table.KeyTable().Quoted(s.d.Quote) + " SET done_seq = CASE")
	for i, r := range runs {
		set.WriteString(" WHEN aggregate_type = ? AND aggregate_id = ? AND done_seq = ? THEN ?")
		uargs = append(uargs, r.key.aggType, r.key.aggID, r.from, r.to)
		if i > 0 {
			where.WriteString(" OR ")
		}
		where.WriteString("(aggregate_type = ? AND aggregate_id = ? AND done_seq = ?)")
		wargs = append(wargs, r.key.aggType, r.key.aggID, r.from)
	}
	// The last assignment changes nothing; it reports, as the statement's
	// insert id, the last_seq of a moved key that has events after its new
	// done_seq (assignments are made left to right, so done_seq is the new
	// one here), and 0 when none has: then no event waits to be promoted.
	// (Under sql_mode SIMULTANEOUS_ASSIGNMENT it compares the old done_seq
	// and so reports every moved key: the promotion then runs, finding
	// nothing more than it would otherwise.)
	set.WriteString(" ELSE done_seq END, updated_at = ?, last_seq = IF(last_seq > done_seq, LAST_INSERT_ID(last_seq), last_seq) WHERE ")
	uargs = append(uargs, s.ts(now))
	return s.d.rebind(set.String() + where.String() + " ORDER BY aggregate_type, aggregate_id"), append(uargs, wargs...)
}

// promoteStmts returns the statement that promotes the next events of n keys
// from WAITING to NEW, leased (arguments: owner, lease stamp, then each
// key's type, id and next seq), and, without RETURNING, the one that reads
// back the rows it promoted (same arguments). Each (key, seq) is found
// through the seq index.
func (s *Store) promoteStmts(n int) (promote, read string) {
	next := "(" + strings.TrimSuffix(strings.Repeat("(aggregate_type = ? AND aggregate_id = ? AND seq = ?) OR ", n), " OR ") + ")"
	promote = "UPDATE " + s.qt + " SET status = " + stNew + ", locked_by = ?, locked_at = ? WHERE status = " + stWaiting + " AND " + next
	if s.d.LimitedWrites {
		// advanceLimited moves the keys without reading them first: an event
		// is promoted only if its key now stands right before it. The join
		// starts from the events (STRAIGHT_JOIN), found by (key, seq): left
		// to itself, the optimizer may start from the key rows and read
		// every event of their keys, or scan the events.
		nextE := "(" + strings.TrimSuffix(strings.Repeat("(e.aggregate_type = ? AND e.aggregate_id = ? AND e.seq = ?) OR ", n), " OR ") + ")"
		promote = "UPDATE " + s.qt + " e STRAIGHT_JOIN " + s.table.KeyTable().Quoted(s.d.Quote) + " k " +
			"ON k.aggregate_type = e.aggregate_type AND k.aggregate_id = e.aggregate_id AND k.done_seq = e.seq - 1 " +
			"SET e.status = " + stNew + ", e.locked_by = ?, e.locked_at = ? WHERE e.status = " + stWaiting + " AND " + nextE
	}
	if !s.d.NoReturning {
		return s.d.rebind(promote + " RETURNING " + columns), ""
	}
	// The rows it promoted are the keys' next events now leased by owner at
	// this lease's unique stamp.
	return s.d.rebind(promote), s.d.rebind("SELECT " + columns + " FROM " + s.qt +
		" WHERE status = " + stNew + " AND locked_by = ? AND locked_at = ? AND " + next)
}

// keyMatch returns "(aggregate_type = ? AND aggregate_id = ?) OR ..." for
// keys, padded like padMoves, and args followed by the keys' values.
func (s *Store) keyMatch(keys []orderKey, args []any) (string, []any) {
	var sb strings.Builder
	for i, j := range s.padMoves(len(keys)) {
		if i > 0 {
			sb.WriteString(" OR ")
		}
		sb.WriteString("(aggregate_type = ? AND aggregate_id = ?)")
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

// SkipDead implements core.OrderedStore: per id, in one transaction, a
// locking read of the DEAD ordered row, the key update from seq-1 to seq
// and the promotion of the next event, not leased.
func (s *Store) SkipDead(ctx context.Context, db core.DBTX, ids []string, now time.Time) (int64, error) {
	uniq := slices.Clone(ids)
	slices.Sort(uniq)
	uniq = slices.Compact(uniq)
	var total int64
	for chunk := range slices.Chunk(uniq, batchChunk) {
		var n int64
		err := s.retry(ctx, db, func() error {
			n = 0
			return inTx(ctx, db, func(tx core.DBTX) error {
				q, args := s.inList("SELECT aggregate_type, aggregate_id, seq FROM "+s.qt+" WHERE "+s.d.Dead+
					" AND seq IS NOT NULL AND event_id IN (", chunk)
				rows, err := tx.QueryContext(ctx, s.d.rebind(q+")"+lockingRead(s.d)), args...)
				if err != nil {
					return err
				}
				var fs []finished
				for rows.Next() {
					var f finished
					if err := rows.Scan(&f.key.aggType, &f.key.aggID, &f.seq); err != nil {
						rows.Close()
						return err
					}
					fs = append(fs, f)
				}
				if err := rows.Close(); err != nil {
					return err
				}
				if err := rows.Err(); err != nil {
					return err
				}
				slices.SortFunc(fs, func(a, b finished) int { return compareKeys(a.key, b.key) })
				for _, f := range fs {
					res, err := tx.ExecContext(ctx, s.keyAdvance, f.seq, s.ts(now), f.key.aggType, f.key.aggID, f.seq-1)
					if err != nil {
						return err
					}
					moved, err := res.RowsAffected()
					if err != nil {
						return err
					}
					if moved == 0 {
						continue
					}
					n++
					if _, err := tx.ExecContext(ctx, s.promoteFree, f.key.aggType, f.key.aggID, f.seq+1); err != nil {
						return err
					}
				}
				return nil
			})
		})
		if err != nil {
			return total, s.wrap("skip dead events", err)
		}
		total += n
	}
	return total, nil
}

// blockedFrom is the join of the dead heads with their keys; a dead event
// is its key's head when its seq is done_seq+1.
func (s *Store) blockedFrom() string {
	kt := s.table.KeyTable().Quoted(s.d.Quote)
	return " FROM " + s.qt + " e JOIN " + kt + " k ON k.aggregate_type = e.aggregate_type AND k.aggregate_id = e.aggregate_id " +
		"AND k.done_seq = e.seq - 1 WHERE e." + s.d.Dead + " AND e.seq IS NOT NULL"
}

// BlockedKeys implements core.OrderedStore.
func (s *Store) BlockedKeys(ctx context.Context, db core.DBTX, f core.DeadFilter) ([]core.BlockedKey, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultDeadLimit
	}
	q := "SELECT e.aggregate_type, e.aggregate_id, e.event_id, e.event_type, e.seq, e.done_at, e.last_error, k.last_seq - k.done_seq - 1" +
		s.blockedFrom()
	var args []any
	if f.EventType != "" {
		q += " AND e.event_type = ?"
		args = append(args, f.EventType)
	}
	if f.AggregateType != "" {
		q += " AND e.aggregate_type = ?"
		args = append(args, f.AggregateType)
	}
	q += " ORDER BY e.created_at, e.event_id LIMIT ?"
	rows, err := db.QueryContext(ctx, s.d.rebind(q), append(args, limit)...)
	if err != nil {
		return nil, s.wrap("list blocked keys", err)
	}
	defer rows.Close()
	var out []core.BlockedKey
	for rows.Next() {
		var b core.BlockedKey
		var deadAt nullTime
		var lastErr sql.NullString
		if err := rows.Scan(&b.AggregateType, &b.AggregateID, &b.EventID, &b.EventType, &b.Seq, &deadAt, &lastErr, &b.Waiting); err != nil {
			return nil, s.wrap("list blocked keys", err)
		}
		b.DeadAt, b.LastError = deadAt.Time, lastErr.String
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("list blocked keys", err)
	}
	return out, nil
}

// orderedStats counts the waiting events (from the key table: every
// unfinished event of a key but its head waits) and the blocked keys.
func (s *Store) orderedStats(ctx context.Context, db core.DBTX, st *core.Stats) error {
	kt := s.table.KeyTable().Quoted(s.d.Quote)
	err := db.QueryRowContext(ctx, "SELECT COALESCE(SUM(last_seq - done_seq - 1), 0) FROM "+kt+
		" WHERE last_seq > done_seq").Scan(&st.Waiting)
	if err != nil {
		return fmt.Errorf("count waiting events: %w", err)
	}
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*)"+s.blockedFrom()).Scan(&st.BlockedKeys); err != nil {
		return fmt.Errorf("count blocked keys: %w", err)
	}
	return nil
}

var _ core.OrderedStore = (*Store)(nil)

// PurgeKeys deletes up to limit rows of the key table whose keys have
// nothing left: every event finished (done_seq = last_seq), none written or
// finished since before, and no event row of the key left in the outbox
// table (the purge deleted them). A key written again later starts at seq 1,
// which no row of it holds any more.
//
// A writer of the key locks its row before it inserts: either it committed
// first, and the DELETE, which re-checks done_seq = last_seq on the row's
// latest version once it holds the lock, leaves the row alone; or the DELETE
// committed first, and the writer creates the row afresh.
func (s *Store) PurgeKeys(ctx context.Context, db core.DBTX, before time.Time, limit int) (int64, error) {
	if limit <= 0 {
		return 0, core.Invalid("purge limit", "%d is not positive", limit)
	}
	q, args := s.purgeKeys(before, limit)
	n, err := s.exec(ctx, db, q, args...)
	return n, s.wrap("purge keys", err)
}

// purgeKeys returns the PurgeKeys statement and its arguments.
func (s *Store) purgeKeys(before time.Time, limit int) (string, []any) {
	kt := s.table.KeyTable().Quoted(s.d.Quote)
	idle := func(k string) string {
		return k + "done_seq = " + k + "last_seq AND " + k + "updated_at < ? AND NOT EXISTS (SELECT 1 FROM " + s.qt +
			" e WHERE e.aggregate_type = " + k + "aggregate_type AND e.aggregate_id = " + k + "aggregate_id AND e.seq IS NOT NULL)"
	}
	if s.d.LimitedWrites {
		return "DELETE FROM " + kt + " WHERE " + idle(kt+".") + " LIMIT ?", []any{s.ts(before), limit}
	}
	// The outer condition is checked again on the row's latest version when
	// the DELETE waited for its lock; the subquery's is not.
	return "DELETE FROM " + kt + " WHERE done_seq = last_seq AND updated_at < ? AND (aggregate_type, aggregate_id) IN " +
		"(SELECT k.aggregate_type, k.aggregate_id FROM " + kt + " k WHERE " + idle("k.") + " LIMIT ?)", []any{s.ts(before), s.ts(before), limit}
}

// insertOrderedCTE is InsertOrdered in one statement, for dialects with
// WritableCTE and a write that fits in one statement: a data-modifying CTE
// upserts the rows of keys (sorted) in one multi-row INSERT ... ON CONFLICT,
// which locks them in that order until the transaction ends, as takeSeqs
// does one at a time; the INSERT of the events then computes each one's seq
// and status from the key rows it returns. Being one statement, it is
// all-or-nothing without a transaction or savepoint of its own.
//
// A row of the events' VALUES carries, beside its columns, n, the number of
// events of its key in the write (0 for an unordered event), and pos, its
// position among them: its seq is last_seq - n + 1 + pos, and it is its
// key's head, inserted NEW and leased like an unordered event, when pos is
// 0 and done_seq was last_seq before the write.
func (s *Store) insertOrderedCTE(ctx context.Context, db core.DBTX, envs []core.Envelope, keys []keyCount, opts core.InsertOptions) (core.InsertResult, error) {
	now := s.ts(time.Now())
	args := make([]any, 0, 4*len(keys)+11*len(envs)+2)
	count := make(map[orderKey]int, len(keys))
	for _, k := range keys {
		args = append(args, k.key.aggType, k.key.aggID, k.n, now)
		count[k.key] = k.n
	}
	pos := make(map[orderKey]int, len(keys))
	for _, env := range envs {
		headers, err := encodeHeaders(env.RawHeaders())
		if err != nil {
			return core.InsertResult{}, err
		}
		payload := env.RawPayload()
		if payload == nil {
			payload = []byte{}
		}
		k := orderKey{env.AggregateType(), env.AggregateID()}
		n, p := count[k], pos[k]
		if n > 0 {
			pos[k] = p + 1
		}
		args = append(args, env.ID(), env.Type(), env.AggregateType(), nullIfEmpty(env.AggregateID()),
			nullIfEmpty(env.TenantID()), payload, headers, s.ts(env.AvailableAt()), s.ts(env.OccurredAt()), n, p)
	}
	var lockedBy, lockedAt any
	if opts.LeaseOwner != "" {
		lockedBy, lockedAt = opts.LeaseOwner, s.ts(opts.LeaseAt)
	}
	args = append(args, lockedBy, lockedAt)
	q := s.insertCTE1
	if len(keys) != 1 || len(envs) != 1 {
		q = s.insertCTEText(len(keys), len(envs))
	}

	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return core.InsertResult{}, s.wrap("insert events", err)
	}
	defer rows.Close()
	type got struct {
		status core.Status
		seq    int64
	}
	byID := make(map[string]got, len(envs))
	for rows.Next() {
		var id string
		var g got
		if err := rows.Scan(&id, &g.status, &g.seq); err != nil {
			return core.InsertResult{}, s.wrap("insert events", err)
		}
		byID[id] = g
	}
	if err := rows.Err(); err != nil {
		return core.InsertResult{}, s.wrap("insert events", err)
	}
	res := core.InsertResult{Seqs: make([]int64, len(envs))}
	for i, env := range envs {
		g, ok := byID[env.ID()]
		if !ok {
			continue
		}
		res.Seqs[i] = g.seq
		if g.status == core.StatusWaiting {
			res.Waiting = append(res.Waiting, env.ID())
		}
	}
	return res, nil
}

// insertCTEText returns the statement of insertOrderedCTE for nkeys keys and
// nenvs envelopes; arguments: each key's type, id, count and the time, each
// envelope's columns then n and pos, and the lease owner and time of the
// heads.
func (s *Store) insertCTEText(nkeys, nenvs int) string {
	var sb strings.Builder
	sb.WriteString("WITH k AS (INSERT INTO " + s.table.KeyTable().Quoted(s.d.Quote) +
		" AS k (aggregate_type, aggregate_id, last_seq, done_seq, updated_at) VALUES ")
	for i := range nkeys {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString("(?, ?, ?, 0, ?)")
	}
	sb.WriteString(" ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_seq = k.last_seq + excluded.last_seq, " +
		"updated_at = excluded.updated_at RETURNING aggregate_type, aggregate_id, last_seq, done_seq), " +
		"v (event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, available_at, created_at, n, pos) AS (VALUES ")
	// The first row's casts type the columns of the VALUES list.
	sb.WriteString("(?::text, ?::text, ?::text, ?::text, ?::text, ?::bytea, ?::text, ?::timestamptz, ?::timestamptz, ?::bigint, ?::bigint)")
	for range nenvs - 1 {
		sb.WriteString(", (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
	}
	const head = "(k.last_seq IS NULL OR (v.pos = 0 AND k.done_seq = k.last_seq - v.n))"
	sb.WriteString("), e AS (" + s.insertPrefix[:strings.Index(s.insertPrefix, " VALUES ")] +
		" SELECT v.event_id, v.event_type, v.aggregate_type, v.aggregate_id, v.tenant_id, v.payload, v.headers, " +
		"CASE WHEN " + head + " THEN " + stNew + " ELSE " + stWaiting + " END, 0, v.available_at, v.created_at, " +
		"CASE WHEN " + head + " THEN ?::text END, CASE WHEN " + head + " THEN ?::timestamptz END, k.last_seq - v.n + 1 + v.pos " +
		"FROM v LEFT JOIN k ON k.aggregate_type = v.aggregate_type AND k.aggregate_id = v.aggregate_id " +
		"RETURNING event_id, status, seq) SELECT event_id, status, seq FROM e WHERE seq IS NOT NULL")
	return s.d.rebind(sb.String())
}

// finishDoneCTE is finish for DONE outcomes, then advance, for dialects with
// WritableCTE: mostly one statement instead of five. It marks the rows of
// ids owner still leases DONE and, in data-modifying CTEs fed by the rows it
// marked, locks their keys' rows in key order, moves each key from done_seq
// through the run of finished seqs that follows it without a gap (runs found
// as gaps-and-islands: seq minus its rank within the key is constant along a
// run), and promotes each moved key's next event if the statement's
// snapshot sees it WAITING. It returns how many rows it marked, and per
// moved key its new done_seq, its last_seq and the id of the event it
// promoted, if any.
//
// A key whose lock it waited for, held by a writer that then committed the
// key's next event, shows that event in last_seq (the row's latest
// version, which the lock returns) but not in the statement's snapshot: the
// promotion of those keys' next events is a second statement, whose
// snapshot sees it. The promoted events are read back (a third statement,
// only when the first promoted some), to be delivered.
func (s *Store) finishDoneCTE(ctx context.Context, tx core.DBTX, owner string, ids []string, now time.Time) (int64, []core.Event, error) {
	at := s.ts(now)
	rows, err := tx.QueryContext(ctx, s.doneAdvance, at, owner, ids, at, owner, at)
	if err != nil {
		return 0, nil, err
	}
	var n int64
	var promotedIDs []string
	promotedKeys := map[orderKey]bool{}
	var next []finished // keys moved with events after done_seq: (key, done_seq+1)
	for rows.Next() {
		var aggType, aggID, promoted sql.NullString
		var count, done, last sql.NullInt64
		if err := rows.Scan(&count, &aggType, &aggID, &done, &last, &promoted); err != nil {
			rows.Close()
			return 0, nil, err
		}
		k := orderKey{aggType.String, aggID.String}
		switch {
		case promoted.Valid: // a row of p
			promotedIDs = append(promotedIDs, promoted.String)
			promotedKeys[k] = true
			continue
		case count.Valid:
			n = count.Int64
		}
		if done.Valid && last.Int64 > done.Int64 {
			next = append(next, finished{k, done.Int64 + 1})
		}
	}
	if err := rows.Close(); err != nil {
		return 0, nil, err
	}
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	var behind []finished // keys whose next event the snapshot did not see
	for _, f := range next {
		if !promotedKeys[f.key] {
			behind = append(behind, f)
		}
	}
	var out []core.Event
	if len(promotedIDs) > 0 {
		evs, err := s.scanAll(tx.QueryContext(ctx, s.readByIDs, promotedIDs))
		if err != nil {
			return 0, nil, err
		}
		out = evs
	}
	if len(behind) > 0 {
		nargs := []any{owner, at}
		for _, j := range s.padMoves(len(behind)) {
			nargs = append(nargs, behind[j].key.aggType, behind[j].key.aggID, behind[j].seq)
		}
		promote, _ := s.promoteStmts((len(nargs) - 2) / 3)
		evs, err := s.scanAll(tx.QueryContext(ctx, promote, nargs...))
		if err != nil {
			return 0, nil, err
		}
		out = append(out, evs...)
	}
	return n, out, nil
}

// doneAdvanceStmt returns the statement of finishDoneCTE; arguments: the DONE
// time, the lease owner, the ids as an array, the time again for the key
// rows, then the owner and time of the promoted events' lease.
func (s *Store) doneAdvanceStmt() string {
	kt := s.table.KeyTable().Quoted(s.d.Quote)
	return s.d.rebind("WITH d AS (UPDATE " + s.qt + " SET status = " + stDone + ", done_at = ?, locked_by = NULL, locked_at = NULL " +
		"WHERE locked_by = ? AND " + notTerminal + " AND event_id = ANY (?::text[]) RETURNING aggregate_type, aggregate_id, seq), " +
		"f AS (SELECT aggregate_type, aggregate_id, seq, seq - row_number() OVER (PARTITION BY aggregate_type, aggregate_id ORDER BY seq) AS run " +
		"FROM d WHERE seq IS NOT NULL AND aggregate_id IS NOT NULL), " +
		"r AS (SELECT aggregate_type, aggregate_id, min(seq) - 1 AS from_seq, max(seq) AS to_seq FROM f GROUP BY aggregate_type, aggregate_id, run), " +
		"l AS (SELECT k.aggregate_type, k.aggregate_id, r.from_seq, r.to_seq FROM " + kt + " k JOIN r ON k.aggregate_type = r.aggregate_type AND k.aggregate_id = r.aggregate_id " +
		"ORDER BY k.aggregate_type, k.aggregate_id FOR UPDATE OF k), " +
		"u AS (UPDATE " + kt + " k SET done_seq = l.to_seq, updated_at = ? FROM l " +
		"WHERE k.aggregate_type = l.aggregate_type AND k.aggregate_id = l.aggregate_id AND k.done_seq = l.from_seq " +
		"RETURNING k.aggregate_type, k.aggregate_id, k.done_seq, k.last_seq), " +
		"p AS (UPDATE " + s.qt + " e SET status = " + stNew + ", locked_by = ?, locked_at = ? FROM u " +
		"WHERE e.aggregate_type = u.aggregate_type AND e.aggregate_id = u.aggregate_id AND e.seq = u.done_seq + 1 AND e.status = " + stWaiting + " " +
		"RETURNING e.event_id, e.aggregate_type, e.aggregate_id) " +
		"SELECT (SELECT count(*) FROM d), u.aggregate_type, u.aggregate_id, u.done_seq, u.last_seq, NULL " +
		"FROM (VALUES (1)) AS one LEFT JOIN u ON true " +
		"UNION ALL SELECT NULL, aggregate_type, aggregate_id, NULL, NULL, event_id FROM p")
}
