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
