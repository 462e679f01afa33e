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
	// Held: a MarkDoneOrdered of a store that also passes held key rows
	// (core.OrderedNoWaitMarker), which the dispatcher calls only for the
	// events whose key rows were held; its other ordered writes are
	// MarkDoneOrderedNoWait.
	Held   bool
	Events int
	Took   time.Duration
	Err    error
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
		to := &timedOrdered{timedBatch: tb, OrderedStore: ost}
		if nw, ok := ost.(core.OrderedNoWaitMarker); ok {
			to.held = true
			return &timedNoWait{timedOrdered: to, nw: nw}
		}
		return to
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
	held bool // the store has MarkDoneOrderedNoWait
}

func (s *timedOrdered) MarkDoneOrdered(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time) (int64, []core.Event, error) {
	start := time.Now()
	n, promoted, err := s.OrderedStore.MarkDoneOrdered(ctx, db, owner, ids, now)
	s.observe(DoneWrite{Ordered: true, Held: s.held, Events: len(ids), Took: time.Since(start), Err: err})
	return n, promoted, err
}

type timedNoWait struct {
	*timedOrdered
	nw core.OrderedNoWaitMarker
}

func (s *timedNoWait) MarkDoneOrderedNoWait(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time) (int64, []core.Event, []string, error) {
	start := time.Now()
	n, promoted, held, err := s.nw.MarkDoneOrderedNoWait(ctx, db, owner, ids, now)
	s.observe(DoneWrite{Ordered: true, Events: len(ids), Took: time.Since(start), Err: err})
	return n, promoted, held, err
}
