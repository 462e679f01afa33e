// Command demo tells the whole outbox story on SQLite in a temporary
// directory; it needs no server and exits by itself.
//
//	go run ./samples/demo
//
// It writes orders and their events in business transactions and shows:
// a rolled-back transaction delivers nothing; committed events reach their
// listener through the hot path right after COMMIT; a listener that fails is
// retried with backoff until it succeeds; an event nobody listens to goes DEAD
// at once; a burst larger than the hot queue, committed while every worker is
// busy, overflows into the table and the poller delivers the rest.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/poller"
	"github.com/outboxkit/outbox/store/sqlite"
	"github.com/outboxkit/outbox/txctx"
)

// Event and aggregate types are Go string enums.
type orderEvent string

func (e orderEvent) Name() string { return string(e) }

const (
	orderPlaced     orderEvent = "OrderPlaced"
	paymentCaptured orderEvent = "PaymentCaptured"
	orderShipped    orderEvent = "OrderShipped" // nobody listens: goes DEAD

	orders core.AggregateName = "Order"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// counters is a core.Metrics that counts what the pipeline did.
type counters struct {
	core.NopMetrics
	hot, dropped, cold, done, retried, dead atomic.Int64
}

func (c *counters) HotEnqueued()     { c.hot.Add(1) }
func (c *counters) HotDropped()      { c.dropped.Add(1) }
func (c *counters) ColdEnqueued()    { c.cold.Add(1) }
func (c *counters) DispatchSuccess() { c.done.Add(1) }
func (c *counters) DispatchFailure() { c.retried.Add(1) }
func (c *counters) DispatchDead()    { c.dead.Add(1) }

func run(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "outbox-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "demo.db"))
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := sqlite.New(sqlite.Config{})
	if err != nil {
		return err
	}
	if err := store.CreateSchema(ctx, db); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, total_cents INTEGER NOT NULL)`); err != nil {
		return err
	}

	// Listeners: one per (aggregate type, event type).
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf("   listener: "+format+"\n", args...)
	}
	reg := core.NewRegistry()
	var placed atomic.Int64
	// burstCommitted holds the deliveries of the burst (step 4) until its
	// transaction has committed and the hook has offered every event to the
	// hot queue: the workers stay busy meanwhile, as under real load, so the
	// queue cannot drain while it is being filled and the overflow happens
	// on every run, not only when the scheduler happens to be slow.
	burstCommitted := make(chan struct{})
	if err := reg.RegisterFunc(orders, orderPlaced, func(ctx context.Context, ev core.Event) error {
		if strings.HasPrefix(ev.AggregateID(), "burst-") {
			select {
			case <-burstCommitted:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if n := placed.Add(1); n <= 2 {
			say("%s %s delivered %s after it was written", ev.Type(), ev.AggregateID(), time.Since(ev.OccurredAt()).Round(time.Microsecond))
		}
		return nil
	}); err != nil {
		return err
	}
	if err := reg.RegisterFunc(orders, paymentCaptured, func(ctx context.Context, ev core.Event) error {
		if ev.Attempts < 2 {
			say("%s %s attempt %d fails: payment gateway timeout", ev.Type(), ev.AggregateID(), ev.Attempts+1)
			return errors.New("payment gateway timeout")
		}
		say("%s %s attempt %d succeeds", ev.Type(), ev.AggregateID(), ev.Attempts+1)
		return nil
	}); err != nil {
		return err
	}

	// The pipeline: a small hot queue so that the burst below overflows.
	metrics := &counters{}
	const hotQueueSize, workers, burst = 5, 2, 40
	d, err := dispatch.New(dispatch.Config{
		Store: store, DB: db, Registry: reg, Metrics: metrics,
		HotQueueSize: hotQueueSize, Workers: workers,
		Retry: core.ExponentialBackoff{Base: 100 * time.Millisecond, Max: time.Second},
	})
	if err != nil {
		return err
	}
	p, err := poller.New(poller.Config{Store: store, DB: db, Handler: d, Metrics: metrics, Interval: 500 * time.Millisecond})
	if err != nil {
		return err
	}
	writer, err := core.NewWriter(core.WriterConfig{Store: store, Hook: d.WriterHook()})
	if err != nil {
		return err
	}
	txm, err := txctx.New(db, txctx.Config{})
	if err != nil {
		return err
	}
	if err := d.Start(ctx); err != nil {
		return err
	}
	if err := p.Start(ctx); err != nil {
		return err
	}

	// placeOrder inserts an order and its events in one transaction.
	placeOrder := func(ctx context.Context, id string, cents int, fail bool, types ...orderEvent) error {
		return txm.Do(ctx, func(ctx context.Context) error {
			tx, _ := txctx.From(ctx)
			if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, total_cents) VALUES (?, ?)`, id, cents); err != nil {
				return err
			}
			envs := make([]core.Envelope, len(types))
			for i, typ := range types {
				envs[i], err = core.NewEnvelope(core.EnvelopeSpec{
					Type: typ, AggregateType: orders, AggregateID: id,
					JSON: fmt.Appendf(nil, `{"order":%q,"total_cents":%d}`, id, cents),
				})
				if err != nil {
					return err
				}
			}
			if _, err := writer.WriteAll(ctx, envs); err != nil {
				return err
			}
			if fail {
				return errors.New("card declined")
			}
			return nil
		})
	}

	fmt.Println("1. order-0 fails after writing its event: the transaction rolls back")
	if err := placeOrder(ctx, "order-0", 100, true, orderPlaced); err != nil {
		fmt.Println("   business error:", err, "- no row, no delivery")
	}
	fmt.Println("2. order-1 commits with OrderPlaced and PaymentCaptured (which fails twice)")
	if err := placeOrder(ctx, "order-1", 1250, false, orderPlaced, paymentCaptured); err != nil {
		return err
	}
	fmt.Println("3. order-2 commits with OrderShipped, which has no listener")
	if err := placeOrder(ctx, "order-2", 990, false, orderShipped); err != nil {
		return err
	}
	fmt.Printf("4. a burst of %d orders in one transaction while the listener is slow: more than the %d busy workers and the hot queue (%d) hold\n",
		burst, workers, hotQueueSize)
	err = txm.Do(ctx, func(ctx context.Context) error {
		for i := range burst {
			// Joins the outer transaction: one COMMIT for all 40.
			if err := placeOrder(ctx, fmt.Sprintf("burst-%02d", i), 10*i, false, orderPlaced); err != nil {
				return err
			}
		}
		return nil
	})
	close(burstCommitted)
	if err != nil {
		return err
	}

	// Wait until nothing is pending any more.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var pending int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM outbox_event WHERE status IN (0, 2)`).Scan(&pending); err != nil {
			return err
		}
		if pending == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d events still pending: %w", pending, ctx.Err())
		case <-tick.C:
		}
	}
	if err := p.Close(ctx); err != nil {
		return err
	}
	if err := d.Close(ctx); err != nil {
		return err
	}

	fmt.Printf("5. pipeline: %d events through the hot path, %d overflowed to the table and were claimed by the poller\n",
		metrics.hot.Load(), metrics.dropped.Load())
	fmt.Printf("   outcomes: %d done, %d retries scheduled, %d dead; %d OrderPlaced deliveries in all\n",
		metrics.done.Load(), metrics.retried.Load(), metrics.dead.Load(), placed.Load())
	// At most one event per worker left the hot queue before it was full.
	if least := int64(burst - workers - hotQueueSize); metrics.dropped.Load() < least {
		return fmt.Errorf("the burst overflowed %d events, want at least %d", metrics.dropped.Load(), least)
	}
	fmt.Println("6. the outbox table (burst rows left out):")
	rows, err := db.QueryContext(ctx, `SELECT aggregate_id, event_type, status, attempts, COALESCE(last_error, '')
		FROM outbox_event WHERE aggregate_id NOT LIKE 'burst-%' ORDER BY created_at, event_id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var aggID, typ, lastErr string
		var status core.Status
		var attempts int
		if err := rows.Scan(&aggID, &typ, &status, &attempts, &lastErr); err != nil {
			return err
		}
		fmt.Printf("   %-8s %-16s %-5s attempts=%d %s\n", aggID, typ, status, attempts, lastErr)
	}
	return rows.Err()
}
