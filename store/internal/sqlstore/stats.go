package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/outboxkit/outbox/core"
)

// Stats implements core.Inspector. Each count uses the condition the
// dialect's indexes serve (Pending, Dead, Done).
func (s *Store) Stats(ctx context.Context, db core.DBTX) (core.Stats, error) {
	var st core.Stats
	for _, c := range []struct {
		dst   *int64
		where string
	}{
		{&st.New, s.d.Pending + " AND status = " + stNew},
		{&st.Retry, s.d.Pending + " AND status = " + stRetry},
		{&st.Leased, s.d.Pending + " AND locked_by IS NOT NULL"},
		{&st.Dead, s.d.Dead},
		{&st.Done, s.d.Done},
	} {
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+s.qt+" WHERE "+c.where).Scan(c.dst); err != nil {
			return st, s.wrap("count events", err)
		}
	}
	// The claim's own order, so the pending index serves it.
	var oldest nullTime
	err := db.QueryRowContext(ctx, "SELECT created_at FROM "+s.qt+" WHERE "+s.d.Pending+
		" ORDER BY created_at, event_id LIMIT 1").Scan(&oldest)
	if err == nil {
		err = oldest.Err
	}
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return st, s.wrap("find oldest pending event", err)
	}
	st.OldestPending = oldest.Time
	if err := s.orderedStats(ctx, db, &st); err != nil {
		return st, s.wrap("stats", err)
	}
	if err := s.positionStats(ctx, db, &st); err != nil {
		return st, s.wrap("stats", err)
	}
	return st, nil
}

// positionStats fills the position figures of st when the table has a
// persisted position. A table without the position table (before
// migration 0003), or whose reader never ran, has none.
func (s *Store) positionStats(ctx context.Context, db core.DBTX, st *core.Stats) error {
	if s.d.Position == nil {
		return nil
	}
	var floor int64
	pt := s.table.PosTable().Quoted(s.d.Quote)
	if err := db.QueryRowContext(ctx, s.d.rebind("SELECT floor_pos FROM "+pt+" WHERE relay = ?"), positionRelay).Scan(&floor); err != nil {
		return nil // no position table, or no reader yet
	}
	var maxPos sql.NullInt64
	if err := db.QueryRowContext(ctx, "SELECT MAX(pos) FROM "+s.qt+" WHERE pos IS NOT NULL").Scan(&maxPos); err != nil {
		return err
	}
	st.PositionLag = max(maxPos.Int64-floor, 0)
	var oldest nullTime
	if err := db.QueryRowContext(ctx, s.d.rebind("SELECT COUNT(*), MIN(created_at) FROM "+s.qt+" WHERE pos > ? AND status = "+stStream),
		floor).Scan(&st.Stream, &oldest); err != nil {
		return err
	}
	if oldest.Err != nil {
		return oldest.Err
	}
	st.OldestStream = oldest.Time
	return nil
}

// CountPurgeable implements core.Inspector.
func (s *Store) CountPurgeable(ctx context.Context, db core.DBTX, p core.PurgeParams) (done, dead int64, err error) {
	for _, c := range []struct {
		dst    *int64
		where  string
		before any
		skip   bool
	}{
		{&done, s.d.Done, s.ts(p.DoneBefore), p.DoneBefore.IsZero()},
		{&dead, s.d.Dead, s.ts(p.DeadBefore), p.DeadBefore.IsZero()},
	} {
		if c.skip {
			continue
		}
		cond, args := s.terminalBefore(c.where, c.before)
		q := s.d.rebind("SELECT COUNT(*) FROM " + s.qt + " WHERE " + cond)
		if err := db.QueryRowContext(ctx, q, args...).Scan(c.dst); err != nil {
			return 0, 0, s.wrap("count purgeable events", err)
		}
	}
	return done, dead, nil
}

// CountByType implements core.Inspector: one grouped count over the pending
// rows and one over the DEAD rows, each through the index of its condition.
func (s *Store) CountByType(ctx context.Context, db core.DBTX) ([]core.TypeCount, error) {
	type key struct{ agg, typ string }
	counts := map[key]*core.TypeCount{}
	for _, where := range []string{s.d.Pending, s.d.Dead} {
		err := func() error {
			rows, err := db.QueryContext(ctx, "SELECT aggregate_type, event_type, status, COUNT(*) FROM "+s.qt+
				" WHERE "+where+" GROUP BY aggregate_type, event_type, status")
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var (
					k      key
					status int
					n      int64
				)
				if err := rows.Scan(&k.agg, &k.typ, &status, &n); err != nil {
					return err
				}
				c := counts[k]
				if c == nil {
					c = &core.TypeCount{AggregateType: k.agg, EventType: k.typ}
					counts[k] = c
				}
				switch core.Status(status) {
				case core.StatusNew:
					c.New += n
				case core.StatusRetry:
					c.Retry += n
				case core.StatusDead:
					c.Dead += n
				}
			}
			return rows.Err()
		}()
		if err != nil {
			return nil, s.wrap("count events by type", err)
		}
	}
	out := make([]core.TypeCount, 0, len(counts))
	for _, c := range counts {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b core.TypeCount) int {
		return cmp.Or(strings.Compare(a.AggregateType, b.AggregateType), strings.Compare(a.EventType, b.EventType))
	})
	return out, nil
}

var _ core.Inspector = (*Store)(nil)

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
