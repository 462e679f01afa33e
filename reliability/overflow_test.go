package reliability

import (
	"context"
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
func TestSlowListenerOverflow(t *testing.T) {
	t.Parallel()
	forEachDialect(t, testdb.Dialects, func(t *testing.T, tg testdb.Target) {
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
		var (
			n            *testnode.Node
			overflowOnce sync.Once
		)
		afterHook := func() {
			if n.Metrics.Counts().HotDropped > 0 {
				overflowOnce.Do(func() { close(overflowed) })
			}
		}
		n = startNode(t, tg.Store, tg.DB, reg, testnode.Options{
			Hook: func(h core.LeasingHook) core.LeasingHook { return timedHook{h, hookTimes, afterHook} },
			Dispatch: func(c *dispatch.Config) {
				c.HotQueueSize = 10
				c.Interceptors = []core.Interceptor{counting}
			},
			// The production interval: the hook's wake-ups bring the
			// poller in, not a short interval.
			Poller: func(c *poller.Config) { c.Interval = poller.DefaultInterval },
		})
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
		hook := hookTimes.all()
		t.Logf("overflow %s: %d events written in %s (write p50 %s p99 %s max %s; the after-commit hot path p50 %s p99 %s max %s), %d of them delivered by then; "+
			"all delivered in %s; hot queue 10: %d hot, %d overflowed (HotDropped), %d through the poller; 0 lost, %d duplicated (%d extra)",
			tg.Name, count, writing.Round(time.Millisecond), ms(percentile(writeTimes, 50)), ms(percentile(writeTimes, 99)),
			ms(percentile(writeTimes, 100)), ms(percentile(hook, 50)), ms(percentile(hook, 99)), ms(percentile(hook, 100)), deliveredAtEnd, elapsed.Round(time.Millisecond),
			m.HotEnqueued, m.HotDropped, m.ColdEnqueued, dupEvents, extra)

		if m.HotEnqueued+m.HotDropped != int64(count) || m.HotDropped == 0 {
			t.Errorf("hot enqueued %d + dropped %d, want %d with some dropped", m.HotEnqueued, m.HotDropped, count)
		}
		if m.ColdEnqueued < m.HotDropped {
			t.Errorf("only %d events came through the poller, %d overflowed", m.ColdEnqueued, m.HotDropped)
		}
		if c := testnode.StatusCounts(t, tg.DB, tg.Table); c[core.StatusDone] != count || len(c) != 1 {
			t.Errorf("rows by status %v, want %d DONE", c, count)
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
// path's share of a write) takes, and calls after once it has returned.
type timedHook struct {
	core.LeasingHook
	times *durations
	after func()
}

func (h timedHook) AfterCommit(ctx context.Context, envs []core.Envelope) error {
	start := time.Now()
	err := h.LeasingHook.AfterCommit(ctx, envs)
	h.times.add(time.Since(start))
	h.after()
	return err
}
