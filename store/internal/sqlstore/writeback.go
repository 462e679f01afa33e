package sqlstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/outboxkit/outbox/core"
)

func (s *Store) mark(ctx context.Context, db core.DBTX, op, query string, args ...any) (bool, error) {
	var n int64
	err := s.retry(ctx, db, func() error {
		res, err := db.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return false, s.wrap(op, err)
	}
	return n > 0, nil
}

// MarkDone implements core.Store.
func (s *Store) MarkDone(ctx context.Context, db core.DBTX, owner, id string, now time.Time) (bool, error) {
	return s.mark(ctx, db, "mark done", s.markDone, s.ts(now), id, owner)
}

// batchChunk caps the ids of one MarkDoneBatch, DeleteDoneBatch or Release
// statement.
const batchChunk = 512

// MarkDoneBatch implements core.BatchMarker: one UPDATE per 512 ids, fenced
// like MarkDone, through the primary key (Dialect.PrimaryKeyHint): on a
// table of a few hundred rows MariaDB planned 64 ids as a scan of the whole
// primary key, locking every row it read.
func (s *Store) MarkDoneBatch(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time) (int64, error) {
	return s.leasedBatch(ctx, db, "mark done", "UPDATE "+s.qt+s.pkHint()+" SET status = "+stDone+", done_at = ?, locked_by = NULL, locked_at = NULL "+
		"WHERE locked_by = ? AND "+notTerminal+" AND event_id IN (", ids, s.ts(now), owner)
}

// DeleteDoneBatch implements core.DoneDeleter: one DELETE per 512 ids,
// fenced like MarkDone.
func (s *Store) DeleteDoneBatch(ctx context.Context, db core.DBTX, owner string, ids []string) (int64, error) {
	return s.leasedBatch(ctx, db, "delete delivered", "DELETE FROM "+s.qt+
		" WHERE locked_by = ? AND "+notTerminal+" AND event_id IN (", ids, owner)
}

// leasedBatch runs prefix, completed by a list of ids and ")", for each chunk
// of up to batchChunk ids, with the head arguments before the ids, and returns
// how many rows the statements changed.
//
// With Dialect.PadIDLists the id list is padded to a power of two by
// repeating its last id, so that batches of any length share ten statement
// texts: drivers that cache prepared statements by text (pgx keeps 512 per
// connection) reuse them instead of preparing, and evicting, one per batch
// length.
func (s *Store) leasedBatch(ctx context.Context, db core.DBTX, op, prefix string, ids []string, head ...any) (int64, error) {
	var total int64
	for chunk := range slices.Chunk(ids, batchChunk) {
		q, args := s.inList(prefix, s.padIDs(chunk), head...)
		n, err := s.exec(ctx, db, q+")", args...)
		if err != nil {
			return total, s.wrap(op, err)
		}
		total += n
	}
	return total, nil
}

// padIDs returns ids padded to a power of two by repeating its last id,
// under Dialect.PadIDLists (see leasedBatch), else ids itself.
func (s *Store) padIDs(ids []string) []string {
	n := nextPow2(len(ids))
	if !s.d.PadIDLists || n <= len(ids) {
		return ids
	}
	padded := make([]string, n)
	copy(padded, ids)
	for i := len(ids); i < n; i++ {
		padded[i] = ids[len(ids)-1]
	}
	return padded
}

// nextPow2 returns the least power of two >= n (n >= 1).
func nextPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// MarkRetry implements core.Store.
func (s *Store) MarkRetry(ctx context.Context, db core.DBTX, owner, id string, next time.Time, lastErr string) (bool, error) {
	return s.mark(ctx, db, "mark retry", s.markRetry, s.ts(next), core.TruncateError(lastErr), id, owner)
}

// MarkDead implements core.Store.
func (s *Store) MarkDead(ctx context.Context, db core.DBTX, owner, id string, now time.Time, lastErr string) (bool, error) {
	return s.mark(ctx, db, "mark dead", s.markDead, s.ts(now), core.TruncateError(lastErr), id, owner)
}

// Get implements core.Store.
func (s *Store) Get(ctx context.Context, db core.DBTX, id string) (core.Event, error) {
	rows, err := db.QueryContext(ctx, s.get, id)
	if err != nil {
		return core.Event{}, s.wrap("get event", err)
	}
	events, bad, err := scanEvents(rows)
	switch {
	case err != nil:
		return core.Event{}, s.wrap("get event", err)
	case len(bad) > 0:
		return core.Event{}, bad[0]
	case len(events) == 0:
		return core.Event{}, fmt.Errorf("get event %s: %w", id, notFound{})
	}
	return events[0], nil
}

// Release implements core.Store: one UPDATE per 512 ids, fenced like
// MarkDone.
func (s *Store) Release(ctx context.Context, db core.DBTX, owner string, ids []string) (int64, error) {
	return s.leasedBatch(ctx, db, "release events", "UPDATE "+s.qt+" SET locked_by = NULL, locked_at = NULL "+
		"WHERE locked_by = ? AND "+notTerminal+" AND event_id IN (", ids, owner)
}
