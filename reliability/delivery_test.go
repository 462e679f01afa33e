package reliability

import (
	"context"
	"database/sql"
	"sync"
	"testing"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/internal/testsupport/testnode"
	"github.com/outboxkit/outbox/poller"
)

// delivery is one of the outbox's deliveries (outbox.Config.Delivery) a
// scenario runs in, as the subtest of that name.
type delivery struct {
	name     string // "claim" or "position"
	position bool   // outbox.DeliveryPosition
}

// deliveries are both deliveries, the claim path first.
var deliveries = []delivery{{name: "claim"}, {name: "position", position: true}}

// forEachDialectDelivery runs fn as a parallel subtest <dialect>/<delivery>
// on a fresh table of each of dialects, in each delivery.
func forEachDialectDelivery(t *testing.T, dialects []string, fn func(t *testing.T, tg testdb.Target, dv delivery)) {
	t.Helper()
	for _, name := range dialects {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, dv := range deliveries {
				t.Run(dv.name, func(t *testing.T) {
					t.Parallel()
					fn(t, testdb.Open(t, name), dv)
				})
			}
		})
	}
}

// delivered is the status of a delivered event's row in dv: DONE in the
// claim path; in position delivery the row stays STREAM (nothing is written
// after its INSERT), unless it failed once and the claim path delivered it.
func (dv delivery) delivered() core.Status {
	if dv.position {
		return core.StatusStream
	}
	return core.StatusDone
}

// node is one in-process outbox instance of a scenario: testnode's
// Dispatcher, Poller and Writer in the claim path, and in position delivery
// an outbox.Outbox (SingleNode), whose reader and store wrapper only it
// wires, exposed through the same fields.
type node struct {
	*testnode.Node
	ob     *outbox.Outbox // position delivery only
	closed sync.Once
}

// startDeliveryNode starts a node in dv on st and db, with the suite's
// backoff and poll interval (startNode), and closes it when the test ends.
// o.Dispatch and o.Poller apply in both deliveries; o.Hook only in the
// claim path, since outbox.Outbox wires its writer hook itself.
func startDeliveryNode(t *testing.T, dv delivery, st core.Store, db *sql.DB, reg *core.Registry, o testnode.Options) *node {
	t.Helper()
	if !dv.position {
		return &node{Node: startNode(t, st, db, reg, o)}
	}
	if o.Hook != nil {
		t.Fatal("testnode.Options.Hook is not wired in position delivery")
	}
	m := &testnode.Metrics{}
	cfg := outbox.Config{DB: db, Store: st, Registry: reg, Delivery: outbox.DeliveryPosition,
		Dispatch: dispatch.Config{Retry: suiteRetry(), Metrics: m},
		Poller:   poller.Config{Interval: suiteInterval, Metrics: m},
	}
	if o.Poller != nil {
		o.Poller(&cfg.Poller)
		// One lease, as testnode gives the dispatcher the poller's.
		cfg.Dispatch.LeaseTimeout = cfg.Poller.LeaseTimeout
	}
	if o.Dispatch != nil {
		o.Dispatch(&cfg.Dispatch)
	}
	ob, err := outbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := &node{ob: ob, Node: &testnode.Node{Dispatcher: ob.Dispatcher(), Poller: ob.Poller(), Writer: ob.Writer(),
		TxManager: ob.TxManager(), Metrics: m}}
	t.Cleanup(func() { n.Close(t) })
	return n
}

// Close stops the node: in position delivery the Outbox, whose reader stops
// reading before the dispatcher drains and then saves its position. Every
// outcome of a delivery is written when it returns. Only the first call
// does anything.
func (n *node) Close(t testing.TB) {
	t.Helper()
	if n.ob == nil {
		n.Node.Close(t)
		return
	}
	n.closed.Do(func() {
		if err := n.ob.Close(context.Background()); err != nil {
			t.Errorf("close outbox: %v", err)
		}
	})
}

// deliveryWriter returns a Writer of tg's table as dv writes events, without
// a hot path: the store's own in the claim path, a WriterOnly Outbox's in
// position delivery (STREAM rows with positions).
func deliveryWriter(t *testing.T, dv delivery, tg testdb.Target) *core.Writer {
	t.Helper()
	if !dv.position {
		w, err := core.NewWriter(core.WriterConfig{Store: tg.Store})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	wo, err := outbox.New(outbox.Config{DB: tg.DB, Store: tg.Store, Mode: outbox.WriterOnly, Delivery: outbox.DeliveryPosition})
	if err != nil {
		t.Fatal(err)
	}
	return wo.Writer()
}
