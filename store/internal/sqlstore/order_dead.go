package sqlstore

import (
	"context"
	"database/sql"
	"slices"
	"time"

	"github.com/outboxkit/outbox/core"
)

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
