package dispatch_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/internal/testsupport/testnode"
	"github.com/outboxkit/outbox/poller"
)

// End-to-end tests: Writer, txctx, Dispatcher and Poller on real databases,
// one subtest per dialect (see internal/testsupport/testdb). Waits are on conditions with
// a deadline; backoffs and intervals are short.

const e2eDeadline = 30 * time.Second

// startNode starts an outbox instance on tg's store and db, as a service
// wires one in main, with the short backoff and interval of these tests.
func startNode(t *testing.T, tg testdb.Target, db *sql.DB, reg *core.Registry, o testnode.Options) *testnode.Node {
	t.Helper()
	return testnode.Start(t, tg.Store, db, reg, testnode.Defaults{
		Retry:    &core.ExponentialBackoff{Base: time.Millisecond, Max: 5 * time.Millisecond},
		Interval: 20 * time.Millisecond,
		// Errors only: store failures are what a stuck test needs to show.
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError})),
	}, o)
}

// write commits envs through n in one business transaction.
func write(t *testing.T, n *testnode.Node, envs ...core.Envelope) {
	t.Helper()
	if err := n.Write(context.Background(), envs...); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// waitCalls waits for n calls of id.
// waitCalls waits for n listener calls of id; on a timeout it logs the rows
// of tg that are not DONE or were never delivered.
func waitCalls(t *testing.T, tg testdb.Target, rec *testnode.DeliveryLog, id string, n int) {
	t.Helper()
	if rec.OnTimeout == nil {
		rec.OnTimeout = func(calls map[string]int) { logUnfinished(t, tg, calls) }
	}
	rec.WaitFor(t, e2eDeadline, fmt.Sprintf("%d calls of %s", n, id), func(c map[string]int) bool { return c[id] >= n })
}

func registry(t *testing.T, l core.ListenerFunc) *core.Registry {
	t.Helper()
	reg := core.NewRegistry()
	if err := reg.Register(orders, orderPlaced, l); err != nil {
		t.Fatal(err)
	}
	return reg
}

func getEvent(t *testing.T, tg testdb.Target, id string) core.Event {
	t.Helper()
	ev, err := tg.Store.Get(context.Background(), tg.DB, id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return ev
}

// logUnfinished logs the rows that are not DONE or whose events the
// listener has not seen, with their times and lease: what a timed-out wait
// needs to tell a lost event from a slow one.
func logUnfinished(t *testing.T, tg testdb.Target, delivered map[string]int) {
	t.Helper()
	t.Logf("now %s", time.Now().UTC().Format(time.RFC3339Nano))
	unfinished := 0
	defer func() { t.Logf("%d rows not DONE or never delivered", unfinished) }()
	for _, ev := range allEvents(t, tg) {
		if delivered[ev.ID()] > 0 && ev.Status == core.StatusDone {
			continue
		}
		if unfinished++; unfinished > 20 {
			continue
		}
		t.Logf("%s: status %v, delivered %d times, attempts %d, available_at %s, locked_by %q, locked_at %s, last_error %q",
			ev.ID(), ev.Status, delivered[ev.ID()], ev.Attempts, ev.AvailableAt.Format(time.RFC3339Nano),
			ev.LockedBy, ev.LockedAt.Format(time.RFC3339Nano), ev.LastError)
	}
}

// allEvents reads every row of tg's table through the store.
func allEvents(t *testing.T, tg testdb.Target) []core.Event {
	t.Helper()
	rows, err := tg.DB.QueryContext(context.Background(), "SELECT event_id FROM "+tg.Table)
	if err != nil {
		t.Errorf("list events: %v", err)
		return nil
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Errorf("list events: %v", err)
			break
		}
		ids = append(ids, id)
	}
	_ = rows.Close()
	evs := make([]core.Event, 0, len(ids))
	for _, id := range ids {
		ev, err := tg.Store.Get(context.Background(), tg.DB, id)
		if err != nil {
			t.Errorf("get %s: %v", id, err)
			continue
		}
		evs = append(evs, ev)
	}
	return evs
}

func newEnvs(t *testing.T, n int) ([]core.Envelope, []string) {
	t.Helper()
	envs := make([]core.Envelope, n)
	ids := make([]string, n)
	for i := range envs {
		envs[i] = newEnv(t, core.NewEventID())
		ids[i] = envs[i].ID()
	}
	return envs, ids
}

func TestE2ERollbackDeliversNothing(t *testing.T) {
	t.Parallel()
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		rec := testnode.NewDeliveryLog()
		n := startNode(t, tg, tg.DB, registry(t, func(_ context.Context, ev core.Event) error {
			rec.Record(ev.ID())
			return nil
		}), testnode.Options{})
		rolledBack := newEnv(t, core.NewEventID())
		errAbort := errors.New("business rule violated")
		err := n.TxManager.Do(context.Background(), func(ctx context.Context) error {
			if _, err := n.Writer.Write(ctx, rolledBack); err != nil {
				return err
			}
			return errAbort
		})
		if !errors.Is(err, errAbort) {
			t.Fatalf("Do = %v, want the business error", err)
		}
		marker := newEnv(t, core.NewEventID())
		write(t, n, marker)
		waitCalls(t, tg, rec, marker.ID(), 1)
		if _, err := n.Poller.PollOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		n.Close(t)
		if c := rec.Count(rolledBack.ID()); c != 0 {
			t.Errorf("rolled-back event delivered %d times", c)
		}
		if _, err := tg.Store.Get(context.Background(), tg.DB, rolledBack.ID()); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("rolled-back row: %v, want core.ErrNotFound", err)
		}
	})
}

func TestE2ECommitDeliversThroughHotPath(t *testing.T) {
	t.Parallel()
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		rec := testnode.NewDeliveryLog()
		n := startNode(t, tg, tg.DB, registry(t, func(_ context.Context, ev core.Event) error {
			rec.Record(ev.ID())
			return nil
		}), testnode.Options{Poller: func(c *poller.Config) { c.Interval = time.Hour }})
		env := newEnv(t, core.NewEventID())
		write(t, n, env)
		waitCalls(t, tg, rec, env.ID(), 1)
		n.Close(t)
		if c := rec.Count(env.ID()); c != 1 {
			t.Errorf("delivered %d times, want 1", c)
		}
		got := getEvent(t, tg, env.ID())
		if got.Status != core.StatusDone || got.Attempts != 0 || got.LockedBy != "" || got.DoneAt.IsZero() {
			t.Errorf("row %v attempts %d locked by %q done at %v, want DONE 0 unleased", got.Status, got.Attempts, got.LockedBy, got.DoneAt)
		}
		if m := n.Metrics.Counts(); m.HotEnqueued != 1 || m.ColdEnqueued != 0 {
			t.Errorf("hot/cold enqueued = %d/%d, want 1/0", m.HotEnqueued, m.ColdEnqueued)
		}
	})
}

func TestE2EOverflowDeliveredByPoller(t *testing.T) {
	t.Parallel()
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		rec := testnode.NewDeliveryLog()
		gate := make(chan struct{})
		n := startNode(t, tg, tg.DB, registry(t, func(_ context.Context, ev core.Event) error {
			<-gate
			rec.Record(ev.ID())
			return nil
		}), testnode.Options{
			Dispatch: func(c *dispatch.Config) { c.HotQueueSize = 1; c.Workers = 1 },
			// Only the hook's wake-up can bring the poller in quickly.
			Poller: func(c *poller.Config) { c.Interval = time.Hour },
		})
		envs, ids := newEnvs(t, 5)
		write(t, n, envs...)
		if d := n.Metrics.Counts().HotDropped; d < 3 {
			t.Errorf("HotDropped = %d, want at least 3 of 5 with a hot queue of 1", d)
		}
		close(gate)
		rec.WaitFor(t, e2eDeadline, "all 5 events", func(c map[string]int) bool { return len(c) == 5 })
		n.Close(t)
		for _, id := range ids {
			if c := rec.Count(id); c != 1 {
				t.Errorf("%s delivered %d times", id, c)
			}
			if st := getEvent(t, tg, id).Status; st != core.StatusDone {
				t.Errorf("%s is %v", id, st)
			}
		}
		if m := n.Metrics.Counts(); m.ColdEnqueued != m.HotDropped {
			t.Errorf("cold enqueued %d != hot dropped %d", m.ColdEnqueued, m.HotDropped)
		}
	})
}

func TestE2EFailureRetriesThenDone(t *testing.T) {
	t.Parallel()
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		rec := testnode.NewDeliveryLog()
		n := startNode(t, tg, tg.DB, registry(t, func(_ context.Context, ev core.Event) error {
			if rec.Record(ev.ID()) <= 2 {
				return errors.New("downstream unavailable")
			}
			return nil
		}), testnode.Options{
			// Retries are claimed at their due time through NotifyDue/WakeAt;
			// the interval would be far too long.
			Poller: func(c *poller.Config) { c.Interval = time.Hour },
		})
		env := newEnv(t, core.NewEventID())
		write(t, n, env)
		waitCalls(t, tg, rec, env.ID(), 3)
		n.Close(t)
		got := getEvent(t, tg, env.ID())
		if got.Status != core.StatusDone || got.Attempts != 2 {
			t.Errorf("row %v attempts %d, want DONE after 2 failed attempts", got.Status, got.Attempts)
		}
		if m := n.Metrics.Counts(); m.DispatchFailure != 2 || m.DispatchSuccess != 1 {
			t.Errorf("failures/successes = %d/%d, want 2/1", m.DispatchFailure, m.DispatchSuccess)
		}
	})
}

func TestE2ERepeatedFailureGoesDead(t *testing.T) {
	t.Parallel()
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		rec := testnode.NewDeliveryLog()
		n := startNode(t, tg, tg.DB, registry(t, func(_ context.Context, ev core.Event) error {
			rec.Record(ev.ID())
			return errors.New("always broken")
		}), testnode.Options{Dispatch: func(c *dispatch.Config) { c.MaxAttempts = 4 }})
		env := newEnv(t, core.NewEventID())
		write(t, n, env)
		waitCalls(t, tg, rec, env.ID(), 4)
		n.Close(t) // the 4th outcome is written before Close returns
		got := getEvent(t, tg, env.ID())
		if got.Status != core.StatusDead || got.Attempts != 4 || !strings.Contains(got.LastError, "always broken") {
			t.Errorf("row %v attempts %d last_error %q, want DEAD 4 always broken", got.Status, got.Attempts, got.LastError)
		}
		if c := rec.Count(env.ID()); c != 4 {
			t.Errorf("listener calls = %d, want exactly MaxAttempts = 4", c)
		}
	})
}

func TestE2EUnroutableGoesDead(t *testing.T) {
	t.Parallel()
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		n := startNode(t, tg, tg.DB, core.NewRegistry(), testnode.Options{})
		env := newEnv(t, core.NewEventID())
		write(t, n, env)
		n.Close(t) // drains the hot queue
		got := getEvent(t, tg, env.ID())
		if got.Status != core.StatusDead || got.Attempts != 1 || !strings.Contains(got.LastError, "no listener") {
			t.Errorf("row %v attempts %d last_error %q, want DEAD 1 no listener", got.Status, got.Attempts, got.LastError)
		}
		if f := n.Metrics.Counts().DispatchFailure; f != 0 {
			t.Errorf("%d retries scheduled for an unroutable event", f)
		}
	})
}

// A poison event retrying as fast as its backoff allows does not hold up
// the events written after it.
func TestE2EPoisonDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		rec := testnode.NewDeliveryLog()
		var poisonID atomic.Value
		poisonID.Store("")
		n := startNode(t, tg, tg.DB, registry(t, func(_ context.Context, ev core.Event) error {
			rec.Record(ev.ID())
			if ev.ID() == poisonID.Load() {
				return errors.New("poison")
			}
			return nil
		}), testnode.Options{Dispatch: func(c *dispatch.Config) { c.MaxAttempts = 1000; c.Workers = 2 }})
		poison := newEnv(t, core.NewEventID())
		poisonID.Store(poison.ID())
		write(t, n, poison)
		waitCalls(t, tg, rec, poison.ID(), 2) // it is cycling through retries
		envs, ids := newEnvs(t, 50)
		for _, env := range envs {
			write(t, n, env)
		}
		rec.WaitFor(t, e2eDeadline, "the 50 good events", testnode.AllDelivered(ids))
		n.Close(t)
		for _, id := range ids {
			if c := rec.Count(id); c != 1 {
				t.Errorf("%s delivered %d times", id, c)
			}
		}
		if st := getEvent(t, tg, poison.ID()); st.Status == core.StatusDone {
			t.Errorf("poison event is %v", st.Status)
		}
	})
}

// Cold events keep moving while the hot path is busy: with a hot backlog
// held in place, cold events claimed meanwhile are delivered long before the
// backlog has drained (the workers take hot events twice as often as cold
// ones, not exclusively). The backlog is made deterministic by holding every
// hot delivery until the test releases it; the dispatcher's DONE writes are
// far too fast for a writer to build one otherwise.
func TestE2EColdProgressesUnderHotLoad(t *testing.T) {
	t.Parallel()
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		const hotN = 100
		rec := testnode.NewDeliveryLog()
		coldEnvs, coldIDs := newEnvs(t, 20)
		cold := map[string]bool{}
		for _, id := range coldIDs {
			cold[id] = true
		}
		release := make(chan struct{})
		n := startNode(t, tg, tg.DB, registry(t, func(ctx context.Context, ev core.Event) error {
			if !cold[ev.ID()] {
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			rec.Record(ev.ID())
			return nil
		}), testnode.Options{
			Dispatch: func(c *dispatch.Config) { c.Workers = 1; c.HotQueueSize = 2 * hotN },
			// Only PollOnce below claims the cold events: no interval
			// poll, and no watch that PostgreSQL's NOTIFY would wake.
			Poller: func(c *poller.Config) { c.Interval = time.Hour; c.NoWatch = true },
		})
		for range hotN / 20 {
			envs, _ := newEnvs(t, 20)
			write(t, n, envs...)
		}
		testnode.WriteForPoller(t, tg.Store, tg.DB, coldEnvs...)
		// Poll until no cold event is left unclaimed (the hot ones are
		// leased by their writer). One cycle is not always enough: the
		// poller's own first poll, which it runs at Start, can run beside
		// it on a loaded machine, and on MariaDB a SKIP LOCKED claim passes
		// rows the other claim's index scan holds for a moment.
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		claimBy := time.After(e2eDeadline)
		for {
			if _, err := n.Poller.PollOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			var unclaimed int
			if err := tg.DB.QueryRow("SELECT COUNT(*) FROM " + tg.Table + " WHERE locked_by IS NULL AND status = 0").Scan(&unclaimed); err != nil {
				t.Fatal(err)
			}
			if unclaimed == 0 {
				break
			}
			select {
			case <-tick.C:
			case <-claimBy:
				t.Fatalf("%d cold events left unclaimed after polling for %v", unclaimed, e2eDeadline)
			}
		}
		coldDone := func() bool { return rec.Holds(testnode.AllDelivered(coldIDs)) }
		deadline := time.NewTimer(e2eDeadline)
		defer deadline.Stop()
		released := 0
		// Each send completes when the worker is back in a hot delivery, so
		// the cold events it took in between are recorded by then.
		for !coldDone() && released < hotN {
			select {
			case release <- struct{}{}:
				released++
			case <-deadline.C:
				t.Fatalf("timed out: %d hot events released", released)
			}
		}
		close(release)
		if !coldDone() {
			t.Errorf("cold events finished only after the hot backlog: all %d hot events released first", released)
		}
		rec.WaitFor(t, e2eDeadline, "every event", func(c map[string]int) bool { return len(c) == hotN+len(coldIDs) })
		n.Close(t)
		t.Logf("the 20 cold events were done after %d of %d hot events", released, hotN)
	})
}

// Close drains what it can; an event whose listener outlives the drain is
// released, not charged an attempt, and another instance delivers it at once.
func TestE2EShutdownDrainsAndReleases(t *testing.T) {
	t.Parallel()
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		rec := testnode.NewDeliveryLog()
		stuckID := core.NewEventID()
		entered := make(chan struct{})
		var first sync.Once
		reg := registry(t, func(ctx context.Context, ev core.Event) error {
			if ev.ID() == stuckID && rec.Record(ev.ID()) == 1 {
				first.Do(func() { close(entered) })
				<-ctx.Done()
				return ctx.Err()
			}
			rec.Record(ev.ID())
			return nil
		})
		a := startNode(t, tg, tg.DB, reg, testnode.Options{Dispatch: func(c *dispatch.Config) {
			c.DrainTimeout = 100 * time.Millisecond
			c.Workers = 1
		}})
		write(t, a, newEnv(t, stuckID))
		<-entered
		envs, ids := newEnvs(t, 30)
		write(t, a, envs...)
		a.Close(t)

		counts := testnode.StatusCounts(t, tg.DB, tg.Table)
		stuck := getEvent(t, tg, stuckID)
		if stuck.Status != core.StatusNew || stuck.Attempts != 0 || stuck.LockedBy != "" {
			t.Errorf("interrupted event: %v attempts %d locked by %q, want NEW 0 unleased", stuck.Status, stuck.Attempts, stuck.LockedBy)
		}
		t.Logf("after shutdown: %v", counts)

		b := startNode(t, tg, tg.Reopen(t), reg, testnode.Options{})
		waitCalls(t, tg, rec, stuckID, 2)
		rec.WaitFor(t, e2eDeadline, "every event", testnode.AllDelivered(ids))
		b.Close(t)
		for _, id := range ids {
			if c := rec.Count(id); c != 1 {
				t.Errorf("%s delivered %d times", id, c)
			}
		}
		if got := testnode.StatusCounts(t, tg.DB, tg.Table); got[core.StatusDone] != 31 {
			t.Errorf("status counts %v, want 31 DONE", got)
		}
	})
}

// Two instances with their own pools on one database, writing concurrently:
// every event is delivered exactly once.
func TestE2ETwoInstancesNoDuplicatesNoLoss(t *testing.T) {
	t.Parallel()
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		total := 5000
		if tg.Name == "sqlite" {
			total = 1000
		}
		const perTx = 10
		rec := testnode.NewDeliveryLog()
		rec.OnTimeout = func(calls map[string]int) { logUnfinished(t, tg, calls) }
		// The listeners hold until half the transactions are committed:
		// the small hot queues overflow at once, so that the first half
		// goes mostly through the pollers, which compete for it across
		// instances, and the second half is shared by both paths.
		halfway := make(chan struct{})
		reg := registry(t, func(_ context.Context, ev core.Event) error {
			<-halfway
			rec.Record(ev.ID())
			return nil
		})
		opts := testnode.Options{Dispatch: func(c *dispatch.Config) { c.HotQueueSize = 32; c.ColdQueueSize = 64 }}
		nodes := []*testnode.Node{
			startNode(t, tg, tg.DB, reg, opts),
			startNode(t, tg, tg.Reopen(t), reg, opts),
		}
		var (
			writers   sync.WaitGroup
			committed atomic.Int64
		)
		for w := range 4 {
			writers.Go(func() {
				n := nodes[w%2]
				for range total / perTx / 4 {
					envs, _ := newEnvs(t, perTx)
					write(t, n, envs...)
					if committed.Add(1) == int64(total/perTx/2) {
						close(halfway)
					}
				}
			})
		}
		writers.Wait()
		rec.WaitFor(t, e2eDeadline, fmt.Sprintf("%d deliveries", total), func(c map[string]int) bool { return len(c) >= total })
		for _, n := range nodes {
			n.Close(t)
		}
		dups, _ := rec.Duplicates()
		if d := rec.Distinct(); d != total || dups != 0 {
			t.Errorf("%d distinct events delivered (want %d), %d delivered more than once", d, total, dups)
		}
		if got := testnode.StatusCounts(t, tg.DB, tg.Table); got[core.StatusDone] != total {
			t.Errorf("status counts %v, want %d DONE", got, total)
		}
		var hot, cold int64
		for _, n := range nodes {
			m := n.Metrics.Counts()
			hot += m.HotEnqueued
			cold += m.ColdEnqueued
		}
		t.Logf("%s: %d events, %d via hot path, %d via pollers", tg.Name, total, hot, cold)
		if cold == 0 {
			t.Errorf("no event went through a poller; the test no longer makes the hot queues overflow")
		}
	})
}

// TestE2EDeleteDelivered: with DeleteDelivered, the rows of delivered events
// are deleted, whether they came through the hot path, the poller or a
// retry; a DEAD event's row stays.
func TestE2EDeleteDelivered(t *testing.T) {
	t.Parallel()
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		rec := testnode.NewDeliveryLog()
		envs, ids := newEnvs(t, 20)
		flaky, poison := ids[0], ids[1]
		var flakyCalls atomic.Int32
		gate := make(chan struct{})
		n := startNode(t, tg, tg.DB, registry(t, func(_ context.Context, ev core.Event) error {
			<-gate
			rec.Record(ev.ID())
			switch {
			case ev.ID() == poison:
				return core.Permanent(errors.New("poison"))
			case ev.ID() == flaky && flakyCalls.Add(1) == 1:
				return errors.New("fails once")
			}
			return nil
		}), testnode.Options{Dispatch: func(c *dispatch.Config) {
			c.DeleteDelivered = true
			c.HotQueueSize = 5
			c.Workers = 1
		}})
		write(t, n, envs...) // the hot queue takes 5 of 20: the rest go through the poller
		close(gate)
		rec.WaitFor(t, e2eDeadline, "every event, the flaky one twice", func(c map[string]int) bool {
			return len(c) == len(ids) && c[flaky] == 2
		})
		n.Close(t) // writes the last deletes
		for _, id := range ids {
			want := 1
			if id == flaky {
				want = 2
			}
			if c := rec.Count(id); c != want {
				t.Errorf("%s delivered %d times, want %d", id, c, want)
			}
		}
		if got := testnode.StatusCounts(t, tg.DB, tg.Table); len(got) != 1 || got[core.StatusDead] != 1 {
			t.Errorf("rows by status %v, want only the DEAD one", got)
		}
		if ev := getEvent(t, tg, poison); ev.Status != core.StatusDead {
			t.Errorf("poison event is %v, want DEAD", ev.Status)
		}
		if m := n.Metrics.Counts(); m.ColdEnqueued == 0 || m.HotEnqueued == 0 {
			t.Errorf("hot/cold enqueued = %d/%d, want both paths used", m.HotEnqueued, m.ColdEnqueued)
		}
	})
}
