package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/broker"
	outboxjs "github.com/outboxkit/outbox/broker/jetstream"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testbroker"
)

// connect returns a connection to url, closed when the test ends.
func connect(t testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		testbroker.SkipOrFail(t, "NATS at %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// newStream creates a stream of its own that takes the subjects prefix.>
// and returns its name and prefix; it is deleted when the test ends.
func newStream(t testing.TB, js jetstream.JetStream, replicas int) (name, prefix string) {
	t.Helper()
	name = testbroker.UniqueName("outbox")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.FileStorage,
		Replicas: replicas, Duplicates: 2 * time.Minute,
	})
	if err != nil {
		t.Fatalf("create stream %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			t.Logf("delete stream %s: %v", name, err)
		}
	})
	return name, name
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

func newPublisher(t testing.TB, cfg outboxjs.Config) *outboxjs.Publisher {
	t.Helper()
	p, err := outboxjs.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// streamIDs reads every message of the stream and returns the count of each
// Nats-Msg-Id.
func streamIDs(t testing.TB, js jetstream.JetStream, stream string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := make(map[string]int)
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get message %d: %v", seq, err)
		}
		ids[m.Header.Get(jetstream.MsgIDHeader)]++
	}
	return ids
}

func TestNewValidates(t *testing.T) {
	nc := &nats.Conn{}
	for name, cfg := range map[string]outboxjs.Config{
		"no conn":          {},
		"negative timeout": {Conn: nc, AckTimeout: -time.Second},
		"negative pending": {Conn: nc, MaxPending: -1},
		"dotted prefix":    {Conn: nc, SubjectPrefix: "a.b"},
	} {
		if _, err := outboxjs.New(cfg); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// TestInFlight: the publisher declares itself asynchronous, so that a
// dispatcher left at its default Workers runs broker.DefaultInFlight
// publishes at once, fewer when MaxPending leaves less room.
func TestInFlight(t *testing.T) {
	nc := &nats.Conn{} // New connects nothing
	for pending, want := range map[int]int{0: broker.DefaultInFlight, 100: 99, 2: 1} {
		var l core.Listener = newPublisher(t, outboxjs.Config{Conn: nc, MaxPending: pending})
		a, ok := l.(core.AsyncListener)
		if !ok {
			t.Fatal("the publisher is not a core.AsyncListener")
		}
		if got := a.InFlight(); got != want {
			t.Errorf("MaxPending %d: InFlight %d, want %d", pending, got, want)
		}
	}
}

func TestPublishMessage(t *testing.T) {
	t.Parallel()
	nc, js := connect(t, testbroker.NATSURL(t))
	stream, prefix := newStream(t, js, 1)
	p := newPublisher(t, outboxjs.Config{Conn: nc, SubjectPrefix: prefix, Stream: stream})
	ev := newEvent(t, "Order.Placed", "o-1")
	if err := p.Handle(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(context.Background(), prefix+".>")
	if err != nil {
		t.Fatal(err)
	}
	if want := prefix + ".Order.Order_Placed"; m.Subject != want {
		t.Errorf("subject %q, want %q", m.Subject, want)
	}
	if string(m.Data) != `{"total":1}` {
		t.Errorf("data %q", m.Data)
	}
	for k, want := range map[string]string{
		jetstream.MsgIDHeader:      ev.ID(),
		broker.HeaderEventID:       ev.ID(),
		broker.HeaderEventType:     "Order.Placed",
		broker.HeaderAggregateType: "Order",
		broker.HeaderAggregateID:   "o-1",
		broker.HeaderTenantID:      "t-1",
		"trace":                    "abc",
	} {
		if got := m.Header.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
}

func TestPublishSubjectOverride(t *testing.T) {
	t.Parallel()
	nc, js := connect(t, testbroker.NATSURL(t))
	stream, prefix := newStream(t, js, 1)
	p := newPublisher(t, outboxjs.Config{Conn: nc, Subject: func(ev core.Event) string {
		return prefix + ".by-key." + broker.Token(ev.AggregateID())
	}})
	if err := p.Handle(context.Background(), newEvent(t, "OrderPlaced", "o.42")); err != nil {
		t.Fatal(err)
	}
	s, _ := js.Stream(context.Background(), stream)
	if _, err := s.GetLastMsgForSubject(context.Background(), prefix+".by-key.o_42"); err != nil {
		t.Fatalf("no message on the overridden subject: %v", err)
	}
	empty := newPublisher(t, outboxjs.Config{Conn: nc, Subject: func(core.Event) string { return "" }})
	var perm *core.PermanentError
	if err := empty.Handle(context.Background(), newEvent(t, "OrderPlaced", "o-1")); !errors.As(err, &perm) {
		t.Errorf("empty subject: %v, want a permanent error", err)
	}
}

// The event id is the stream's dedupe key: a second publish of one event
// (a redelivery by the outbox) is acknowledged and not stored again.
func TestPublishDuplicateStoredOnce(t *testing.T) {
	t.Parallel()
	nc, js := connect(t, testbroker.NATSURL(t))
	stream, prefix := newStream(t, js, 1)
	p := newPublisher(t, outboxjs.Config{Conn: nc, SubjectPrefix: prefix})
	ev := newEvent(t, "OrderPlaced", "o-1")
	for i := range 3 {
		if err := p.Handle(context.Background(), ev); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	if ids := streamIDs(t, js, stream); len(ids) != 1 || ids[ev.ID()] != 1 {
		t.Errorf("stream holds %v, want one message %s", ids, ev.ID())
	}
}

// A subject no stream takes is not acknowledged: an error the dispatcher
// retries, not a success and not a permanent failure.
func TestPublishNoStreamIsRetried(t *testing.T) {
	t.Parallel()
	nc, _ := connect(t, testbroker.NATSURL(t))
	p := newPublisher(t, outboxjs.Config{Conn: nc, SubjectPrefix: testbroker.UniqueName("nostream"), AckTimeout: 2 * time.Second})
	err := p.Handle(context.Background(), newEvent(t, "OrderPlaced", "o-1"))
	var perm *core.PermanentError
	if err == nil || errors.As(err, &perm) {
		t.Fatalf("publish without a stream: %v, want a retryable error", err)
	}
}

// TestHandleBatch: each event of a batch gets Handle's outcome: stored and
// acknowledged (a duplicate id too, stored once), a permanent error for an
// empty subject, a retryable one for a subject no stream takes; and a
// cancelled context fails what is still waiting for its acknowledgement.
func TestHandleBatch(t *testing.T) {
	t.Parallel()
	nc, js := connect(t, testbroker.NATSURL(t))
	stream, prefix := newStream(t, js, 1)
	nowhere := testbroker.UniqueName("nostream")
	p := newPublisher(t, outboxjs.Config{Conn: nc, AckTimeout: 2 * time.Second, Subject: func(ev core.Event) string {
		switch ev.Type() {
		case "Empty":
			return ""
		case "Nowhere":
			return nowhere + ".x"
		}
		return prefix + "." + ev.Type()
	}})
	if p.MaxBatch() < 2 {
		t.Fatalf("MaxBatch() = %d: the publisher takes no batches", p.MaxBatch())
	}
	a, b := newEvent(t, "Placed", "o-1"), newEvent(t, "Placed", "o-2")
	evs := []core.Event{a, newEvent(t, "Empty", "o-3"), b, newEvent(t, "Nowhere", "o-4"), a}
	errs := p.HandleBatch(context.Background(), evs)
	if len(errs) != len(evs) {
		t.Fatalf("%d results for %d events", len(errs), len(evs))
	}
	var perm *core.PermanentError
	for i, want := range []string{"stored", "permanent", "stored", "retryable", "stored"} {
		err := errs[i]
		switch want {
		case "stored":
			if err != nil {
				t.Errorf("event %d: %v, want it stored", i, err)
			}
		case "permanent":
			if !errors.As(err, &perm) {
				t.Errorf("event %d (empty subject): %v, want a permanent error", i, err)
			}
		case "retryable":
			if err == nil || errors.As(err, &perm) {
				t.Errorf("event %d (no stream): %v, want a retryable error", i, err)
			}
		}
	}
	if ids := streamIDs(t, js, stream); len(ids) != 2 || ids[a.ID()] != 1 || ids[b.ID()] != 1 {
		t.Errorf("stream holds %v, want %s and %s once each", ids, a.ID(), b.ID())
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i, err := range p.HandleBatch(ctx, []core.Event{newEvent(t, "Nowhere", "o-5"), newEvent(t, "Nowhere", "o-6")}) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled batch, event %d: %v", i, err)
		}
	}
}

func TestPublishCancelled(t *testing.T) {
	t.Parallel()
	nc, _ := connect(t, testbroker.NATSURL(t))
	p := newPublisher(t, outboxjs.Config{Conn: nc, SubjectPrefix: testbroker.UniqueName("nostream")})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Handle(ctx, newEvent(t, "OrderPlaced", "o-1")); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled publish: %v", err)
	}
}

// A backlog written through the outbox reaches the stream once per event,
// with every event DONE.
func TestOutboxToJetStream(t *testing.T) {
	t.Parallel()
	nc, js := connect(t, testbroker.NATSURL(t))
	stream, prefix := newStream(t, js, 1)
	p := newPublisher(t, outboxjs.Config{Conn: nc, SubjectPrefix: prefix})
	ob := testbroker.NewOutbox(t, p, testbroker.OutboxConfig{Workers: 32})
	const n = 300
	ids := ob.Write(t, n, 10, "Order", "OrderPlaced")
	st := ob.WaitSettled(t, 60*time.Second)
	if st.Done != n || st.Dead != 0 {
		t.Fatalf("outbox %+v, want %d DONE", st, n)
	}
	got := streamIDs(t, js, stream)
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("event %s stored %d times", id, got[id])
		}
	}
	if len(got) != n {
		t.Errorf("stream holds %d ids, want %d", len(got), n)
	}
}

// TestOrderedKeysReachTheStreamInOrder: with ordering on for the aggregate
// type, each key's events reach the stream in the order they were written,
// however many workers publish at once, while keys interleave freely.
func TestOrderedKeysReachTheStreamInOrder(t *testing.T) {
	t.Parallel()
	nc, js := connect(t, testbroker.NATSURL(t))
	stream, prefix := newStream(t, js, 1)
	p := newPublisher(t, outboxjs.Config{Conn: nc, SubjectPrefix: prefix})
	ob := testbroker.NewOutbox(t, p, testbroker.OutboxConfig{Workers: 32, Ordered: true})
	const n, keys = 400, 8
	ob.Write(t, n, keys, "Order", "OrderPlaced") // headers carry the write order: seq = 0, 1, 2, ...
	st := ob.WaitSettled(t, 60*time.Second)
	if st.Done != n || st.Dead != 0 || st.Waiting != 0 {
		t.Fatalf("outbox %+v, want %d DONE", st, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != n {
		t.Fatalf("stream holds %d messages, want %d", info.State.Msgs, n)
	}
	last := map[string]int{} // key -> write order of its last message in the stream
	interleaved := false
	prevKey := ""
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get message %d: %v", seq, err)
		}
		key := m.Header.Get(broker.HeaderAggregateID)
		var order int
		if _, err := fmt.Sscan(m.Header.Get("seq"), &order); err != nil {
			t.Fatalf("message %d has no write order: %v", seq, err)
		}
		if prev, ok := last[key]; ok && order <= prev {
			t.Errorf("key %s: event written %d-th reached the stream after the one written %d-th", key, order, prev)
		}
		last[key] = order
		if prevKey != "" && key != prevKey {
			interleaved = true
		}
		prevKey = key
	}
	if len(last) != keys || !interleaved {
		t.Errorf("%d keys, interleaved %v: want %d keys flowing side by side", len(last), interleaved, keys)
	}
}

// The server goes down with events pending and comes back: the events are
// retried with backoff meanwhile and each is stored exactly once.
func TestServerDownRetriesNothingLost(t *testing.T) {
	t.Parallel()
	node := testbroker.StartNATS(t)
	nc, js := connect(t, node.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	stream, prefix := newStream(t, js, 1)
	p := newPublisher(t, outboxjs.Config{Conn: nc, SubjectPrefix: prefix, AckTimeout: time.Second})
	ob := testbroker.NewOutbox(t, p, testbroker.OutboxConfig{MaxAttempts: 1000})

	first := ob.Write(t, 20, 5, "Order", "OrderPlaced")
	ob.WaitFor(t, 30*time.Second, "first events DONE", func(st core.Stats) bool { return st.Done == 20 })

	node.Stop()
	down := ob.Write(t, 30, 5, "Order", "OrderPlaced")
	ob.WaitFor(t, 30*time.Second, "a failed publish retried", func(st core.Stats) bool { return st.Retry > 0 })
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	if err := node.WaitReady(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	st := ob.WaitSettled(t, 60*time.Second)
	if st.Done != 50 || st.Dead != 0 {
		t.Fatalf("outbox %+v, want 50 DONE", st)
	}
	got := streamIDs(t, js, stream)
	for _, id := range append(first, down...) {
		if got[id] != 1 {
			t.Errorf("event %s stored %d times", id, got[id])
		}
	}
	if len(got) != 50 {
		t.Errorf("stream holds %d ids, want 50", len(got))
	}
}

func Example() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	pub, err := outboxjs.New(outboxjs.Config{Conn: nc}) // subjects outbox.<aggregate>.<event>
	if err != nil {
		fmt.Println(err)
		return
	}
	reg := core.NewRegistry()
	// Every event without a listener of its own goes to JetStream; a stream
	// must take the subjects "outbox.>".
	if err := reg.RegisterFallback(pub); err != nil {
		fmt.Println(err)
		return
	}
	// outbox.New(outbox.Config{DB: db, Store: st, Registry: reg,
	// 	Dispatch: dispatch.Config{Workers: 128}})
}

// With MaxPending publishes awaiting their ack, the next one waits for room
// for up to AckTimeout, longer than the client's own 200ms stall wait, and
// is then published. A plain subscriber stands in for the stream so that
// the test decides when each ack comes: the first two after 500ms.
func TestPublishWaitsForRoom(t *testing.T) {
	t.Parallel()
	nc, _ := connect(t, testbroker.NATSURL(t))
	prefix := testbroker.UniqueName("room")
	held := make(chan struct{})
	seq := 0
	sub, err := nc.Subscribe(prefix+".>", func(m *nats.Msg) {
		seq++ // callbacks of one subscription run one at a time
		ack := []byte(fmt.Sprintf(`{"stream":%q,"seq":%d}`, prefix, seq))
		switch {
		case seq <= 2:
			// The delay under test, not a synchronisation.
			time.AfterFunc(500*time.Millisecond, func() { _ = m.Respond(ack) })
			if seq == 2 {
				close(held)
			}
		default:
			_ = m.Respond(ack)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	p := newPublisher(t, outboxjs.Config{Conn: nc, SubjectPrefix: prefix, MaxPending: 2, AckTimeout: 10 * time.Second})
	errs := make(chan error, 3)
	publish := func(key string) { errs <- p.Handle(context.Background(), newEvent(t, "OrderPlaced", key)) }
	go publish("o-1")
	go publish("o-2")
	<-held
	go publish("o-3")
	for range 3 {
		if err := <-errs; err != nil {
			t.Errorf("publish: %v", err)
		}
	}
}

// Concurrent calls take turns to publish (one sends the messages of those
// that queued meanwhile): each still returns after its own message's ack,
// and every message is stored once.
func TestPublishConcurrentCalls(t *testing.T) {
	t.Parallel()
	nc, js := connect(t, testbroker.NATSURL(t))
	stream, prefix := newStream(t, js, 1)
	p := newPublisher(t, outboxjs.Config{Conn: nc, SubjectPrefix: prefix})
	const callers, each = 64, 20
	evs := make([]core.Event, callers*each)
	for i := range evs {
		evs[i] = newEvent(t, "OrderPlaced", fmt.Sprintf("o-%d", i%callers))
	}
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for i := range each {
				if err := p.Handle(context.Background(), evs[c*each+i]); err != nil {
					t.Errorf("caller %d, event %d: %v", c, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	ids := streamIDs(t, js, stream)
	for _, ev := range evs {
		if ids[ev.ID()] != 1 {
			t.Errorf("event %s stored %d times, want once", ev.ID(), ids[ev.ID()])
		}
	}
	if len(ids) != len(evs) {
		t.Errorf("stream holds %d messages, want %d", len(ids), len(evs))
	}
}
