package jetstream_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	outboxjs "github.com/outboxkit/outbox/broker/jetstream"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/testsupport/testbroker"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
)

// Two JetStream consumers of one stream deliver every message twice to the
// same inbox consumer, as redeliveries would, and a handler fails once: every
// event takes effect exactly once.
func TestConsumeIntoInbox(t *testing.T) {
	t.Parallel()
	nc, js := connect(t, testbroker.NATSURL(t))
	stream, prefix := newStream(t, js, 1)
	p := newPublisher(t, outboxjs.Config{Conn: nc, SubjectPrefix: prefix})
	const n = 50
	ids := make([]string, n)
	for i := range ids {
		ev := newEvent(t, "OrderPlaced", "o-1")
		if err := p.Handle(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
		ids[i] = ev.ID()
	}

	tg := testdb.SQLite(t)
	ib, err := inbox.New(inbox.Config{DB: tg.DB, Consumer: "billing", Table: testdb.UniqueName("inbox")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := ib.CreateSchema(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.DB.ExecContext(ctx, `CREATE TABLE effects (event_id TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}

	var calls, failed atomic.Int64
	applied := make(chan string, 4*n)
	handler := func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
		calls.Add(1)
		id := outboxjs.EventID(msg)
		if id == ids[7] && failed.CompareAndSwap(0, 1) {
			return errors.New("first attempt fails")
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO effects (event_id) VALUES (?)`, id); err != nil {
			return err
		}
		applied <- id
		return nil
	}
	logs := &lines{}
	var wg sync.WaitGroup
	for _, name := range []string{"a", "b"} {
		cons, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if err := outboxjs.Consume(ctx, outboxjs.ConsumeConfig{
				Consumer: cons, Inbox: ib, Handler: handler, NakDelay: 10 * time.Millisecond, Logger: slog.New(logs),
			}); err != nil {
				t.Error(err)
			}
		})
	}
	seen := map[string]bool{}
	timeout := time.After(30 * time.Second)
	for len(seen) < n {
		select {
		case id := <-applied:
			seen[id] = true
		case <-timeout:
			t.Fatalf("%d of %d events applied", len(seen), n)
		}
	}
	// Wait until both consumers delivered everything (acknowledged), so
	// that the duplicates have been offered too.
	for _, name := range []string{"a", "b"} {
		waitAcked(t, js, stream, name, n)
	}
	cancel()
	wg.Wait()

	var rows, distinct int
	if err := tg.DB.QueryRow(`SELECT COUNT(*), COUNT(DISTINCT event_id) FROM effects`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != n || distinct != n {
		t.Errorf("effects: %d rows, %d distinct, want %d", rows, distinct, n)
	}
	if calls.Load() < n+1 {
		t.Errorf("handler ran %d times; the failure was not redelivered", calls.Load())
	}
	// The failure is one line: written when its second was over, or when
	// Consume returned.
	want := "WARN jetstream: handler failed; redelivery requested messages=1 event_id=" + ids[7] + " error=first attempt fails"
	if got := logs.take(); len(got) != 1 || got[0] != want {
		t.Errorf("logged %q, want [%q]", got, want)
	}
}

// lines is a slog.Handler that keeps each record as one line: level,
// message, then its attributes as key=value.
type lines struct {
	mu  sync.Mutex
	all []string
}

func (l *lines) Enabled(context.Context, slog.Level) bool { return true }
func (l *lines) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, line)
	return nil
}
func (l *lines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *lines) WithGroup(string) slog.Handler      { return l }

func (l *lines) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.all
}

func waitAcked(t *testing.T, js jetstream.JetStream, stream, consumer string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := js.Consumer(context.Background(), stream, consumer)
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if info.AckFloor.Stream >= uint64(n) && info.NumAckPending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer %s: ack floor %d of %d", consumer, info.AckFloor.Stream, n)
		}
		time.Sleep(20 * time.Millisecond) // polling the server's state; nothing to wait on
	}
}

func TestConsumeValidates(t *testing.T) {
	if err := outboxjs.Consume(context.Background(), outboxjs.ConsumeConfig{}); !errors.Is(err, core.ErrInvalid) {
		t.Errorf("empty config: %v", err)
	}
}
