package reliability

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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

// TestLeaseExpirySlowListener: instance A's listener is slower than the
// lease, and A cannot renew leases (its store hides core.LeaseRenewer, as a
// custom store would). Instance B's poller reclaims A's events once their leases expire
// and delivers them; only then does A's listener return, half of the time
// with success and half with an error. A's write-backs must be fenced off:
// the rows keep B's outcome (DONE, no attempt charged, B's done_at). Every
// such event is delivered twice; the test reports it.
//
// Claim path only: it is about leases, and position delivery gives STREAM
// events none (the reader hands them over under its own owner, written on
// no row); its retries are RETRY rows that this claim path serves, leases
// and all, so the test covers them as it is.
func TestLeaseExpirySlowListener(t *testing.T) {
	t.Parallel()
	forEachDialect(t, testdb.Dialects, func(t *testing.T, tg testdb.Target) {
		const lease = 300 * time.Millisecond
		count := cfg.leaseEvents
		envs, ids := chaosEnvs(t, count, nil)
		byB := testnode.NewDeliveryLog()
		byA := testnode.NewDeliveryLog()

		// B: an ordinary instance with a short lease.
		regB := core.NewRegistry()
		if err := regB.RegisterFunc(chaos.Aggregate, chaos.EventType, func(_ context.Context, ev core.Event) error {
			byB.Record(ev.ID())
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		// A: its listener returns only once B's outcome is in the table,
		// then claims success for even events and failure for odd ones.
		var doneAtMu sync.Mutex
		doneAt := map[string]time.Time{} // B's done_at, as A's listener saw it
		regA := core.NewRegistry()
		if err := regA.RegisterFunc(chaos.Aggregate, chaos.EventType, func(ctx context.Context, ev core.Event) error {
			byA.Record(ev.ID())
			got, err := waitDone(ctx, tg.Store, tg.DB, ev.ID())
			if err != nil {
				t.Errorf("A's listener: %v", err)
				return err
			}
			doneAtMu.Lock()
			doneAt[ev.ID()] = got.DoneAt
			doneAtMu.Unlock()
			if i, _ := strconv.Atoi(ev.AggregateID()); i%2 == 1 {
				return errors.New("stale worker fails late")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		a := startNode(t, noRenewal{tg.Store}, tg.DB, regA, testnode.Options{
			Dispatch: func(c *dispatch.Config) { c.Workers = count }, // every event in A's listener at once
			Poller: func(c *poller.Config) {
				c.LeaseTimeout = lease
				c.Interval = time.Hour // A's poller must not renew its own leases
			},
		})
		for _, env := range envs {
			if err := a.Write(context.Background(), env); err != nil {
				t.Fatal(err)
			}
		}
		byA.WaitFor(t, 30*time.Second, "A's listener on every event", testnode.AllDelivered(ids))

		b := startNode(t, tg.Store, tg.Reopen(t), regB, testnode.Options{Poller: func(c *poller.Config) {
			c.LeaseTimeout = lease
			c.Interval = 50 * time.Millisecond
		}})
		byB.WaitFor(t, 30*time.Second, "B's deliveries", testnode.AllDelivered(ids))
		a.Close(t) // A's write-backs are done when Close returns
		b.Close(t)

		for _, id := range ids {
			ev, err := tg.Store.Get(context.Background(), tg.DB, id)
			if err != nil {
				t.Fatal(err)
			}
			doneAtMu.Lock()
			want := doneAt[id]
			doneAtMu.Unlock()
			if ev.Status != core.StatusDone || ev.Attempts != 0 || ev.LockedBy != "" || !ev.DoneAt.Equal(want) {
				t.Errorf("%s: %v attempts %d locked by %q done at %v; want B's outcome: DONE, 0 attempts, unleased, done at %v",
					id, ev.Status, ev.Attempts, ev.LockedBy, ev.DoneAt, want)
			}
		}
		if s := a.Metrics.Counts().StoreError; s != 0 {
			t.Errorf("A: %d store errors; fenced write-backs are not errors", s)
		}
		t.Logf("lease %s: %d events whose listener outlived its %s lease were reclaimed and delivered by another instance; "+
			"%d duplicate deliveries (one per event); every stale write-back (%d DONE, %d RETRY) was fenced off",
			tg.Name, count, lease, byA.Distinct()+byB.Distinct()-count, (count+1)/2, count/2)
	})
}

// TestLeaseExpirySameInstance: one instance whose listener is slower than
// the lease, and no lease renewal (countingStore hides core.LeaseRenewer).
// Its own poller finds the expired leases and claims the events again, but
// the dispatcher knows they are in flight and takes no second copy, and a
// claim made before an outcome landed but handed over after it is refused
// as stale: each event is delivered once.
//
// Claim path only: it is about leases, and position delivery gives STREAM
// events none (the reader hands them over under its own owner, written on
// no row); its retries are RETRY rows that this claim path serves, leases
// and all, so the test covers them as it is.
func TestLeaseExpirySameInstance(t *testing.T) {
	t.Parallel()
	forEachDialect(t, testdb.Dialects, func(t *testing.T, tg testdb.Target) {
		const lease = 200 * time.Millisecond
		count := cfg.leaseEvents
		envs, ids := chaosEnvs(t, count, nil)
		log := testnode.NewDeliveryLog()
		reg := core.NewRegistry()
		if err := reg.RegisterFunc(chaos.Aggregate, chaos.EventType, func(ctx context.Context, ev core.Event) error {
			log.Record(ev.ID())
			// Work for three leases; the poller polls every 50 ms meanwhile.
			select {
			case <-time.After(3 * lease):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}); err != nil {
			t.Fatal(err)
		}
		st := &countingStore{Store: tg.Store}
		n := startNode(t, st, tg.DB, reg, testnode.Options{
			Dispatch: func(c *dispatch.Config) { c.Workers = 4 },
			Poller: func(c *poller.Config) {
				c.LeaseTimeout = lease
				c.Interval = 50 * time.Millisecond
			},
		})
		for _, env := range envs {
			if err := n.Write(context.Background(), env); err != nil {
				t.Fatal(err)
			}
		}
		waitUntil(t, time.Minute, 50*time.Millisecond, "every row DONE", func() (bool, error) {
			c, err := chaos.StatusCounts(context.Background(), tg.DB, tg.Table)
			return err == nil && c[core.StatusDone] == count, err
		})
		n.Close(t)
		dupEvents, extra := log.Duplicates()
		t.Logf("lease %s, one instance: %d events, listener 3x the %s lease, its own poller reclaimed expired leases %d times; %d duplicated (%d extra)",
			tg.Name, count, lease, st.claimed.Load(), dupEvents, extra)
		if dupEvents != 0 {
			// The in-flight tracker holds every event its own poller
			// reclaims (regressions 5 and 6 of docs/reliability.md#regressions-the-suite-guards).
			t.Errorf("%d events delivered more than once (%d extra) by one instance", dupEvents, extra)
		}
		if c := testnode.StatusCounts(t, tg.DB, tg.Table); c[core.StatusDone] != count {
			t.Errorf("rows by status %v, want %d DONE", c, count)
		}
		if d := log.Distinct(); d != len(ids) {
			t.Errorf("%d of %d events delivered", d, len(ids))
		}
	})
}

// waitDone polls the table until the event is DONE, for up to 30 s.
func waitDone(ctx context.Context, st core.Store, db core.DBTX, id string) (core.Event, error) {
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		ev, err := st.Get(ctx, db, id)
		if err == nil && ev.Status == core.StatusDone {
			return ev, nil
		}
		if time.Now().After(deadline) {
			return ev, fmt.Errorf("event %s not DONE after 30s (%v, %v)", id, ev.Status, err)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ev, ctx.Err()
		}
	}
}

// noRenewal hides the optional capabilities of the store it embeds but DONE
// batches, lease renewal among them, as a custom store without
// core.LeaseRenewer would: it has no Unwrap.
type noRenewal struct{ core.Store }

// MarkDoneBatch keeps the dispatcher on its default, batching, path.
func (s noRenewal) MarkDoneBatch(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time) (int64, error) {
	return markDoneBatch(ctx, s.Store, db, owner, ids, now)
}

// countingStore counts the rows its claims return. It hides lease renewal.
type countingStore struct {
	core.Store
	claimed atomic.Int64
}

// MarkDoneBatch keeps the dispatcher on its default, batching, path.
func (s *countingStore) MarkDoneBatch(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time) (int64, error) {
	return markDoneBatch(ctx, s.Store, db, owner, ids, now)
}

func (s *countingStore) Claim(ctx context.Context, db core.DBTX, p core.ClaimParams) ([]core.Event, []core.RowError, error) {
	evs, bad, err := s.Store.Claim(ctx, db, p)
	s.claimed.Add(int64(len(evs) + len(bad)))
	return evs, bad, err
}

// holdMarkDoneStore holds each MarkDone back until the lease of that event
// has been released (by the poller), or for at most hold: it widens, to make
// it certain, the window between a worker finishing a delivery and its
// write-back.
type holdMarkDoneStore struct {
	core.Store
	hold time.Duration

	mu       sync.Mutex
	released map[string]chan struct{}
	releases atomic.Int64
}

func (s *holdMarkDoneStore) releasedCh(id string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.released[id]
	if !ok {
		ch = make(chan struct{})
		s.released[id] = ch
	}
	return ch
}

func (s *holdMarkDoneStore) Release(ctx context.Context, db core.DBTX, owner string, ids []string) (int64, error) {
	n, err := s.Store.Release(ctx, db, owner, ids)
	for _, id := range ids {
		ch := s.releasedCh(id)
		s.mu.Lock()
		select {
		case <-ch:
		default:
			close(ch)
			s.releases.Add(1)
		}
		s.mu.Unlock()
	}
	return n, err
}

func (s *holdMarkDoneStore) MarkDone(ctx context.Context, db core.DBTX, owner, id string, now time.Time) (bool, error) {
	s.waitReleased([]string{id})
	return s.Store.MarkDone(ctx, db, owner, id, now)
}

// MarkDoneBatch is there when the wrapped store batches DONE writes (the
// dispatcher's default path with the SQL stores).
func (s *holdMarkDoneStore) MarkDoneBatch(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time) (int64, error) {
	s.waitReleased(ids)
	return markDoneBatch(ctx, s.Store, db, owner, ids, now)
}

func (s *holdMarkDoneStore) waitReleased(ids []string) {
	timer := time.NewTimer(s.hold)
	defer timer.Stop()
	for _, id := range ids {
		select {
		case <-s.releasedCh(id):
		case <-timer.C:
			return
		}
	}
}

// doneBatcher is the optional batch write-back of a store; the dispatcher
// uses it when the store has it.
type doneBatcher interface {
	MarkDoneBatch(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time) (int64, error)
}

// markDoneBatch writes a DONE batch through st, one MarkDone per id when st
// has no batch write.
func markDoneBatch(ctx context.Context, st core.Store, db core.DBTX, owner string, ids []string, now time.Time) (int64, error) {
	if b, ok := st.(doneBatcher); ok {
		return b.MarkDoneBatch(ctx, db, owner, ids, now)
	}
	var n int64
	for _, id := range ids {
		ok, err := st.MarkDone(ctx, db, owner, id, now)
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// TestReclaimWhileFinishing: one instance, a delivery that outlives the
// lease, and the instance's own poller claiming the event again just as the
// worker has finished the delivery and is about to record DONE. The event
// must be delivered once.
//
// Regression 5 of docs/reliability.md#regressions-the-suite-guards: Dispatcher.enqueueCold refused an
// event whose outcome was being written, so the poller released the lease it
// had just renewed; when that Release ran before the worker's MarkDone,
// MarkDone was fenced off, the row was left NEW and unleased, and the next
// poll delivered the event a second time. Now a tracked event leased by this
// dispatcher's owner is held. The store below holds MarkDone until such a
// Release (or 2 s): under load the writer hook's release of an event this
// dispatcher's poller had already claimed did the same (bug 8).
//
// Claim path only: it is about leases, and position delivery gives STREAM
// events none (the reader hands them over under its own owner, written on
// no row); its retries are RETRY rows that this claim path serves, leases
// and all, so the test covers them as it is.
func TestReclaimWhileFinishing(t *testing.T) {
	t.Parallel()
	forEachDialect(t, testdb.Dialects, func(t *testing.T, tg testdb.Target) {
		const lease = 100 * time.Millisecond
		st := &holdMarkDoneStore{Store: tg.Store, hold: 2 * time.Second, released: map[string]chan struct{}{}}
		log := testnode.NewDeliveryLog()
		reg := core.NewRegistry()
		if err := reg.RegisterFunc(chaos.Aggregate, chaos.EventType, func(ctx context.Context, ev core.Event) error {
			log.Record(ev.ID())
			select { // the delivery outlives the lease
			case <-time.After(lease + lease/2):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}); err != nil {
			t.Fatal(err)
		}
		n := startNode(t, st, tg.DB, reg, testnode.Options{Poller: func(c *poller.Config) {
			c.LeaseTimeout = lease
			c.Interval = 20 * time.Millisecond
		}})
		env := mustEnv(t, validSpec())
		if err := n.Write(context.Background(), env); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 30*time.Second, 20*time.Millisecond, "the event DONE", func() (bool, error) {
			ev, err := tg.Store.Get(context.Background(), tg.DB, env.ID())
			return err == nil && ev.Status == core.StatusDone, err
		})
		n.Close(t)
		if c := log.Count(env.ID()); c != 1 {
			t.Errorf("delivered %d times, want 1 (leases released by the poller: %d)", c, st.releases.Load())
		}
	})
}
