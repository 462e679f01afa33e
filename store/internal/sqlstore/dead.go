package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/outboxkit/outbox/core"
)

func (s *Store) deadWhere(f core.DeadFilter) (string, []any) {
	where := s.d.Dead
	var args []any
	if f.EventType != "" {
		where += " AND event_type = ?"
		args = append(args, f.EventType)
	}
	if f.AggregateType != "" {
		where += " AND aggregate_type = ?"
		args = append(args, f.AggregateType)
	}
	return where, args
}

// DefaultDeadLimit is the number of rows QueryDead returns when the filter
// sets no limit.
const DefaultDeadLimit = 100

// QueryDead implements core.DeadStore.
func (s *Store) QueryDead(ctx context.Context, db core.DBTX, f core.DeadFilter) ([]core.Event, error) {
	q, args := s.queryDead(f)
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, s.wrap("query dead events", err)
	}
	events, bad, err := scanEvents(rows)
	if err != nil {
		return nil, s.wrap("query dead events", err)
	}
	if len(bad) > 0 {
		return events, fmt.Errorf("query dead events: %w", errors.Join(rowErrors(bad)...))
	}
	return events, nil
}

// queryDead returns the QueryDead statement and its arguments.
func (s *Store) queryDead(f core.DeadFilter) (string, []any) {
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultDeadLimit
	}
	where, args := s.deadWhere(f)
	q := s.d.rebind("SELECT " + columns + " FROM " + s.qt + " WHERE " + where + " ORDER BY created_at, event_id LIMIT ?")
	return q, append(args, limit)
}

func rowErrors(bad []core.RowError) []error {
	errs := make([]error, len(bad))
	for i, b := range bad {
		errs[i] = b
	}
	return errs
}

// CountDead implements core.DeadStore.
func (s *Store) CountDead(ctx context.Context, db core.DBTX, f core.DeadFilter) (int64, error) {
	q, args := s.countDead(f)
	var n int64
	err := db.QueryRowContext(ctx, q, args...).Scan(&n)
	if err != nil {
		return 0, s.wrap("count dead events", err)
	}
	return n, nil
}

// countDead returns the CountDead statement and its arguments.
func (s *Store) countDead(f core.DeadFilter) (string, []any) {
	where, args := s.deadWhere(f)
	return s.d.rebind("SELECT COUNT(*) FROM " + s.qt + " WHERE " + where), args
}

var replaySet = " SET status = " + stNew + ", attempts = 0, last_error = NULL, done_at = NULL, available_at = ?, locked_by = NULL, locked_at = NULL"

// ReplayDead implements core.DeadStore.
func (s *Store) ReplayDead(ctx context.Context, db core.DBTX, ids []string, now time.Time) (int64, error) {
	var total int64
	for chunk := range slices.Chunk(ids, 500) {
		q, args := s.inList("UPDATE "+s.qt+replaySet+" WHERE "+s.d.Dead+" AND event_id IN (", chunk, s.ts(now))
		n, err := s.exec(ctx, db, q+")", args...)
		if err != nil {
			return total, s.wrap("replay dead events", err)
		}
		total += n
	}
	return total, nil
}

// ReplayDeadBatch implements core.DeadStore.
func (s *Store) ReplayDeadBatch(ctx context.Context, db core.DBTX, f core.DeadFilter, limit int, now time.Time) (int64, error) {
	if limit <= 0 {
		return 0, core.Invalid("replay batch size", "%d is not positive", limit)
	}
	q, args := s.replayDeadBatch(f, limit, now)
	n, err := s.exec(ctx, db, q, args...)
	return n, s.wrap("replay dead events", err)
}

// replayDeadBatch returns the ReplayDeadBatch statement (with '?' markers)
// and its arguments.
func (s *Store) replayDeadBatch(f core.DeadFilter, limit int, now time.Time) (string, []any) {
	where, args := s.deadWhere(f)
	var q string
	if s.d.LimitedWrites {
		q = "UPDATE " + s.qt + replaySet + " WHERE " + where + " ORDER BY created_at, event_id LIMIT ?"
	} else {
		q = "UPDATE " + s.qt + replaySet + " WHERE " +
			s.d.idsIn("SELECT event_id FROM "+s.qt+" WHERE "+where+" ORDER BY created_at, event_id LIMIT ?")
	}
	args = append([]any{s.ts(now)}, args...)
	return q, append(args, limit)
}
