package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/broker"
	"github.com/outboxkit/outbox/broker/rabbitmq"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testbroker"
)

// amqpURL returns the shared broker's URL, or skips; it fails under
// OUTBOX_REQUIRE_DBS=1 when the broker does not answer.
func amqpURL(t testing.TB) string {
	t.Helper()
	u := testbroker.AMQPURL(t)
	conn, err := amqp.Dial(u)
	if err != nil {
		testbroker.SkipOrFail(t, "RabbitMQ at %s: %v", u, err)
	}
	_ = conn.Close()
	return u
}

// topology declares a topic exchange and a queue of their own, the queue
// bound for binding, and deletes them when the test ends.
func topology(t testing.TB, u, binding string) (exchange, queue string, ch *amqp.Channel) {
	t.Helper()
	conn, err := amqp.Dial(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err = conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	exchange = testbroker.UniqueName("outbox_x")
	queue = testbroker.UniqueName("outbox_q")
	if err := ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if binding != "" {
		if err := ch.QueueBind(queue, binding, exchange, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(queue, false, false, false)
		_ = ch.ExchangeDelete(exchange, false, false)
	})
	return exchange, queue, ch
}

func newPublisher(t testing.TB, cfg rabbitmq.Config) *rabbitmq.Publisher {
	t.Helper()
	p, err := rabbitmq.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func newEvent(t testing.TB, typ, aggID string) core.Event {
	t.Helper()
	env, err := core.NewEnvelope(core.EnvelopeSpec{
		Type: core.EventName(typ), AggregateType: core.AggregateName("Order"), AggregateID: aggID,
		TenantID: "t-1", Headers: map[string]string{"trace": "abc"}, JSON: []byte(`{"total":1}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	return core.Event{Envelope: env}
}

// queueIDs takes every message off queue and counts each message id.
func queueIDs(t testing.TB, ch *amqp.Channel, queue string) map[string]int {
	t.Helper()
	ids := make(map[string]int)
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return ids
		}
		ids[d.MessageId]++
	}
}

func TestNewValidates(t *testing.T) {
	for name, cfg := range map[string]rabbitmq.Config{
		"no url":           {},
		"bad url":          {URL: "http://x"},
		"negative timeout": {URL: "amqp://localhost/", DialTimeout: -1},
	} {
		if _, err := rabbitmq.New(cfg); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// TestInFlight: the publisher declares itself asynchronous, so that a
// dispatcher left at its default Workers runs broker.DefaultInFlight
// publishes at once.
func TestInFlight(t *testing.T) {
	p, err := rabbitmq.New(rabbitmq.Config{URL: "amqp://guest:guest@127.0.0.1:1/"}) // connects nothing
	if err != nil {
		t.Fatal(err)
	}
	var l core.Listener = p
	if a, ok := l.(core.AsyncListener); !ok || a.InFlight() != broker.DefaultInFlight {
		t.Errorf("AsyncListener %v; want InFlight %d", ok, broker.DefaultInFlight)
	}
}

func TestPublishMessage(t *testing.T) {
	t.Parallel()
	u := amqpURL(t)
	exchange, queue, ch := topology(t, u, "Order.*")
	p := newPublisher(t, rabbitmq.Config{URL: u, Exchange: exchange})
	ev := newEvent(t, "Order.Placed", "o-1")
	if err := p.Handle(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	d, ok, err := ch.Get(queue, true)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if d.RoutingKey != "Order.Order_Placed" || d.MessageId != ev.ID() || d.Type != "Order.Placed" ||
		string(d.Body) != `{"total":1}` || d.DeliveryMode != amqp.Persistent {
		t.Errorf("message: key %q id %q type %q body %q mode %d", d.RoutingKey, d.MessageId, d.Type, d.Body, d.DeliveryMode)
	}
	for k, want := range map[string]string{
		broker.HeaderEventID: ev.ID(), broker.HeaderAggregateID: "o-1", broker.HeaderTenantID: "t-1", "trace": "abc",
	} {
		if got, _ := d.Headers[k].(string); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
}

// A message no queue takes is returned; Handle says so permanently, so the
// event ends DEAD with the reason instead of DONE and lost. Routed and
// unroutable publishes in flight together each get their own outcome.
func TestUnroutableIsPermanent(t *testing.T) {
	t.Parallel()
	u := amqpURL(t)
	exchange, queue, ch := topology(t, u, "Order.Routed")
	p := newPublisher(t, rabbitmq.Config{URL: u, Exchange: exchange})
	const n = 200
	errs := make([]error, n)
	events := make([]core.Event, n)
	var wg sync.WaitGroup
	for i := range n {
		typ := "Routed"
		if i%2 == 1 {
			typ = "Lost"
		}
		events[i] = newEvent(t, typ, fmt.Sprint(i))
		wg.Go(func() { errs[i] = p.Handle(context.Background(), events[i]) })
	}
	wg.Wait()
	for i, err := range errs {
		var perm *core.PermanentError
		switch {
		case i%2 == 0 && err != nil:
			t.Errorf("routed event %d: %v", i, err)
		case i%2 == 1 && (!errors.As(err, &perm) || !errors.Is(err, rabbitmq.ErrNoRoute)):
			t.Errorf("unroutable event %d: %v, want a permanent ErrNoRoute", i, err)
		}
	}
	ids := queueIDs(t, ch, queue)
	if len(ids) != n/2 {
		t.Errorf("queue holds %d messages, want %d", len(ids), n/2)
	}
}

func TestUnroutableThroughOutboxEndsDead(t *testing.T) {
	t.Parallel()
	u := amqpURL(t)
	exchange, _, _ := topology(t, u, "")
	p := newPublisher(t, rabbitmq.Config{URL: u, Exchange: exchange})
	ob := testbroker.NewOutbox(t, p, testbroker.OutboxConfig{})
	ids := ob.Write(t, 1, 1, "Order", "OrderPlaced")
	st := ob.WaitSettled(t, 30*time.Second)
	if st.Dead != 1 {
		t.Fatalf("outbox %+v, want 1 DEAD", st)
	}
	ev, err := ob.Target.Store.Get(context.Background(), ob.Target.DB, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if ev.Attempts != 1 || !contains(ev.LastError, "unroutable") || !contains(ev.LastError, exchange) {
		t.Errorf("attempts %d, last_error %q", ev.Attempts, ev.LastError)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestOutboxToRabbitMQ(t *testing.T) {
	t.Parallel()
	u := amqpURL(t)
	exchange, queue, ch := topology(t, u, "#")
	p := newPublisher(t, rabbitmq.Config{URL: u, Exchange: exchange})
	ob := testbroker.NewOutbox(t, p, testbroker.OutboxConfig{Workers: 32})
	const n = 300
	ids := ob.Write(t, n, 10, "Order", "OrderPlaced")
	st := ob.WaitSettled(t, 60*time.Second)
	if st.Done != n || st.Dead != 0 {
		t.Fatalf("outbox %+v, want %d DONE", st, n)
	}
	got := queueIDs(t, ch, queue)
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("event %s queued %d times", id, got[id])
		}
	}
}

// The broker goes away (a proxy in front of it cuts every connection) with
// events pending: they are retried with backoff, reach the queue once the
// broker is back, and none is lost. A redelivery may queue an event twice
// (a confirm lost with the connection): the consumer's inbox absorbs it.
func TestBrokerDownRetriesNothingLost(t *testing.T) {
	t.Parallel()
	u := amqpURL(t)
	exchange, queue, ch := topology(t, u, "#")
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testbroker.NewProxy(t, parsed.Host)
	parsed.Host = proxy.Addr
	p := newPublisher(t, rabbitmq.Config{URL: parsed.String(), Exchange: exchange, DialTimeout: time.Second})
	ob := testbroker.NewOutbox(t, p, testbroker.OutboxConfig{MaxAttempts: 1000})

	first := ob.Write(t, 20, 5, "Order", "OrderPlaced")
	ob.WaitFor(t, 30*time.Second, "first events DONE", func(st core.Stats) bool { return st.Done == 20 })
	proxy.Down()
	down := ob.Write(t, 30, 5, "Order", "OrderPlaced")
	ob.WaitFor(t, 30*time.Second, "a failed publish retried", func(st core.Stats) bool { return st.Retry > 0 })
	proxy.Up(t)
	st := ob.WaitSettled(t, 60*time.Second)
	if st.Done != 50 || st.Dead != 0 {
		t.Fatalf("outbox %+v, want 50 DONE", st)
	}
	got := queueIDs(t, ch, queue)
	for _, id := range append(first, down...) {
		if got[id] < 1 {
			t.Errorf("event %s lost", id)
		}
	}
}

func TestClosed(t *testing.T) {
	p, err := rabbitmq.New(rabbitmq.Config{URL: "amqp://guest:guest@127.0.0.1:1/"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Handle(context.Background(), newEvent(t, "X", "")); err == nil {
		t.Error("publish to a closed port succeeded")
	}
	_ = p.Close()
	if err := p.Handle(context.Background(), newEvent(t, "X", "")); !errors.Is(err, core.ErrClosed) {
		t.Errorf("publish after Close: %v", err)
	}
}
