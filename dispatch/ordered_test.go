package dispatch_test

import (
	"context"
	"database/sql"
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

// TestOrderedDonePassesHeldKey: while a writer of key A holds A's row, the
// DONE of A's head waits for it on the held-key writer, and the DONE
// outcomes of other keys go on: B's events are delivered one after the other
// before A's writer commits; A's next event follows its commit.
func TestOrderedDonePassesHeldKey(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		node, rec, tx := heldKeyNode(t, tg)
		write(t, node, orderEnv(t, "B-1", "B"), orderEnv(t, "B-2", "B"), orderEnv(t, "B-3", "B"))
		waitCalls(t, tg, rec, "B-3", 1)
		if c := rec.Count("A-2"); c != 0 {
			t.Fatalf("A-2 delivered %d times before its writer committed", c)
		}
		if ev := getEvent(t, tg, "A-1"); ev.Status == core.StatusDone {
			t.Fatal("A-1 DONE while its key's writer held the key row")
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		waitCalls(t, tg, rec, "A-2", 1)
	})
}

// TestOrderedDoneHeldAtClose: Close waits for the held-key writer: a DONE
// that waits for a writer of its key is written before Close returns, and
// the key's next event, which that DONE promotes, is delivered or left for
// another instance, not lost or left leased.
func TestOrderedDoneHeldAtClose(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		node, _, tx := heldKeyNode(t, tg)
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			node.Close(t)
		}()
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-closed:
		case <-time.After(e2eDeadline):
			t.Fatal("Close did not return after the writer of A-2 committed")
		}
		if ev := getEvent(t, tg, "A-1"); ev.Status != core.StatusDone {
			t.Fatalf("A-1 after Close: %v, want DONE", ev.Status)
		}
		// delivered if A-1's DONE landed before Close stopped the
		// intake, else released for another instance.
		if ev := getEvent(t, tg, "A-2"); ev.Status != core.StatusDone && (ev.Status != core.StatusNew || ev.LockedBy != "") {
			t.Fatalf("A-2 after Close: %v leased by %q, want DONE, or NEW and not leased", ev.Status, ev.LockedBy)
		}
	})
}

// heldKeyNode starts a node on tg's ordered store, whose listener records
// each delivery, has it deliver A-1, the head of key A, and, while A-1's
// listener still runs, opens tx, a writer of A-2 that holds A's key row:
// A-1's DONE meets the held row. The node's write-backs are not cut short
// before the test's deadline (a DONE that waits for A's writer is not
// given up for another try). It skips on SQLite, whose one writer holds the
// whole database.
func heldKeyNode(t *testing.T, tg testdb.Target) (node *testnode.Node, rec *testnode.DeliveryLog, tx *sql.Tx) {
	t.Helper()
	if tg.Name == "sqlite" {
		t.Skip("SQLite's one writer holds the whole database: there is no key row to pass")
	}
	t.Parallel()
	tg.Store = tg.Ordered
	rec = testnode.NewDeliveryLog()
	releaseA1 := make(chan struct{})
	reg := registry(t, func(ctx context.Context, ev core.Event) error {
		if ev.ID() == "A-1" {
			select {
			case <-releaseA1:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		rec.Record(ev.ID())
		return nil
	})
	node = startNode(t, tg, tg.DB, reg, testnode.Options{Dispatch: func(c *dispatch.Config) { c.StoreTimeout = 2 * e2eDeadline }})
	write(t, node, orderEnv(t, "A-1", "A"))
	tx = testdb.HoldKey(t, tg, orderEnv(t, "A-2", "A"))
	close(releaseA1)
	waitCalls(t, tg, rec, "A-1", 1)
	return node, rec, tx
}

// orderEnv returns an OrderPlaced event of key key with id.
func orderEnv(t *testing.T, id, key string) core.Envelope {
	t.Helper()
	e, err := core.NewEnvelope(core.EnvelopeSpec{ID: id, Type: orderPlaced, AggregateType: orders, AggregateID: key, JSON: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	return e
}
