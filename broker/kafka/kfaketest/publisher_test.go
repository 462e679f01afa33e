package kfaketest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/broker"
	"github.com/outboxkit/outbox/broker/kafka"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testbroker"
)

// cluster starts a kfake cluster of 3 brokers with topics of 4 partitions
// each, replicated 3 times, and returns a producing client on it.
func cluster(t testing.TB, topics ...string) (*kfake.Cluster, *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.DefaultNumPartitions(4), kfake.SeedTopics(4, topics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return c, cl
}

// consume reads n records of topic from the start.
func consume(t testing.TB, c *kfake.Cluster, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records: %v", len(out), n, err)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func newEvent(t testing.TB, typ, aggID string, n int) core.Event {
	t.Helper()
	env, err := core.NewEnvelope(core.EnvelopeSpec{
		Type: core.EventName(typ), AggregateType: core.AggregateName("Order"), AggregateID: aggID,
		TenantID: "t-1", Headers: map[string]string{"seq": fmt.Sprint(n)}, JSON: []byte(fmt.Sprintf(`{"n":%d}`, n)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return core.Event{Envelope: env}
}

func TestNewValidates(t *testing.T) {
	_, acksAll := cluster(t)
	leaderOnly, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	if err != nil {
		t.Fatal(err)
	}
	defer leaderOnly.Close()
	for name, cfg := range map[string]kafka.Config{
		"no client":    {},
		"acks=1":       {Client: leaderOnly},
		"dotted topic": {Client: acksAll, TopicPrefix: "a.b"},
	} {
		if _, err := kafka.New(cfg); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// TestInFlight: the publisher declares itself asynchronous, so that a
// dispatcher left at its default Workers runs broker.DefaultInFlight
// produces at once.
func TestInFlight(t *testing.T) {
	_, cl := cluster(t)
	p, err := kafka.New(kafka.Config{Client: cl})
	if err != nil {
		t.Fatal(err)
	}
	var l core.Listener = p
	if a, ok := l.(core.AsyncListener); !ok || a.InFlight() != broker.DefaultInFlight {
		t.Errorf("AsyncListener %v; want InFlight %d", ok, broker.DefaultInFlight)
	}
}

func TestPublishRecord(t *testing.T) {
	t.Parallel()
	const topic = "outbox.Order.OrderPlaced"
	c, cl := cluster(t, topic)
	p, err := kafka.New(kafka.Config{Client: cl})
	if err != nil {
		t.Fatal(err)
	}
	ev := newEvent(t, "OrderPlaced", "o-1", 1)
	if err := p.Handle(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	r := consume(t, c, topic, 1)[0]
	// Kafka timestamps keep milliseconds.
	if string(r.Key) != "o-1" || string(r.Value) != `{"n":1}` || !r.Timestamp.Equal(ev.OccurredAt().Truncate(time.Millisecond)) {
		t.Errorf("record key %q value %q timestamp %v", r.Key, r.Value, r.Timestamp)
	}
	for k, want := range map[string]string{
		broker.HeaderEventID: ev.ID(), broker.HeaderEventType: "OrderPlaced", broker.HeaderTenantID: "t-1", "seq": "1",
	} {
		if got := header(r, k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
}

// The aggregate id is the record key: every event of one key lands in one
// partition, in the order it was produced.
func TestKeyKeepsOnePartitionInOrder(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	c, cl := cluster(t, topic)
	p, err := kafka.New(kafka.Config{Client: cl, Topic: func(core.Event) string { return topic }})
	if err != nil {
		t.Fatal(err)
	}
	const keys, perKey = 8, 25
	var wg sync.WaitGroup
	for k := range keys {
		wg.Go(func() {
			for i := range perKey {
				if err := p.Handle(context.Background(), newEvent(t, "OrderPlaced", fmt.Sprintf("key-%d", k), i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	partition := map[string]int32{}
	next := map[string]int{}
	for _, r := range consume(t, c, topic, keys*perKey) {
		key := string(r.Key)
		if p, ok := partition[key]; ok && p != r.Partition {
			t.Errorf("key %s in partitions %d and %d", key, p, r.Partition)
		}
		partition[key] = r.Partition
		if seq := header(r, "seq"); seq != fmt.Sprint(next[key]) {
			t.Errorf("key %s: record %s, want %d", key, seq, next[key])
		}
		next[key]++
	}
	if len(partition) != keys {
		t.Errorf("%d keys consumed, want %d", len(partition), keys)
	}
}

func TestPermanentFailures(t *testing.T) {
	t.Parallel()
	_, cl := cluster(t, "t")
	empty, err := kafka.New(kafka.Config{Client: cl, Topic: func(core.Event) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	var perm *core.PermanentError
	if err := empty.Handle(context.Background(), newEvent(t, "X", "k", 0)); !errors.As(err, &perm) {
		t.Errorf("empty topic: %v, want permanent", err)
	}
	huge, err := kgo.NewClient(kgo.SeedBrokers(cl.OptValue(kgo.SeedBrokers).([]string)...), kgo.ProducerBatchMaxBytes(1024))
	if err != nil {
		t.Fatal(err)
	}
	defer huge.Close()
	p, err := kafka.New(kafka.Config{Client: huge, Topic: func(core.Event) string { return "t" }})
	if err != nil {
		t.Fatal(err)
	}
	env, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("X"), Bytes: make([]byte, 4096)})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Handle(context.Background(), core.Event{Envelope: env}); !errors.As(err, &perm) {
		t.Errorf("record over the batch limit: %v, want permanent", err)
	}
}

// TestHandleBatch: each event of a batch gets Handle's outcome: produced
// and acknowledged, a permanent error for an empty topic or a record over
// the client's batch limit; and a cancelled context produces nothing.
func TestHandleBatch(t *testing.T) {
	t.Parallel()
	const topic = "batch"
	c, _ := cluster(t, topic)
	small, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerBatchMaxBytes(1024), kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	p, err := kafka.New(kafka.Config{Client: small, Topic: func(ev core.Event) string {
		if ev.Type() == "Empty" {
			return ""
		}
		return topic
	}})
	if err != nil {
		t.Fatal(err)
	}
	if p.MaxBatch() < 2 {
		t.Fatalf("MaxBatch() = %d: the publisher takes no batches", p.MaxBatch())
	}
	huge, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("Huge"), Bytes: make([]byte, 4096)})
	if err != nil {
		t.Fatal(err)
	}
	evs := []core.Event{newEvent(t, "Placed", "k-1", 0), newEvent(t, "Empty", "k-2", 1), {Envelope: huge}, newEvent(t, "Placed", "k-3", 2)}
	errs := p.HandleBatch(context.Background(), evs)
	if len(errs) != len(evs) {
		t.Fatalf("%d results for %d events", len(errs), len(evs))
	}
	var perm *core.PermanentError
	for i, want := range []string{"produced", "permanent", "permanent", "produced"} {
		if got := errors.As(errs[i], &perm); (want == "permanent") != got || (want == "produced" && errs[i] != nil) {
			t.Errorf("event %d: %v, want %s", i, errs[i], want)
		}
	}
	got := map[string]bool{}
	for _, r := range consume(t, c, topic, 2) {
		got[header(r, broker.HeaderEventID)] = true
	}
	if !got[evs[0].ID()] || !got[evs[3].ID()] || len(got) != 2 {
		t.Errorf("topic holds %v, want %s and %s", got, evs[0].ID(), evs[3].ID())
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i, err := range p.HandleBatch(ctx, []core.Event{newEvent(t, "Placed", "k-4", 3), newEvent(t, "Placed", "k-5", 4)}) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled batch, event %d: %v", i, err)
		}
	}
}

// A backlog written through the outbox reaches the topics with every event
// DONE and each event id once.
func TestOutboxToKafka(t *testing.T) {
	t.Parallel()
	const topic = "outbox.Order.OrderPlaced"
	c, cl := cluster(t, topic)
	p, err := kafka.New(kafka.Config{Client: cl})
	if err != nil {
		t.Fatal(err)
	}
	ob := testbroker.NewOutbox(t, p, testbroker.OutboxConfig{Workers: 32})
	const n = 300
	ids := ob.Write(t, n, 10, "Order", "OrderPlaced")
	st := ob.WaitSettled(t, 60*time.Second)
	if st.Done != n || st.Dead != 0 {
		t.Fatalf("outbox %+v, want %d DONE", st, n)
	}
	got := map[string]int{}
	for _, r := range consume(t, c, topic, n) {
		got[header(r, broker.HeaderEventID)]++
	}
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("event %s produced %d times", id, got[id])
		}
	}
}

// Brokers that cannot be reached fail the delivery with an error the
// dispatcher retries, never a success and never a permanent failure.
func TestBrokersUnreachableIsRetried(t *testing.T) {
	t.Parallel()
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p, err := kafka.New(kafka.Config{Client: cl, AckTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	err = p.Handle(context.Background(), newEvent(t, "OrderPlaced", "o-1", 0))
	var perm *core.PermanentError
	if err == nil || errors.As(err, &perm) {
		t.Fatalf("produce to unreachable brokers: %v, want a retryable error", err)
	}
}
