package sqlstore

import (
	"context"
	"slices"
	"time"

	"github.com/outboxkit/outbox/core"
)

// RenewLeases implements core.LeaseRenewer: one UPDATE per 512 ids, fenced
// like MarkDone, sets locked_at = now on the rows owner still leases. Only
// when it changed fewer rows than there are distinct ids does it read back
// which ones owner still leases (one SELECT per 512 ids), to report the
// others as lost; the common case, nothing lost, costs one statement.
//
// A store that claims by (owner, lease time) (Dialect.ClaimUpdateThenSelect)
// takes now from the same lease clock as its claims, so that a renewal never
// stamps a row with the lease time of a concurrent claim by the same owner,
// whose read-back would then return it.
func (s *Store) RenewLeases(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time) ([]string, error) {
	uniq := slices.Clone(ids)
	slices.Sort(uniq)
	uniq = slices.Compact(uniq)
	if len(uniq) == 0 {
		return nil, nil
	}
	if s.d.Claim == ClaimUpdateThenSelect {
		now = s.leases.next(now)
	}
	n, err := s.leasedBatch(ctx, db, "renew leases", "UPDATE "+s.qt+" SET locked_at = ? "+
		"WHERE locked_by = ? AND "+notTerminal+" AND event_id IN (", uniq, s.ts(now), owner)
	if err != nil {
		return nil, err
	}
	if n >= int64(len(uniq)) {
		return nil, nil
	}
	// Some rows did not change: find the ones still leased. A row that did
	// not change although still leased (MySQL counts changed rows only, and
	// a lease stamped with this very time is unchanged) is found here too.
	held := make(map[string]bool, len(uniq))
	for chunk := range slices.Chunk(uniq, batchChunk) {
		q, args := s.inList("SELECT event_id FROM "+s.qt+" WHERE locked_by = ? AND "+notTerminal+" AND event_id IN (", chunk, owner)
		if err := s.heldIDs(ctx, db, s.d.rebind(q+")"), args, held); err != nil {
			return nil, s.wrap("renew leases", err)
		}
	}
	var lost []string
	for _, id := range uniq {
		if !held[id] {
			lost = append(lost, id)
		}
	}
	return lost, nil
}

// heldIDs adds the event ids q selects to held.
func (s *Store) heldIDs(ctx context.Context, db core.DBTX, q string, args []any, held map[string]bool) error {
	return s.retry(ctx, db, func() error {
		rows, err := db.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			held[id] = true
		}
		return rows.Err()
	})
}
