package jetstream_test

import (
	"context"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	outboxjs "github.com/outboxkit/outbox/broker/jetstream"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testbroker"
)

// clusterEnv turns on the cluster run (make broker-cluster): it starts
// three nats-server processes and takes about a minute.
const clusterEnv = "OUTBOX_BROKER_CLUSTER"

// A 3-node JetStream cluster on loopback ports, a stream with 3 replicas,
// and the stream leader's node killed with SIGKILL while the outbox drains
// into it: every event ends DONE, the stream holds each event id exactly
// once (the publishes retried after the kill are absorbed by Nats-Msg-Id),
// and none is lost.
func TestClusterNodeKilledDuringDrain(t *testing.T) {
	if os.Getenv(clusterEnv) != "1" {
		t.Skipf("cluster run: set %s=1 (make broker-cluster)", clusterEnv)
	}
	nodes := testbroker.StartNATSCluster(t, 3)
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = n.URL()
	}
	nc, js := connect(t, strings.Join(urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))

	// The stream can be created once the cluster has elected its meta leader.
	name := testbroker.UniqueName("outbox")
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"},
			Storage: jetstream.FileStorage, Replicas: 3, Duplicates: 5 * time.Minute})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create R3 stream: %v", err)
		}
		time.Sleep(200 * time.Millisecond) // waiting for an election; nothing to wait on
	}

	pub := newPublisher(t, outboxjs.Config{Conn: nc, SubjectPrefix: name, AckTimeout: 2 * time.Second})
	var calls, failures atomic.Int64
	counting := core.ListenerFunc(func(ctx context.Context, ev core.Event) error {
		calls.Add(1)
		err := pub.Handle(ctx, ev)
		if err != nil {
			failures.Add(1)
		}
		return err
	})
	ob := testbroker.NewOutbox(t, counting, testbroker.OutboxConfig{Workers: 64, MaxAttempts: 1000, RetryBase: 50 * time.Millisecond})

	const n = 3000
	start := time.Now()
	var ids []string
	killed := ""
	for len(ids) < n {
		ids = append(ids, ob.Write(t, 100, 50, "Order", "OrderPlaced")...)
		if killed == "" && len(ids) >= n/3 {
			info, err := js.Stream(context.Background(), name)
			if err != nil {
				t.Fatal(err)
			}
			si, err := info.Info(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, node := range nodes {
				if si.Cluster != nil && node.Name == si.Cluster.Leader {
					node.Kill()
					killed = node.Name
				}
			}
			if killed == "" {
				t.Fatalf("stream leader %v not among the nodes", si.Cluster)
			}
			t.Logf("killed %s (the stream leader) with SIGKILL after %d events written, %d published",
				killed, len(ids), ob.Stats(t).Done)
		}
	}
	st := ob.WaitSettled(t, 3*time.Minute)
	elapsed := time.Since(start)
	if st.Done != n || st.Dead != 0 {
		t.Fatalf("outbox %+v, want %d DONE", st, n)
	}
	got := streamIDs(t, js, name)
	lost, dup := 0, 0
	for _, id := range ids {
		switch c := got[id]; {
		case c == 0:
			lost++
		case c > 1:
			dup++
		}
	}
	if lost != 0 || dup != 0 || len(got) != n {
		t.Errorf("stream: %d ids, %d lost, %d stored twice; want %d, 0, 0", len(got), lost, dup, n)
	}
	t.Logf("cluster run: %d events in %s with node %s killed; %d publishes, %d failed and retried; stream holds %d ids, %d lost, %d duplicates",
		n, elapsed.Round(time.Millisecond), killed, calls.Load(), failures.Load(), len(got), lost, dup)
}
