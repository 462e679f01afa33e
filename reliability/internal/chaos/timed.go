package chaos

import (
	"context"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/store"
)

// DoneWrite is one DONE write of a batch of delivered events, as a timed
// store observes it: MarkDoneOrdered (Ordered) or MarkDoneBatch.
type DoneWrite struct {
	Ordered bool
	Events  int
	Took    time.Duration
	Err     error
}

// TimeDoneWrites returns st wrapped so that observe is called after each of
// its DONE batch writes, from the goroutine that made it. Through Unwrap the
// dispatcher and the poller find every other capability of st, as they
// would without the wrapper.
func TimeDoneWrites(st store.SchemaManager, observe func(DoneWrite)) store.SchemaManager {
	ts := &timedStore{SchemaManager: st, observe: observe}
	bm, ok := core.StoreAs[core.BatchMarker](st)
	if !ok {
		return ts
	}
	tb := &timedBatch{timedStore: ts, bm: bm}
	if ost, ok := core.StoreAs[core.OrderedStore](st); ok && len(ost.Ordering()) > 0 {
		return &timedOrdered{timedBatch: tb, OrderedStore: ost}
	}
	return tb
}

type timedStore struct {
	store.SchemaManager
	observe func(DoneWrite)
}

func (s *timedStore) Unwrap() core.Store { return s.SchemaManager }

type timedBatch struct {
	*timedStore
	bm core.BatchMarker
}

func (s *timedBatch) MarkDoneBatch(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time) (int64, error) {
	start := time.Now()
	n, err := s.bm.MarkDoneBatch(ctx, db, owner, ids, now)
	s.observe(DoneWrite{Events: len(ids), Took: time.Since(start), Err: err})
	return n, err
}

type timedOrdered struct {
	*timedBatch
	core.OrderedStore
}

func (s *timedOrdered) MarkDoneOrdered(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time) (int64, []core.Event, error) {
	start := time.Now()
	n, promoted, err := s.OrderedStore.MarkDoneOrdered(ctx, db, owner, ids, now)
	s.observe(DoneWrite{Ordered: true, Events: len(ids), Took: time.Since(start), Err: err})
	return n, promoted, err
}
