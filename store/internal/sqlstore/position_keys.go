package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/position"
)

// The failure path of ordered events in position delivery
// (docs/design/position.md, "Ordered aggregate types"): the STREAM rows of a
// key whose head failed are moved to the claim path's ordered delivery,
// where the key table keeps the key waiting behind its head across restarts
// and for every instance's poller.

// Divert implements position.Log.
func (l *posLog) Divert(ctx context.Context, db core.DBTX, k position.Key, ids []string, f *position.Failure) (bool, error) {
	if len(ids) == 0 {
		return f == nil, nil
	}
	s := l.s
	var result bool
	err := s.retry(ctx, db, func() error {
		result = false
		return inTx(ctx, db, func(tx core.DBTX) error {
			var err error
			result, err = l.divert(ctx, tx, k, ids, f)
			return err
		})
	})
	if err != nil {
		return false, s.wrap("move stream events of key ("+k.AggregateType+", "+k.AggregateID+") to the claim path", err)
	}
	return result, nil
}

func (l *posLog) divert(ctx context.Context, tx core.DBTX, k position.Key, ids []string, f *position.Failure) (bool, error) {
	s := l.s
	kt := s.table.KeyTable().Quoted(s.d.Quote)
	if f == nil {
		var done, last int64
		err := tx.QueryRowContext(ctx, s.d.rebind("SELECT done_seq, last_seq FROM "+kt+
			" WHERE aggregate_type = ? AND aggregate_id = ?"), k.AggregateType, k.AggregateID).Scan(&done, &last)
		if errors.Is(err, sql.ErrNoRows) || err == nil && done >= last {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
	// The rows still STREAM, locked: only they move, and only they take a
	// sequence number, so that the key never waits for a number without
	// its event.
	var present []string
	for chunk := range slices.Chunk(ids, batchChunk) {
		q, args := s.inList("SELECT event_id FROM "+s.qt+" WHERE status = "+stStream+" AND event_id IN (", chunk)
		rows, err := tx.QueryContext(ctx, s.d.rebind(q+")"+lockingRead(s.d)), args...)
		if err != nil {
			return false, err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return false, err
			}
			present = append(present, id)
		}
		if err := rows.Close(); err != nil {
			return false, err
		}
		if err := rows.Err(); err != nil {
			return false, err
		}
	}
	headMoved := slices.Contains(present, ids[0])
	if len(present) == 0 {
		return f == nil, nil
	}
	kept := make([]string, 0, len(present))
	for _, id := range ids {
		if slices.Contains(present, id) && !slices.Contains(kept, id) {
			kept = append(kept, id)
		}
	}
	last, head, err := s.keys.takeSeqs(ctx, tx, orderKey{k.AggregateType, k.AggregateID}, len(kept), s.ts(time.Now()))
	if err != nil {
		return false, err
	}
	seq := last - int64(len(kept)) + 1
	for i, id := range kept {
		var q string
		var args []any
		failed := f != nil && id == ids[0]
		switch {
		case failed && i == 0 && head && f.Dead:
			q = "UPDATE " + s.qt + " SET status = " + stDead + ", seq = ?, attempts = attempts + 1, done_at = ?, last_error = ?"
			args = []any{seq, s.ts(f.At), core.TruncateError(f.LastErr)}
		case failed && i == 0 && head:
			q = "UPDATE " + s.qt + " SET status = " + stRetry + ", seq = ?, attempts = attempts + 1, available_at = ?, last_error = ?"
			args = []any{seq, s.ts(f.At), core.TruncateError(f.LastErr)}
		case failed:
			// Not the key's head (the key table had unfinished events: a
			// writer of another delivery mode): it waits its turn.
			q = "UPDATE " + s.qt + " SET status = " + stWaiting + ", seq = ?, attempts = attempts + 1, last_error = ?"
			args = []any{seq, core.TruncateError(f.LastErr)}
		case i == 0 && head:
			q = "UPDATE " + s.qt + " SET status = " + stNew + ", seq = ?"
			args = []any{seq}
		default:
			q = "UPDATE " + s.qt + " SET status = " + stWaiting + ", seq = ?"
			args = []any{seq}
		}
		n, err := s.exec(ctx, tx, q+" WHERE event_id = ? AND status = "+stStream, append(args, id)...)
		if err != nil {
			return false, err
		}
		if n != 1 {
			return false, fmt.Errorf("event %s left STREAM under its lock", id)
		}
		seq++
	}
	if f != nil {
		return headMoved, nil
	}
	return true, nil
}

// OpenKeys implements position.Log.
func (l *posLog) OpenKeys(ctx context.Context, db core.DBTX) ([]position.Key, error) {
	s := l.s
	rows, err := db.QueryContext(ctx, "SELECT aggregate_type, aggregate_id FROM "+s.table.KeyTable().Quoted(s.d.Quote)+
		" WHERE done_seq < last_seq")
	if err != nil {
		return nil, s.wrap("read the keys with unfinished events", err)
	}
	defer rows.Close()
	var out []position.Key
	for rows.Next() {
		var k position.Key
		if err := rows.Scan(&k.AggregateType, &k.AggregateID); err != nil {
			return nil, s.wrap("read the keys with unfinished events", err)
		}
		out = append(out, k)
	}
	return out, s.wrap("read the keys with unfinished events", rows.Err())
}
