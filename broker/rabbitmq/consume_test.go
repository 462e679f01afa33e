package rabbitmq_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/broker/rabbitmq"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
)

// Every message is queued twice (as a redelivery after a lost confirm would
// queue it) and one handler fails once: every event takes effect exactly
// once.
func TestConsumeIntoInbox(t *testing.T) {
	t.Parallel()
	u := amqpURL(t)
	exchange, queue, ch := topology(t, u, "#")
	p := newPublisher(t, rabbitmq.Config{URL: u, Exchange: exchange})
	const n = 50
	ids := make([]string, n)
	for i := range ids {
		ev := newEvent(t, "OrderPlaced", "o-1")
		for range 2 {
			if err := p.Handle(context.Background(), ev); err != nil {
				t.Fatal(err)
			}
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
	handled := make(chan struct{}, 4*n)
	handler := func(ctx context.Context, tx *sql.Tx, d amqp.Delivery) error {
		calls.Add(1)
		id := rabbitmq.EventID(d)
		if id == ids[7] && failed.CompareAndSwap(0, 1) {
			return errors.New("first attempt fails")
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO effects (event_id) VALUES (?)`, id)
		return err
	}
	logs := &lines{}
	var wg sync.WaitGroup
	wg.Go(func() {
		err := rabbitmq.Consume(ctx, rabbitmq.ConsumeConfig{Channel: ch, Queue: queue, Inbox: ib, Logger: slog.New(logs), Handler: func(ctx context.Context, tx *sql.Tx, d amqp.Delivery) error {
			defer func() { handled <- struct{}{} }()
			return handler(ctx, tx, d)
		}})
		if err != nil {
			t.Error(err)
		}
	})
	// n distinct handler runs plus the failed one; duplicates skip the handler.
	for range n + 1 {
		select {
		case <-handled:
		case <-time.After(30 * time.Second):
			t.Fatalf("handler ran %d times", calls.Load())
		}
	}
	// The queue drains (the duplicates acknowledged without a run).
	deadline := time.Now().Add(30 * time.Second)
	for {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if q.Messages == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d messages left in the queue", q.Messages)
		}
		time.Sleep(20 * time.Millisecond) // polling the broker's state; nothing to wait on
	}
	cancel()
	wg.Wait()
	// The failure is one line: written when its second was over, or when
	// Consume returned.
	want := "WARN rabbitmq: handler failed; delivery requeued deliveries=1 event_id=" + ids[7] + " error=first attempt fails"
	if got := logs.take(); len(got) != 1 || got[0] != want {
		t.Errorf("logged %q, want [%q]", got, want)
	}
	var rows, distinct int
	if err := tg.DB.QueryRow(`SELECT COUNT(*), COUNT(DISTINCT event_id) FROM effects`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != n || distinct != n {
		t.Errorf("effects: %d rows, %d distinct, want %d", rows, distinct, n)
	}
}

func TestConsumeValidates(t *testing.T) {
	if err := rabbitmq.Consume(context.Background(), rabbitmq.ConsumeConfig{}); !errors.Is(err, core.ErrInvalid) {
		t.Errorf("empty config: %v", err)
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
