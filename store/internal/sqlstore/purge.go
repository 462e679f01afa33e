package sqlstore

import (
	"context"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
)

// Purge implements core.Purger.
func (s *Store) Purge(ctx context.Context, db core.DBTX, p core.PurgeParams) (int64, error) {
	if p.Limit <= 0 {
		return 0, core.Invalid("purge limit", "%d is not positive", p.Limit)
	}
	q, args := s.purge(p)
	if q == "" {
		return 0, nil
	}
	n, err := s.exec(ctx, db, q, args...)
	return n, s.wrap("purge events", err)
}

// purge returns the Purge statement (with '?' markers, as exec takes it) and
// its arguments, or "" when p selects nothing.
func (s *Store) purge(p core.PurgeParams) (string, []any) {
	var conds []string
	var args []any
	var upper time.Time
	for _, c := range []struct {
		where  string
		before time.Time
	}{{s.d.Done, p.DoneBefore}, {s.d.Dead, p.DeadBefore}} {
		if c.before.IsZero() {
			continue
		}
		cond, a := s.terminalBefore(c.where, s.ts(c.before))
		conds = append(conds, "("+cond+")")
		args = append(args, a...)
		if c.before.After(upper) {
			upper = c.before
		}
	}
	if len(conds) == 0 {
		return "", nil
	}
	where := strings.Join(conds, " OR ")
	order := " ORDER BY done_at"
	if s.d.TerminalByCreated {
		// Each condition is a range of the index in created_at order; a
		// sort would read every purgeable row.
		order = ""
	} else {
		// The leading done_at range lets the done_at index bound the scan.
		where = "done_at < ? AND (" + where + ")"
		args = append([]any{s.ts(upper)}, args...)
	}
	var q string
	if s.d.LimitedWrites {
		q = "DELETE FROM " + s.qt + " WHERE " + where + order + " LIMIT ?"
	} else {
		q = "DELETE FROM " + s.qt + " WHERE " +
			s.d.idsIn("SELECT event_id FROM "+s.qt+" WHERE "+where+order+" LIMIT ?")
	}
	return q, append(args, p.Limit)
}

// terminalBefore is the condition on terminal rows that where selects (the
// Done or Dead condition) and that became terminal before the cutoff, with
// its arguments.
func (s *Store) terminalBefore(where string, cutoff any) (string, []any) {
	if s.d.TerminalByCreated {
		return where + " AND created_at < ? AND done_at < ?", []any{cutoff, cutoff}
	}
	return where + " AND done_at < ?", []any{cutoff}
}

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
