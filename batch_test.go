package outbox_test

import (
	"context"
	"sync"
	"testing"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
)

// batching is flaky as a core.BatchListener: each event of a batch gets
// flaky's outcome. It counts the events it was handed in batches and the
// Handle calls, which a dispatcher without interceptors never makes.
type batching struct {
	flaky
	mu      sync.Mutex
	batched int
	largest int
	singles int
}

func (b *batching) Handle(ctx context.Context, ev core.Event) error {
	b.mu.Lock()
	b.singles++
	b.mu.Unlock()
	return b.listen(ctx, ev)
}

func (b *batching) MaxBatch() int { return 64 }

func (b *batching) HandleBatch(ctx context.Context, evs []core.Event) []error {
	b.mu.Lock()
	b.batched += len(evs)
	b.largest = max(b.largest, len(evs))
	b.mu.Unlock()
	errs := make([]error, len(evs))
	for i, ev := range evs {
		errs[i] = b.listen(ctx, ev)
	}
	return errs
}

// TestBatchListenerDelivery: on every database and in both deliveries, a
// core.BatchListener gets every event through HandleBatch, once each
// (written through the hot path or not); an event that fails in its batch
// is retried alone in its row and delivered on its second attempt, and
// those that succeeded beside it are not delivered again.
func TestBatchListenerDelivery(t *testing.T) {
	for _, dv := range []outbox.Delivery{outbox.DeliveryClaim, outbox.DeliveryPosition} {
		t.Run(dv.String(), func(t *testing.T) {
			testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
				var b batching
				reg := core.NewRegistry()
				if err := reg.Register(orders, orderPlaced, &b); err != nil {
					t.Fatal(err)
				}
				ob := start(t, fast(outbox.Config{DB: tg.DB, Store: tg.Store, Registry: reg, Delivery: dv}))
				hot := write(t, ob, 30, "hot")
				plain := writePlain(t, tg, ob, 200, "plain")
				fail := write(t, ob, 3, "fail")
				all := append(append(append([]string{}, hot...), plain...), fail...)
				waitSeen(t, &b.seen, all...)
				waitStatus(t, tg, core.StatusDone, fail...)
				ctx := context.Background()
				for _, id := range fail {
					if ev, err := tg.Store.Get(ctx, tg.DB, id); err != nil || ev.Attempts != 1 {
						t.Fatalf("%s: %+v, %v: want one failed attempt", id, ev, err)
					}
				}
				if err := ob.Close(ctx); err != nil {
					t.Fatal(err)
				}
				b.seen.mu.Lock()
				for id, n := range b.seen.ids {
					if n != 1 {
						t.Errorf("%s delivered %d times", id, n)
					}
				}
				b.seen.mu.Unlock()
				b.mu.Lock()
				defer b.mu.Unlock()
				// Every attempt went through HandleBatch: the deliveries, and
				// the failed first attempts.
				if want := len(all) + len(fail); b.batched != want || b.singles != 0 {
					t.Errorf("%d events handed in batches, %d Handle calls; want %d and 0", b.batched, b.singles, want)
				}
				t.Logf("largest batch: %d events", b.largest)
			})
		})
	}
}

var _ core.BatchListener = (*batching)(nil)
