package reliability

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/internal/testsupport/testnode"
	"github.com/outboxkit/outbox/poller"
	"github.com/outboxkit/outbox/reliability/internal/chaos"
)

// TestSlowListenerOverflow: a hot queue of 10, a listener that takes 5 ms
// and 10,000 events written as fast as four writers can. The hot queue
// overflows almost at once; writes must neither fail nor wait for the
// listener, every refused event must be counted (Metrics.HotDropped) and
// reach the listener through the poller, and nothing may be lost.
//
// The listener holds its first calls until the hot queue has refused an
// event (or the writes are over), so that an overflow happens however fast
// the writers are on a loaded machine: a slow database could otherwise let
// a 5 ms listener keep up.
//
// In position delivery the refused events are given back to the position
// reader, which hands them to the cold queue (the poller has nothing to
// claim), and the rows stay STREAM; events written while the reader's set
// of hot positions is full skip the hot queue and are read too.
func TestSlowListenerOverflow(t *testing.T) {
	t.Parallel()
	forEachDialectDelivery(t, testdb.Dialects, func(t *testing.T, tg testdb.Target, dv delivery) {
		const work = 5 * time.Millisecond
		count := cfg.overflowEvents
		if tg.Name == "sqlite" && cfg.name == "short" {
			// SQLite's single connection under -race makes 10,000 take
			// over a minute; make chaos runs the full count.
			count = 3000
		}
		log := testnode.NewDeliveryLog()
		overflowed, writesDone := make(chan struct{}), make(chan struct{})
		reg := core.NewRegistry()
		if err := reg.RegisterFunc(chaos.Aggregate, chaos.EventType, func(context.Context, core.Event) error {
			select {
			case <-overflowed:
			case <-writesDone:
			}
			time.Sleep(work) // the listener's work
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		// Count deliveries in an interceptor, after the listener's work.
		counting := core.InterceptorFuncs{AfterFunc: func(_ context.Context, ev core.Event, _ error) error {
			log.Record(ev.ID())
			return nil
		}}
		if tg.Name != "sqlite" {
			// Room for the four writers beside the four workers' write-backs
			// and the poller: the writes must not queue for a connection.
			tg.DB.SetMaxOpenConns(12)
			tg.DB.SetMaxIdleConns(12)
		}
		hookTimes := &durations{}
		var overflowOnce sync.Once
		opts := testnode.Options{
			Dispatch: func(c *dispatch.Config) {
				c.HotQueueSize = 10
				c.Interceptors = []core.Interceptor{counting}
				c.Metrics = dropSignal{c.Metrics, func() { overflowOnce.Do(func() { close(overflowed) }) }}
			},
			// The production interval: the hook's wake-ups bring the
			// poller in, not a short interval.
			Poller: func(c *poller.Config) { c.Interval = poller.DefaultInterval },
		}
		if !dv.position {
			// How long the hot path's share of a write takes (the Outbox
			// wires its own hook in position delivery).
			opts.Hook = func(h core.LeasingHook) core.LeasingHook { return timedHook{h, hookTimes} }
		}
		n := startDeliveryNode(t, dv, tg.Store, tg.DB, reg, opts)
		envs, ids := chaosEnvs(t, count, nil)
		writeTimes := make([]time.Duration, count)
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range 4 {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= count {
						return
					}
					t0 := time.Now()
					if err := n.Write(context.Background(), envs[i]); err != nil {
						t.Errorf("write %d failed: %v", i, err)
						return
					}
					writeTimes[i] = time.Since(t0)
				}
			})
		}
		wg.Wait()
		close(writesDone)
		writing := time.Since(start)
		deliveredAtEnd := log.Distinct()
		log.WaitFor(t, 5*time.Minute, "every event delivered", testnode.AllDelivered(ids))
		n.Close(t)
		elapsed := time.Since(start)

		dupEvents, extra := log.Duplicates()
		m := n.Metrics.Counts()
		hookDesc := "not timed in position delivery"
		if hook := hookTimes.all(); !dv.position {
			hookDesc = fmt.Sprintf("p50 %s p99 %s max %s", ms(percentile(hook, 50)), ms(percentile(hook, 99)), ms(percentile(hook, 100)))
		}
		t.Logf("overflow %s %s: %d events written in %s (write p50 %s p99 %s max %s; the after-commit hot path %s), %d of them delivered by then; "+
			"all delivered in %s; hot queue 10: %d hot, %d overflowed (HotDropped), %d through the cold queue; 0 lost, %d duplicated (%d extra)",
			tg.Name, dv.name, count, writing.Round(time.Millisecond), ms(percentile(writeTimes, 50)), ms(percentile(writeTimes, 99)),
			ms(percentile(writeTimes, 100)), hookDesc, deliveredAtEnd, elapsed.Round(time.Millisecond),
			m.HotEnqueued, m.HotDropped, m.ColdEnqueued, dupEvents, extra)

		switch {
		case m.HotDropped == 0:
			t.Errorf("no event overflowed the hot queue (%d hot)", m.HotEnqueued)
		case !dv.position && m.HotEnqueued+m.HotDropped != int64(count):
			t.Errorf("hot enqueued %d + dropped %d, want %d", m.HotEnqueued, m.HotDropped, count)
		case dv.position && m.HotEnqueued+m.HotDropped > int64(count):
			t.Errorf("hot enqueued %d + dropped %d, more than the %d events", m.HotEnqueued, m.HotDropped, count)
		}
		if m.ColdEnqueued < m.HotDropped {
			t.Errorf("only %d events came through the cold queue, %d overflowed", m.ColdEnqueued, m.HotDropped)
		}
		if m.HotEnqueued+m.ColdEnqueued < int64(count) {
			t.Errorf("%d events through the hot queue and %d through the cold one, fewer than the %d written", m.HotEnqueued, m.ColdEnqueued, count)
		}
		if c := testnode.StatusCounts(t, tg.DB, tg.Table); c[dv.delivered()] != count || len(c) != 1 {
			t.Errorf("rows by status %v, want %d %v", c, count, dv.delivered())
		}
		if dupEvents != 0 {
			t.Errorf("%d events delivered more than once by a single instance", dupEvents)
		}
	})
}

// durations collects measurements from several goroutines.
type durations struct {
	mu sync.Mutex
	ds []time.Duration
}

func (d *durations) add(v time.Duration) {
	d.mu.Lock()
	d.ds = append(d.ds, v)
	d.mu.Unlock()
}

func (d *durations) all() []time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]time.Duration(nil), d.ds...)
}

// timedHook measures how long the dispatcher's after-commit hook (the hot
// path's share of a write) takes.
type timedHook struct {
	core.LeasingHook
	times *durations
}

func (h timedHook) AfterCommit(ctx context.Context, envs []core.Envelope) error {
	start := time.Now()
	err := h.LeasingHook.AfterCommit(ctx, envs)
	h.times.add(time.Since(start))
	return err
}

// dropSignal is the dispatcher's Metrics, calling dropped after each
// HotDropped.
type dropSignal struct {
	core.Metrics
	dropped func()
}

func (m dropSignal) HotDropped() {
	m.Metrics.HotDropped()
	m.dropped()
}
