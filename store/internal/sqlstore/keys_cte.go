package sqlstore

import (
	"context"
	"database/sql"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
)

// cteKeys is the key strategy KeysWritableCTE (PostgreSQL): returningKeys,
// whose takeSeqs and advance it keeps for the writes too large for one
// statement and for DEAD outcomes, with data-modifying WITH clauses for the
// common ordered write and the DONE batch, each then mostly one statement.
type cteKeys struct {
	returningKeys
	insert1  string // insertSQL(1, 1), the common write
	doneSkip string // markDone, not waiting for key rows
	doneWait string // markDone, waiting for them
}

func newCTEKeys(s *Store) *cteKeys {
	k := &cteKeys{returningKeys: *newReturningKeys(s)}
	k.insert1 = k.insertSQL(1, 1)
	k.doneSkip = k.doneSQL(false)
	k.doneWait = k.doneSQL(true)
	return k
}

// insertAll implements keyStrategy with InsertOrdered in one statement, for
// a write whose arguments fit in one: a data-modifying CTE
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
func (k *cteKeys) insertAll(ctx context.Context, db core.DBTX, envs []core.Envelope, keys []keyCount, opts core.InsertOptions) (core.InsertResult, bool, error) {
	s := k.s
	if 4*len(keys)+11*len(envs)+2 > s.d.MaxParams {
		return core.InsertResult{}, false, nil
	}
	now := s.ts(time.Now())
	args := make([]any, 0, 4*len(keys)+11*len(envs)+2)
	count := make(map[orderKey]int, len(keys))
	for _, kc := range keys {
		args = append(args, kc.key.aggType, kc.key.aggID, kc.n, now)
		count[kc.key] = kc.n
	}
	pos := make(map[orderKey]int, len(keys))
	for _, env := range envs {
		headers, err := encodeHeaders(env.RawHeaders())
		if err != nil {
			return core.InsertResult{}, false, err
		}
		payload := env.RawPayload()
		if payload == nil {
			payload = []byte{}
		}
		key := orderKey{env.AggregateType(), env.AggregateID()}
		n, p := count[key], pos[key]
		if n > 0 {
			pos[key] = p + 1
		}
		args = append(args, env.ID(), env.Type(), env.AggregateType(), nullIfEmpty(env.AggregateID()),
			nullIfEmpty(env.TenantID()), payload, headers, s.ts(env.AvailableAt()), s.ts(env.OccurredAt()), n, p)
	}
	var lockedBy, lockedAt any
	if opts.LeaseOwner != "" {
		lockedBy, lockedAt = opts.LeaseOwner, s.ts(opts.LeaseAt)
	}
	args = append(args, lockedBy, lockedAt)
	q := k.insert1
	if len(keys) != 1 || len(envs) != 1 {
		q = k.insertSQL(len(keys), len(envs))
	}

	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return core.InsertResult{}, false, s.wrap("insert events", err)
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
			return core.InsertResult{}, false, s.wrap("insert events", err)
		}
		byID[id] = g
	}
	if err := rows.Err(); err != nil {
		return core.InsertResult{}, false, s.wrap("insert events", err)
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
	return res, true, nil
}

// insertSQL returns the statement of insertAll for nkeys keys and
// nenvs envelopes; arguments: each key's type, id, count and the time, each
// envelope's columns then n and pos, and the lease owner and time of the
// heads.
func (k *cteKeys) insertSQL(nkeys, nenvs int) string {
	s := k.s
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

// markDone implements keyStrategy with finish for DONE outcomes, then
// advance, mostly in one statement instead of five. It marks the rows of
// ids owner still leases DONE and, in data-modifying CTEs fed by the rows it
// marked, moves each key from done_seq through the run of finished seqs that
// follows it without a gap (runs found as gaps-and-islands: seq minus its
// rank within the key is constant along a run), and promotes each moved
// key's next event if the statement's snapshot sees it WAITING, returning
// the promoted rows. It returns how many rows it marked, per moved key its
// new done_seq and its last_seq, and the promoted events.
//
// Unless wait, it first locks the key rows of the leased rows of ids in key
// order with SKIP LOCKED, before it marks anything, and marks only the rows
// of the keys it locked and the unordered ones: a key row held by another
// transaction (a writer of the key, until it commits, or another DONE
// batch) is passed, and the ids of its rows returned as busy. With wait, it
// marks every row first, then locks their keys' rows in key order, waiting
// for each (the old order, for the busy keys of a first call).
//
// A key whose writer committed after the statement's snapshot was taken
// but before its lock shows that writer's events in last_seq (the row's
// latest version, which the lock returns) but not in the statement's
// snapshot. Unless wait, such a key is left busy too: a key row is kept
// only if the snapshot sees the key's event at last_seq, and with it every
// earlier one (a key's writers commit in seq order, each holding the row),
// so that the statement promotes every next event it should and, run on
// its own, commits nothing half done. With wait, the promotion of those
// keys' next events is a second statement in tx, whose snapshot sees them;
// unless wait it finds none, and is kept only as a safety net.
func (k *cteKeys) markDone(ctx context.Context, tx core.DBTX, owner string, ids []string, now, leaseAt time.Time, wait bool) (int64, []core.Event, []string, error) {
	s := k.s
	at, lat := s.ts(now), s.ts(leaseAt)
	q, args := k.doneSkip, []any{owner, ids, at, owner, ids, at, owner, lat}
	if wait {
		q, args = k.doneWait, []any{at, owner, ids, at, owner, lat}
	}
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return 0, nil, nil, err
	}
	var n int64
	var out []core.Event
	var busy []string
	promotedKeys := map[orderKey]bool{}
	var next []seqRun // keys moved with events after done_seq, to done_seq
	var (
		kind              int
		count, done, last sql.NullInt64
		aggType, aggID    sql.NullString
		r                 row
	)
	dest := append([]any{&kind, &count, &aggType, &aggID, &done, &last}, r.dest()...)
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return 0, nil, nil, err
		}
		switch kind {
		case doneRowPromoted:
			ev, err := r.decode()
			if err != nil {
				rows.Close()
				return 0, nil, nil, core.RowError{ID: r.id, Err: err}
			}
			out = append(out, ev)
			promotedKeys[orderKey{ev.AggregateType(), ev.AggregateID()}] = true
		case doneRowBusy:
			busy = append(busy, r.id)
		default:
			n = count.Int64
			if done.Valid && last.Int64 > done.Int64 {
				next = append(next, seqRun{orderKey{aggType.String, aggID.String}, done.Int64 - 1, done.Int64})
			}
		}
	}
	if err := rows.Close(); err != nil {
		return 0, nil, nil, err
	}
	if err := rows.Err(); err != nil {
		return 0, nil, nil, err
	}
	var behind []seqRun // keys whose next event the snapshot did not see
	for _, r := range next {
		if !promotedKeys[r.key] {
			behind = append(behind, r)
		}
	}
	if len(behind) > 0 {
		evs, err := k.promote(ctx, tx, behind, owner, lat)
		if err != nil {
			return 0, nil, nil, err
		}
		out = append(out, evs...)
	}
	slices.Sort(busy)
	return n, out, slices.Compact(busy), nil
}

// The kinds of the rows the statements of markDone return (their first
// column).
const (
	doneRowKey      = 0 // the count of marked rows, and a moved key, if any
	doneRowPromoted = 1 // a promoted event
	doneRowBusy     = 2 // the id of a row left for a key row another transaction held
)

// doneSQL returns the statement of markDone; arguments, with wait: the
// DONE time, the lease owner, the ids as an array, the time again for the
// key rows, then the owner and time of the promoted events' lease; without:
// the lease owner and the ids, then the same. Each row it returns is one of
// doneRowKey, doneRowPromoted and doneRowBusy: the kind, the count of
// marked rows, a moved key's type, id, done_seq and last_seq, then the
// columns of a promoted event (placeholders but for the event id of a busy
// row).
func (k *cteKeys) doneSQL(wait bool) string {
	s := k.s
	kt := s.table.KeyTable().Quoted(s.d.Quote)
	const (
		ordered = "seq IS NOT NULL AND aggregate_id IS NOT NULL"
		// The event columns of a row that is not a promoted event.
		filler = ", '', '', NULL, NULL, NULL, NULL, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL"
	)
	done := "UPDATE " + s.qt + " SET status = " + stDone + ", done_at = ?, locked_by = NULL, locked_at = NULL " +
		"WHERE locked_by = ? AND " + notTerminal + " AND event_id = ANY (?::text[])"
	var sb strings.Builder
	sb.WriteString("WITH ")
	if !wait {
		sb.WriteString("c AS (SELECT event_id, aggregate_type, aggregate_id, seq FROM " + s.qt +
			" WHERE locked_by = ? AND " + notTerminal + " AND event_id = ANY (?::text[])), " +
			"l AS (SELECT k.aggregate_type, k.aggregate_id, k.last_seq FROM " + kt + " k " +
			"WHERE (k.aggregate_type, k.aggregate_id) IN (SELECT aggregate_type, aggregate_id FROM c WHERE " + ordered + ") " +
			"ORDER BY k.aggregate_type, k.aggregate_id FOR UPDATE OF k SKIP LOCKED), " +
			// The locked rows whose last event the snapshot sees.
			"v AS (SELECT aggregate_type, aggregate_id FROM l WHERE EXISTS (SELECT 1 FROM " + s.qt + " e " +
			"WHERE e.aggregate_type = l.aggregate_type AND e.aggregate_id = l.aggregate_id AND e.seq = l.last_seq)), " +
			"d AS (" + done + " AND (seq IS NULL OR aggregate_id IS NULL OR (aggregate_type, aggregate_id) IN (SELECT aggregate_type, aggregate_id FROM v)) " +
			"RETURNING aggregate_type, aggregate_id, seq), ")
	} else {
		sb.WriteString("d AS (" + done + " RETURNING aggregate_type, aggregate_id, seq), ")
	}
	sb.WriteString("f AS (SELECT aggregate_type, aggregate_id, seq, seq - row_number() OVER (PARTITION BY aggregate_type, aggregate_id ORDER BY seq) AS run " +
		"FROM d WHERE " + ordered + "), " +
		"r AS (SELECT aggregate_type, aggregate_id, min(seq) - 1 AS from_seq, max(seq) AS to_seq FROM f GROUP BY aggregate_type, aggregate_id, run), ")
	if wait {
		sb.WriteString("w AS (SELECT k.aggregate_type, k.aggregate_id, r.from_seq, r.to_seq FROM " + kt + " k JOIN r ON k.aggregate_type = r.aggregate_type AND k.aggregate_id = r.aggregate_id " +
			"ORDER BY k.aggregate_type, k.aggregate_id FOR UPDATE OF k), ")
	} else {
		// The key rows of r are locked already (l).
		sb.WriteString("w AS (SELECT aggregate_type, aggregate_id, from_seq, to_seq FROM r), ")
	}
	sb.WriteString("u AS (UPDATE " + kt + " k SET done_seq = w.to_seq, updated_at = ? FROM w " +
		"WHERE k.aggregate_type = w.aggregate_type AND k.aggregate_id = w.aggregate_id AND k.done_seq = w.from_seq " +
		"RETURNING k.aggregate_type, k.aggregate_id, k.done_seq, k.last_seq), " +
		"p AS (UPDATE " + s.qt + " e SET status = " + stNew + ", locked_by = ?, locked_at = ? FROM u " +
		"WHERE e.aggregate_type = u.aggregate_type AND e.aggregate_id = u.aggregate_id AND e.seq = u.done_seq + 1 AND e.status = " + stWaiting + " " +
		"RETURNING " + prefixed("e.", columns) + ") " +
		"SELECT " + strconv.Itoa(doneRowPromoted) + ", NULL::bigint, NULL::text, NULL::text, NULL::bigint, NULL::bigint, " + columns + " FROM p " +
		"UNION ALL SELECT " + strconv.Itoa(doneRowKey) + ", (SELECT count(*) FROM d), u.aggregate_type, u.aggregate_id, u.done_seq, u.last_seq, ''" + filler + " " +
		"FROM (VALUES (1)) AS one LEFT JOIN u ON true")
	if !wait {
		sb.WriteString(" UNION ALL SELECT " + strconv.Itoa(doneRowBusy) + ", NULL, NULL, NULL, NULL, NULL, event_id" + filler + " FROM c " +
			"WHERE " + ordered + " AND (aggregate_type, aggregate_id) NOT IN (SELECT aggregate_type, aggregate_id FROM v)")
	}
	return s.d.rebind(sb.String())
}

// prefixed returns the comma-separated list cols with each column prefixed
// by alias.
func prefixed(alias, cols string) string {
	return alias + strings.ReplaceAll(cols, ", ", ", "+alias)
}
