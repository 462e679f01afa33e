package jetstream_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	outboxjs "github.com/outboxkit/outbox/broker/jetstream"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/testsupport/testbroker"
	"github.com/outboxkit/outbox/poller"
	"github.com/outboxkit/outbox/store/sqlite"
)

// Environment of the helper processes TestEndToEndKill starts from the test
// binary itself.
const (
	e2eRole   = "OUTBOX_E2E_ROLE" // "producer" or "consumer"
	e2eDB     = "OUTBOX_E2E_DB"
	e2eURL    = "OUTBOX_E2E_URL"
	e2eStream = "OUTBOX_E2E_STREAM"
	e2eTotal  = "OUTBOX_E2E_TOTAL"
)

// The whole path, outbox to JetStream to inbox, with kill -9 on both sides:
// a producer process writes events one transaction each into its SQLite
// outbox, published by the JetStream publisher; a consumer process applies
// them to its own SQLite database through the inbox. Each is killed with
// SIGKILL twice while events flow, and started again. At the end every
// event's effect is in the consumer's database exactly once.
func TestEndToEndKill(t *testing.T) {
	t.Parallel()
	url := testbroker.NATSURL(t)
	_, js := connect(t, url)
	stream, _ := newStream(t, js, 1)
	ctx := context.Background()
	if _, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: "e2e", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second,
	}); err != nil {
		t.Fatal(err)
	}
	const total = 400
	dir := t.TempDir()
	start := func(role string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestEndToEndHelper$", "-test.v")
		cmd.Env = append(os.Environ(), e2eRole+"="+role, e2eDB+"="+filepath.Join(dir, role+".db"),
			e2eURL+"="+url, e2eStream+"="+stream, e2eTotal+"="+strconv.Itoa(total))
		logf, err := os.OpenFile(filepath.Join(dir, role+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = logf.Close() })
		return cmd
	}
	kill := func(cmd *exec.Cmd) {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
	consumerDB := filepath.Join(dir, "consumer.db")
	applied := func() (rows, distinct int) {
		db, err := sqlite.Open(consumerDB)
		if err != nil {
			return 0, 0
		}
		defer db.Close()
		_ = db.QueryRow(`SELECT COUNT(*), COUNT(DISTINCT event_id) FROM effects`).Scan(&rows, &distinct)
		return rows, distinct
	}
	waitApplied := func(n int, limit time.Duration) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for {
			if _, d := applied(); d >= n {
				return
			}
			if time.Now().After(deadline) {
				logs, _ := os.ReadFile(filepath.Join(dir, "consumer.log"))
				plogs, _ := os.ReadFile(filepath.Join(dir, "producer.log"))
				_, d := applied()
				t.Fatalf("%d of %d applied after %s\nconsumer log:\n%s\nproducer log:\n%s", d, n, limit, logs, plogs)
			}
			time.Sleep(50 * time.Millisecond) // polling another process's database
		}
	}

	producer, consumer := start("producer"), start("consumer")
	for round, at := range []int{total / 5, 2 * total / 5} {
		waitApplied(at, 60*time.Second)
		kill(producer)
		kill(consumer)
		t.Logf("round %d: killed both after %d applied", round+1, at)
		producer, consumer = start("producer"), start("consumer")
	}
	waitApplied(total, 120*time.Second)
	kill(producer)
	kill(consumer)
	rows, distinct := applied()
	if rows != total || distinct != total {
		t.Fatalf("consumer applied %d effects for %d distinct events, want %d and %d", rows, distinct, total, total)
	}
	t.Logf("%d events: each applied exactly once after 2 kill -9 of producer and consumer", total)
}

// TestEndToEndHelper is the producer or consumer process of TestEndToEndKill;
// run directly it does nothing.
func TestEndToEndHelper(t *testing.T) {
	role := os.Getenv(e2eRole)
	if role == "" {
		t.Skip("helper process of TestEndToEndKill")
	}
	total, _ := strconv.Atoi(os.Getenv(e2eTotal))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	db, err := sqlite.Open(os.Getenv(e2eDB))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	nc, err := nats.Connect(os.Getenv(e2eURL), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	stream := os.Getenv(e2eStream)
	switch role {
	case "producer":
		if err := produce(ctx, db, nc, stream, total); err != nil {
			t.Fatal(err)
		}
	case "consumer":
		if err := consumeE2E(ctx, db, nc, stream); err != nil {
			t.Fatal(err)
		}
	}
}

func produce(ctx context.Context, db *sql.DB, nc *nats.Conn, stream string, total int) error {
	st, err := sqlite.New(sqlite.Config{})
	if err != nil {
		return err
	}
	if err := st.CreateSchema(ctx, db); err != nil {
		return err
	}
	pub, err := outboxjs.New(outboxjs.Config{Conn: nc, SubjectPrefix: stream, AckTimeout: time.Second})
	if err != nil {
		return err
	}
	reg := core.NewRegistry()
	if err := reg.RegisterFallback(pub); err != nil {
		return err
	}
	ob, err := outbox.New(outbox.Config{DB: db, Store: st, Registry: reg,
		// A short lease: the events a killed producer held are claimed
		// again by its successor after a second, not thirty.
		Dispatch: dispatch.Config{Workers: 32, LeaseTimeout: time.Second,
			Retry: &core.ExponentialBackoff{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond}},
		Poller: poller.Config{Interval: 200 * time.Millisecond},
	})
	if err != nil {
		return err
	}
	if err := ob.Start(ctx); err != nil {
		return err
	}
	defer ob.Close(context.WithoutCancel(ctx))
	var written int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM outbox_event`).Scan(&written); err != nil {
		return err
	}
	for i := written; i < total; i++ {
		env, err := core.NewEnvelope(core.EnvelopeSpec{ID: fmt.Sprintf("e2e-%06d", i), Type: core.EventName("Credited"),
			AggregateType: core.AggregateName("Account"), AggregateID: fmt.Sprintf("a-%d", i%7), JSON: []byte(`{"cents":100}`)})
		if err != nil {
			return err
		}
		if err := ob.Do(ctx, func(ctx context.Context) error {
			_, err := ob.Writer().Write(ctx, env)
			return err
		}); err != nil {
			return err
		}
		time.Sleep(2 * time.Millisecond) // pace the writes so that the kills land mid-stream
	}
	<-ctx.Done() // keep delivering until killed
	return nil
}

func consumeE2E(ctx context.Context, db *sql.DB, nc *nats.Conn, stream string) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS effects (event_id TEXT NOT NULL)`); err != nil {
		return err
	}
	ib, err := inbox.New(inbox.Config{DB: db, Consumer: "e2e"})
	if err != nil {
		return err
	}
	if err := ib.CreateSchema(ctx); err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := js.Consumer(ctx, stream, "e2e")
	if err != nil {
		return err
	}
	return outboxjs.Consume(ctx, outboxjs.ConsumeConfig{Consumer: cons, Inbox: ib, NakDelay: 50 * time.Millisecond,
		Handler: func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO effects (event_id) VALUES (?)`, outboxjs.EventID(msg))
			return err
		}})
}
