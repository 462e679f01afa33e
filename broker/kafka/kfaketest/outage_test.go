package kfaketest_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/broker"
	"github.com/outboxkit/outbox/broker/kafka"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testbroker"
)

// The whole cluster goes down with events pending and comes back on the same
// ports with the data it had stored: meanwhile every delivery fails and is
// retried with backoff, none is marked DONE without an acknowledgement, and
// once the brokers are back every event reaches the topic. A record whose
// acknowledgement was lost with the connection may be produced twice (at
// least once); the consumer's inbox absorbs that.
func TestClusterDownRetriesNothingLost(t *testing.T) {
	t.Parallel()
	const topic = "outbox.Order.OrderPlaced"
	opts := []kfake.Opt{kfake.NumBrokers(3), kfake.SeedTopics(4, topic), kfake.DataDir(t.TempDir())}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	addrs := c.ListenAddrs()
	ports := make([]int, len(addrs))
	for i, a := range addrs {
		_, port, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		if ports[i], err = strconv.Atoi(port); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	p, err := kafka.New(kafka.Config{Client: cl, AckTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ob := testbroker.NewOutbox(t, p, testbroker.OutboxConfig{MaxAttempts: 1000})

	first := ob.Write(t, 20, 5, "Order", "OrderPlaced")
	ob.WaitFor(t, 30*time.Second, "first events DONE", func(st core.Stats) bool { return st.Done == 20 })

	c.Close()
	down := ob.Write(t, 30, 5, "Order", "OrderPlaced")
	st := ob.WaitFor(t, 30*time.Second, "a failed produce retried", func(st core.Stats) bool { return st.Retry > 0 })
	if st.Done != 20 || st.Dead != 0 {
		t.Fatalf("with the cluster down: %+v, want 20 DONE and none DEAD", st)
	}

	c, err = kfake.NewCluster(append(opts, kfake.Ports(ports...))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	st = ob.WaitSettled(t, 60*time.Second)
	if st.Done != 50 || st.Dead != 0 {
		t.Fatalf("outbox %+v, want 50 DONE", st)
	}
	got := map[string]int{}
	ids := append(first, down...)
	for _, r := range consumeIDs(t, c, topic, ids) {
		got[header(r, broker.HeaderEventID)]++
	}
	twice, most := 0, 0
	for _, id := range ids {
		switch n := got[id]; {
		case n == 0:
			t.Errorf("event %s lost", id)
		case n > 1:
			twice++
		}
		most = max(most, got[id])
	}
	t.Logf("%d events, %d produced more than once, at most %d times", len(ids), twice, most)
}

// consumeIDs reads topic from the start until it has seen a record for each
// of ids, and returns every record read.
func consumeIDs(t testing.TB, c *kfake.Cluster, topic string, ids []string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	missing := make(map[string]bool, len(ids))
	for _, id := range ids {
		missing[id] = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(missing) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("%d events not consumed: %v", len(missing), err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			delete(missing, header(r, broker.HeaderEventID))
		})
	}
	return out
}
