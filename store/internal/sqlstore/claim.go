package sqlstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outboxkit/outbox/core"
)

func checkClaim(p core.ClaimParams) error {
	switch {
	case p.Owner == "":
		return core.Invalid("claim owner", "is empty")
	case p.Limit <= 0:
		return core.Invalid("claim limit", "%d is not positive", p.Limit)
	case p.LeaseTimeout <= 0:
		return core.Invalid("claim lease timeout", "%s is not positive", p.LeaseTimeout)
	case p.SkipRecent < 0:
		return core.Invalid("claim skip-recent", "%s is negative", p.SkipRecent)
	}
	return nil
}

// Claim implements core.Store with the dialect's claim strategy.
func (s *Store) Claim(ctx context.Context, db core.DBTX, p core.ClaimParams) (events []core.Event, bad []core.RowError, err error) {
	if err := checkClaim(p); err != nil {
		return nil, nil, err
	}
	now := p.Now.UTC().Truncate(time.Microsecond)
	if p.Now.IsZero() {
		now = time.Now().UTC().Truncate(time.Microsecond)
	}
	stmts, candidateArgs := s.claimStatements(p, now)
	err = s.retry(ctx, db, func() error {
		var err error
		events, bad, err = s.claimRows(ctx, db, stmts, p.Owner, now, candidateArgs, p.Limit)
		return err
	})
	if err != nil {
		return nil, nil, s.wrap("claim events", err)
	}
	return events, bad, nil
}

// claimFunc is one claim strategy: it leases up to limit rows for owner at
// now with its statement of stmts, whose candidate arguments are cand, and
// returns them in delivery order.
type claimFunc func(ctx context.Context, db core.DBTX, stmts claimStmts, owner string, now time.Time, cand []any, limit int) ([]core.Event, []core.RowError, error)

// claimStmts prepares the claim statements and picks the strategy of
// s.d.Claim.
func (s *Store) claimStmts() {
	d := s.d
	pendingRows := d.Pending + " AND available_at <= ? AND created_at <= ? AND (locked_by IS NULL OR locked_at < ?)"
	order := " ORDER BY created_at, event_id"
	hint := ""
	if d.ClaimIndexHint != "" {
		hint = " " + RenderDDL(d.ClaimIndexHint, s.table, d.Quote)
	}
	lock := ""
	if d.ClaimLock != "" {
		lock = " " + d.ClaimLock
	}
	for i, where := range []string{pendingRows, d.Pending + " AND created_at >= ?" + strings.TrimPrefix(pendingRows, d.Pending)} {
		candidates := "FROM " + s.qt + hint + " WHERE " + where + order + " LIMIT ?" + lock
		s.claims[i] = claimStmts{
			sel: d.rebind("SELECT " + columns + " " + candidates),
			ret: d.rebind("UPDATE " + s.qt + " SET locked_by = ?, locked_at = ? WHERE " +
				d.idsIn("SELECT event_id "+candidates) + " RETURNING " + columns),
			upd: d.rebind("UPDATE " + s.qt + hint + " SET locked_by = ?, locked_at = ? WHERE " + where + order + " LIMIT ?"),
		}
	}
	// Sorted in Go: the database would sort them too, as they are found by
	// lease, not in delivery order.
	s.claimReadBack = d.rebind("SELECT " + columns + " FROM " + s.qt + " WHERE locked_by = ? AND locked_at = ?")
	switch d.Claim {
	case ClaimReturning:
		s.claimRows = s.claimReturning
	case ClaimUpdateThenSelect:
		s.claimRows = s.claimUpdateThenSelect
	case ClaimSelectForUpdate:
		s.claimRows = s.claimSelectForUpdate
	default:
		panic(fmt.Sprintf("sqlstore: dialect %s: unknown claim strategy %v", d.Name, d.Claim))
	}
}

// claimStmts are the statements of one claim shape; which of them a store
// runs depends on its ClaimStrategy.
type claimStmts struct {
	sel string // ClaimSelectForUpdate: the locking candidate SELECT
	ret string // ClaimReturning
	upd string // ClaimUpdateThenSelect
}

// claimStatements returns the statements of a claim with p and their
// candidate arguments: the pending-rows condition (From first, when set)
// and the LIMIT.
func (s *Store) claimStatements(p core.ClaimParams, now time.Time) (claimStmts, []any) {
	args := []any{s.ts(now), s.ts(now.Add(-p.SkipRecent)), s.ts(now.Add(-p.LeaseTimeout)), p.Limit}
	if p.From.IsZero() {
		return s.claims[0], args
	}
	return s.claims[1], append([]any{s.ts(p.From)}, args...)
}

func (s *Store) claimReturning(ctx context.Context, db core.DBTX, stmts claimStmts, owner string, now time.Time, cand []any, limit int) ([]core.Event, []core.RowError, error) {
	rows, err := db.QueryContext(ctx, stmts.ret, append([]any{owner, s.ts(now)}, cand...)...)
	if err != nil {
		return nil, nil, err
	}
	events, bad, err := scanEventsN(rows, limit)
	if err != nil {
		return nil, nil, err
	}
	// RETURNING gives no order guarantee.
	slices.SortFunc(events, compareEvents)
	return events, bad, nil
}

func (s *Store) claimUpdateThenSelect(ctx context.Context, db core.DBTX, stmts claimStmts, owner string, now time.Time, cand []any, limit int) ([]core.Event, []core.RowError, error) {
	lease := s.ts(s.leases.next(now))
	res, err := db.ExecContext(ctx, stmts.upd, append([]any{owner, lease}, cand...)...)
	if err != nil {
		return nil, nil, err
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return nil, nil, nil
	}
	n, _ := res.RowsAffected()
	rows, err := db.QueryContext(ctx, s.claimReadBack, owner, lease)
	if err != nil {
		return nil, nil, err
	}
	events, bad, err := scanEventsN(rows, min(int(n), limit))
	if err != nil {
		return nil, nil, err
	}
	slices.SortFunc(events, compareEvents)
	return events, bad, nil
}

// leaseClock hands out the lease times of a ClaimUpdateThenSelect store. The
// claim reads its rows back by (owner, lease time), so two claims, or a claim
// and a leased insert, by one owner must never share a lease time, even when
// the caller's clock stands still (a fake clock) or repeats a microsecond.
// A time at or up to a second behind the last one is moved just past it; a
// clock that went further back is taken as it is, so that a lease never
// starts far in the future.
type leaseClock struct {
	mu   sync.Mutex
	last time.Time
}

func (c *leaseClock) next(t time.Time) time.Time {
	t = t.UTC().Truncate(time.Microsecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !t.After(c.last) && c.last.Sub(t) < time.Second {
		t = c.last.Add(time.Microsecond)
	}
	c.last = t
	return t
}

func (s *Store) claimSelectForUpdate(ctx context.Context, db core.DBTX, stmts claimStmts, owner string, now time.Time, cand []any, limit int) (events []core.Event, bad []core.RowError, err error) {
	err = inTx(ctx, db, func(tx core.DBTX) error {
		rows, err := tx.QueryContext(ctx, stmts.sel, cand...)
		if err != nil {
			return err
		}
		events, bad, err = scanEventsN(rows, limit)
		if err != nil || len(events)+len(bad) == 0 {
			return err
		}
		ids := make([]string, 0, len(events)+len(bad))
		for _, ev := range events {
			ids = append(ids, ev.ID())
		}
		for _, b := range bad {
			ids = append(ids, b.ID)
		}
		q, args := s.inList("UPDATE "+s.qt+" SET locked_by = ?, locked_at = ? WHERE event_id IN (", ids, owner, s.ts(now))
		_, err = tx.ExecContext(ctx, q+")", args...)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	for i := range events {
		events[i].LockedBy, events[i].LockedAt = owner, now
	}
	return events, bad, nil
}

func compareEvents(a, b core.Event) int {
	if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
		return c
	}
	return strings.Compare(a.ID(), b.ID())
}
