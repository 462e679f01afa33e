package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/internal/testsupport/ordercheck"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/internal/testsupport/testnode"
)

// TestOrderedDelivery: two instances on separate pools write the same keys
// concurrently, each through its own hot path, while a listener fails every
// fifth first attempt. Every event is delivered, and per key the calls follow
// seq order: no call of event n+1 before event n's call finished DONE.
func TestOrderedDelivery(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		tg.Store = tg.Ordered
		check := ordercheck.New()
		var failed sync.Map
		var n atomic.Int64
		reg := core.NewRegistry()
		if err := reg.Register(orders, orderPlaced, core.ListenerFunc(func(ctx context.Context, ev core.Event) error {
			k := ev.AggregateType() + "/" + ev.AggregateID()
			check.Start(k, ev.Seq)
			var err error
			if n.Add(1)%5 == 0 {
				if _, again := failed.LoadOrStore(ev.ID(), true); !again {
					err = errors.New("first attempt fails")
				}
			}
			check.Finish(k, ev.Seq, err == nil)
			return err
		})); err != nil {
			t.Fatal(err)
		}
		nodes, keys, perKey := 2, 10, 10
		if tg.Name == "sqlite" {
			nodes = 1
		}
		var all []string
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range nodes {
			db := tg.DB
			if i > 0 {
				db = tg.Reopen(t)
			}
			node := startNode(t, tg, db, reg, testnode.Options{})
			wg.Go(func() {
				for j := range perKey {
					for k := range keys {
						e, err := core.NewEnvelope(core.EnvelopeSpec{Type: orderPlaced, AggregateType: orders,
							AggregateID: fmt.Sprintf("k%d", k), JSON: []byte(`{}`)})
						if err != nil {
							t.Error(err)
							return
						}
						if err := node.Write(context.Background(), e); err != nil {
							t.Errorf("node %d write %d: %v", i, j, err)
							return
						}
						mu.Lock()
						all = append(all, e.ID())
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		total := nodes * keys * perKey
		deadline := time.Now().Add(e2eDeadline)
		for {
			done := 0
			for _, d := range check.Done() {
				done += int(d)
			}
			if done == total {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d events delivered in order before the deadline", done, total)
			}
			time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
		}
		if v, first := check.Violations(); v > 0 {
			t.Fatalf("%d order violations: %v", v, first)
		}
		if len(all) != total {
			t.Fatalf("%d events written, want %d", len(all), total)
		}
	})
}

// TestOrderedDoneDoesNotLinger: an ordered event's DONE, which its key's
// next delivery waits for, is written at once, not after the batch linger:
// with a linger of an hour, three events of one key written in one
// transaction are still delivered one after the other.
func TestOrderedDoneDoesNotLinger(t *testing.T) {
	t.Parallel()
	tg := testdb.SQLite(t)
	tg.Store = tg.Ordered
	rec := testnode.NewDeliveryLog()
	reg := registry(t, func(_ context.Context, ev core.Event) error {
		rec.Record(ev.ID())
		return nil
	})
	node := startNode(t, tg, tg.DB, reg, testnode.Options{Dispatch: func(c *dispatch.Config) { c.DoneBatchLinger = time.Hour }})
	var envs []core.Envelope
	for i := range 3 {
		e, err := core.NewEnvelope(core.EnvelopeSpec{ID: fmt.Sprintf("k-%d", i+1), Type: orderPlaced, AggregateType: orders,
			AggregateID: "k", JSON: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, e)
	}
	write(t, node, envs...)
	waitCalls(t, tg, rec, "k-3", 1)
}
