package dispatch_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/internal/testsupport/testnode"
)

// countingStore is the store under a wrapper: it counts the DONE writes the
// dispatcher makes and passes them to the real store.
type countingStore struct {
	core.Store
	markDone, markDoneBatch, deleteDoneBatch atomic.Int64
}

func (s *countingStore) MarkDone(ctx context.Context, db core.DBTX, owner, id string, now time.Time) (bool, error) {
	s.markDone.Add(1)
	return s.Store.MarkDone(ctx, db, owner, id, now)
}

func (s *countingStore) MarkDoneBatch(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time) (int64, error) {
	s.markDoneBatch.Add(1)
	bm, _ := core.StoreAs[core.BatchMarker](s.Store)
	return bm.MarkDoneBatch(ctx, db, owner, ids, now)
}

func (s *countingStore) DeleteDoneBatch(ctx context.Context, db core.DBTX, owner string, ids []string) (int64, error) {
	s.deleteDoneBatch.Add(1)
	dd, _ := core.StoreAs[core.DoneDeleter](s.Store)
	return dd.DeleteDoneBatch(ctx, db, owner, ids)
}

// instrumented is the usual instrumentation wrapper: it embeds core.Store,
// which hides the optional capabilities of what it wraps, and gives them
// back through Unwrap.
type instrumented struct {
	core.Store
	claims atomic.Int64
}

func (w *instrumented) Claim(ctx context.Context, db core.DBTX, p core.ClaimParams) ([]core.Event, []core.RowError, error) {
	w.claims.Add(1)
	return w.Store.Claim(ctx, db, p)
}

func (w *instrumented) Unwrap() core.Store { return w.Store }

// TestWrappedStoreKeepsCapabilities: behind a wrapper that implements
// Unwrap, the dispatcher still writes DONE outcomes in batches (never one
// MarkDone per event) and DeleteDelivered still works.
func TestWrappedStoreKeepsCapabilities(t *testing.T) {
	t.Parallel()
	for _, deleteDelivered := range []bool{false, true} {
		name := map[bool]string{false: "MarkDoneBatch", true: "DeleteDelivered"}[deleteDelivered]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tg := testdb.SQLite(t)
			inner := &countingStore{Store: tg.Store}
			outer := &instrumented{Store: inner}
			if _, ok := outer.Store.(core.BatchMarker); !ok {
				t.Fatal("test set-up: the inner store has no MarkDoneBatch")
			}
			rec := testnode.NewDeliveryLog()
			const n = 30
			envs, ids := newEnvs(t, n)
			node := testnode.Start(t, outer, tg.DB, registry(t, func(_ context.Context, ev core.Event) error {
				rec.Record(ev.ID())
				return nil
			}), testnode.Defaults{Interval: 20 * time.Millisecond}, testnode.Options{Dispatch: func(c *dispatch.Config) {
				c.DeleteDelivered = deleteDelivered
				c.HotQueueSize = 10 // the rest go through the poller, and its claims through the wrapper
			}})
			write(t, node, envs...)
			rec.WaitFor(t, e2eDeadline, "every event", func(c map[string]int) bool { return len(c) == n })
			node.Close(t)

			if got := inner.markDone.Load(); got != 0 {
				t.Errorf("MarkDone called %d times through the wrapper, want 0 (DONE batching lost)", got)
			}
			batches := inner.markDoneBatch.Load()
			if deleteDelivered {
				batches = inner.deleteDoneBatch.Load()
			}
			if batches == 0 {
				t.Errorf("no batch write reached the inner store")
			}
			if outer.claims.Load() == 0 {
				t.Errorf("the poller's claims bypassed the wrapper")
			}
			counts := testnode.StatusCounts(t, tg.DB, tg.Table)
			switch {
			case deleteDelivered && len(counts) != 0:
				t.Errorf("rows by status %v, want none: delivered rows are deleted", counts)
			case !deleteDelivered && counts[core.StatusDone] != n:
				t.Errorf("rows by status %v, want %d DONE", counts, n)
			}
			for _, id := range ids {
				if c := rec.Count(id); c != 1 {
					t.Errorf("%s delivered %d times", id, c)
				}
			}
		})
	}
}
