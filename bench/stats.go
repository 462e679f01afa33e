package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/store"
)

// opStats collects the durations and sizes of one kind of store call.
type opStats struct {
	mu    sync.Mutex
	durs  []time.Duration
	calls int
	rows  int
	fails int
	// windowed: durs holds only the durations since the soak's reporter
	// last took them (take), so that a run of millions of calls keeps no
	// growing record; String then reports counts only.
	windowed bool
}

func (s *opStats) add(d time.Duration, rows int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.durs = append(s.durs, d)
	s.calls++
	s.rows += rows
	if err != nil {
		s.fails++
	}
}

func (s *opStats) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.calls == 0 {
		return "none"
	}
	out := fmt.Sprintf("%d calls, %.1f rows/call", s.calls, float64(s.rows)/float64(s.calls))
	if !s.windowed {
		d := slices.Clone(s.durs)
		slices.Sort(d)
		out += fmt.Sprintf(", p50 %.2f ms, p99 %.2f ms", ms(percentile(d, 0.5)), ms(percentile(d, 0.99)))
	}
	if s.fails > 0 {
		out += fmt.Sprintf(", %d failed", s.fails)
	}
	return out
}

// take returns, sorted, the durations s collected since the last take, and
// forgets them (see windowed).
func (s *opStats) take() []time.Duration {
	s.mu.Lock()
	out := s.durs
	s.durs = make([]time.Duration, 0, len(out))
	s.mu.Unlock()
	slices.Sort(out)
	return out
}

// callStats is what the timed stores of one kind of run collect, over all
// its rounds.
type callStats struct {
	inserts, claims, done, marks opStats
	// onDone, when set before the timed store is made, is told of every
	// DONE batch call: its ids and when it started and returned.
	onDone func(ids []string, start, end time.Time)
}

// windowed makes every kind keep its durations only until the soak's
// reporter takes them.
func (cs *callStats) windowed() *callStats {
	for _, s := range []*opStats{&cs.inserts, &cs.claims, &cs.done, &cs.marks} {
		s.windowed = true
	}
	return cs
}

func (cs *callStats) String() string {
	out := "inserts: " + cs.inserts.String() + "; claims: " + cs.claims.String() + "; DONE batches: " + cs.done.String()
	cs.marks.mu.Lock()
	single := cs.marks.calls > 0
	cs.marks.mu.Unlock()
	if single {
		out += "; single MarkDone: " + cs.marks.String()
	}
	return out
}

// timedStore is the store under test with its claims and DONE writes timed,
// so that a run can say where its time went.
type timedStore struct {
	store.SchemaManager
	bm                           core.BatchMarker
	inserts, claims, done, marks *opStats
	onDone                       func(ids []string, start, end time.Time) // nil: not told
}

// doneCall times a DONE batch call that started at t.
func (s *timedStore) doneCall(ids []string, t time.Time, err error) {
	end := time.Now()
	s.done.add(end.Sub(t), len(ids), err)
	if s.onDone != nil {
		s.onDone(ids, t, end)
	}
}

// Unwrap lets the library find the wrapped store's other capabilities
// (core.OrderedStore, core.LeaseRenewer).
func (s *timedStore) Unwrap() core.Store { return s.SchemaManager }

// waiting, when not nil, is told the ids of the events each ordered write
// stored WAITING.
func newTimedStore(st store.SchemaManager, cs *callStats, waiting func(ids []string)) store.SchemaManager {
	ts := &timedStore{SchemaManager: st, inserts: &cs.inserts, claims: &cs.claims, done: &cs.done, marks: &cs.marks, onDone: cs.onDone}
	bm, ok := core.StoreAs[core.BatchMarker](st)
	if !ok {
		return ts
	}
	ts.bm = bm
	if os, ok := core.StoreAs[core.OrderedStore](st); ok && len(os.Ordering()) > 0 {
		tos := &timedOrderedStore{timedBatchStore{ts}, os, waiting}
		if nw, ok := os.(core.OrderedNoWaitMarker); ok {
			return &timedNoWaitStore{tos, nw}
		}
		return tos
	}
	return &timedBatchStore{ts}
}

// timedNoWaitStore adds the timed core.OrderedNoWaitMarker to a
// timedOrderedStore, so that the dispatcher writes its ordered DONE outcomes
// as it does without the wrapper: a call is timed as a DONE write of the
// ids it wrote, and those whose key rows were held are timed when the
// held-key writer's MarkDoneOrdered writes them.
type timedNoWaitStore struct {
	*timedOrderedStore
	nw core.OrderedNoWaitMarker
}

func (s *timedNoWaitStore) MarkDoneOrderedNoWait(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time) (int64, []core.Event, []string, error) {
	t := time.Now()
	n, promoted, held, err := s.nw.MarkDoneOrderedNoWait(ctx, db, owner, ids, now)
	written := ids
	if len(held) > 0 {
		written = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return slices.Contains(held, id) })
	}
	s.doneCall(written, t, err)
	return n, promoted, held, err
}

func (s *timedStore) Insert(ctx context.Context, db core.DBTX, envs []core.Envelope, opts core.InsertOptions) error {
	t := time.Now()
	err := s.SchemaManager.Insert(ctx, db, envs, opts)
	s.inserts.add(time.Since(t), len(envs), err)
	return err
}

func (s *timedStore) Claim(ctx context.Context, db core.DBTX, p core.ClaimParams) ([]core.Event, []core.RowError, error) {
	t := time.Now()
	evs, bad, err := s.SchemaManager.Claim(ctx, db, p)
	s.claims.add(time.Since(t), len(evs)+len(bad), err)
	return evs, bad, err
}

func (s *timedStore) MarkDone(ctx context.Context, db core.DBTX, owner, id string, now time.Time) (bool, error) {
	t := time.Now()
	ok, err := s.SchemaManager.MarkDone(ctx, db, owner, id, now)
	s.marks.add(time.Since(t), 1, err)
	return ok, err
}

// timedBatchStore adds the timed batch capability to a timedStore.
type timedBatchStore struct{ *timedStore }

func (s *timedBatchStore) MarkDoneBatch(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time) (int64, error) {
	t := time.Now()
	n, err := s.bm.MarkDoneBatch(ctx, db, owner, ids, now)
	s.doneCall(ids, t, err)
	return n, err
}

// DeleteDoneBatch times the store's core.DoneDeleter (every store here has
// it) as a DONE batch: it is what -delete-delivered writes instead.
func (s *timedBatchStore) DeleteDoneBatch(ctx context.Context, db core.DBTX, owner string, ids []string) (int64, error) {
	t := time.Now()
	dd, _ := core.StoreAs[core.DoneDeleter](s.SchemaManager)
	n, err := dd.DeleteDoneBatch(ctx, db, owner, ids)
	s.doneCall(ids, t, err)
	return n, err
}

// timedOrderedStore adds the timed ordered capability (core.OrderedStore)
// to a timedBatchStore: its inserts and DONE writes are timed as the
// unordered ones are.
type timedOrderedStore struct {
	timedBatchStore
	os      core.OrderedStore
	waiting func(ids []string) // nil: not told
}

func (s *timedOrderedStore) Ordering() core.Ordering { return s.os.Ordering() }

func (s *timedOrderedStore) InsertOrdered(ctx context.Context, db core.DBTX, envs []core.Envelope, opts core.InsertOptions) (core.InsertResult, error) {
	t := time.Now()
	res, err := s.os.InsertOrdered(ctx, db, envs, opts)
	s.inserts.add(time.Since(t), len(envs), err)
	if err == nil && s.waiting != nil && len(res.Waiting) > 0 {
		s.waiting(res.Waiting)
	}
	return res, err
}

func (s *timedOrderedStore) MarkDoneOrdered(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time) (int64, []core.Event, error) {
	t := time.Now()
	n, promoted, err := s.os.MarkDoneOrdered(ctx, db, owner, ids, now)
	s.doneCall(ids, t, err)
	return n, promoted, err
}

func (s *timedOrderedStore) MarkDeadOrdered(ctx context.Context, db core.DBTX, owner, id string, now time.Time, lastErr string) (bool, []core.Event, error) {
	return s.os.MarkDeadOrdered(ctx, db, owner, id, now, lastErr)
}

func (s *timedOrderedStore) BlockedKeys(ctx context.Context, db core.DBTX, f core.DeadFilter) ([]core.BlockedKey, error) {
	return s.os.BlockedKeys(ctx, db, f)
}

func (s *timedOrderedStore) SkipDead(ctx context.Context, db core.DBTX, ids []string, now time.Time) (int64, error) {
	return s.os.SkipDead(ctx, db, ids, now)
}
