package reliability

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/internal/testsupport/testnode"
	"github.com/outboxkit/outbox/poller"
	"github.com/outboxkit/outbox/reliability/internal/chaos"
)

// TestLeaseRenewalSlowListener: two instances share the table, each
// listener takes three leases to return, and the dispatchers renew the
// leases of everything they hold (queued events too). Neither poller ever
// finds an expired lease, so no event is delivered twice.
//
// Claim path only: it is about leases, and position delivery gives STREAM
// events none (the reader hands them over under its own owner, written on
// no row); its retries are RETRY rows that this claim path serves, leases
// and all, so the test covers them as it is.
func TestLeaseRenewalSlowListener(t *testing.T) {
	t.Parallel()
	forEachDialect(t, testdb.Dialects, func(t *testing.T, tg testdb.Target) {
		const lease = time.Second
		count := 16
		envs, ids := chaosEnvs(t, count, nil)
		log := testnode.NewDeliveryLog()
		reg := core.NewRegistry()
		if err := reg.RegisterFunc(chaos.Aggregate, chaos.EventType, func(ctx context.Context, ev core.Event) error {
			log.Record(ev.ID())
			select {
			case <-time.After(3 * lease):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}); err != nil {
			t.Fatal(err)
		}
		opts := testnode.Options{
			Dispatch: func(c *dispatch.Config) { c.LeaseTimeout = lease },
			Poller:   func(c *poller.Config) { c.Interval = 50 * time.Millisecond },
		}
		a := startNode(t, tg.Store, tg.DB, reg, opts)
		b := startNode(t, tg.Store, tg.Reopen(t), reg, opts)
		// Half written through each instance: its hot path leases them to it,
		// and the other instance's poller keeps looking for expired leases.
		for i, env := range envs {
			n := a
			if i%2 == 1 {
				n = b
			}
			if err := n.Write(context.Background(), env); err != nil {
				t.Fatal(err)
			}
		}
		waitUntil(t, 2*time.Minute, 50*time.Millisecond, "every row DONE", func() (bool, error) {
			c, err := chaos.StatusCounts(context.Background(), tg.DB, tg.Table)
			return err == nil && c[core.StatusDone] == count, err
		})
		a.Close(t)
		b.Close(t)
		dupEvents, extra := log.Duplicates()
		t.Logf("lease renewal %s: %d events, 2 instances, listener 3x the %s lease: %d duplicated (%d extra)",
			tg.Name, count, lease, dupEvents, extra)
		if dupEvents != 0 {
			t.Errorf("%d events delivered more than once (%d extra) although their leases were renewed", dupEvents, extra)
		}
		if d := log.Distinct(); d != len(ids) {
			t.Errorf("%d of %d events delivered", d, len(ids))
		}
	})
}

// TestWriteBackFailures: every write-back (DONE, RETRY, DEAD) fails for a
// while, on each path the dispatcher can take: DONE batches, one DONE per
// event (DoneBatchSize 1), a wrapped store that exposes the inner store's
// capabilities through Unwrap (batches and renewal bypass the wrapper, its
// MarkRetry and MarkDead fail), and a wrapped store without Unwrap (no
// batches, no renewal: a custom store). With renewal the writes fail for
// twice the lease, so only retries under a renewed lease can save them;
// without it, for a third of the lease. Either way each listener runs
// exactly as often as its outcome requires (once; twice for the event
// failing once), and each row ends in its outcome's state.
//
// Claim path only: its failures are injected by wrapping the store, and a
// wrapped store's write-backs are the claim path's (DONE batches, MarkRetry,
// MarkDead, renewal). In position delivery a delivered event writes nothing,
// and its RETRY or DEAD goes through the table's position log, which no
// store wrapper sees; TestOutage and TestOutageLongerThanLease fail those
// writes in position delivery instead (one event in twenty fails once, and
// its RETRY is written while connections are cut).
func TestWriteBackFailures(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	for _, v := range []struct {
		name    string
		wrap    func(*failingStore) core.Store
		batch   int
		failFor time.Duration
	}{
		{"batched", func(f *failingStore) core.Store { return batchingStore{f} }, 0, 2 * lease},
		{"unbatched", func(f *failingStore) core.Store { return batchingStore{f} }, 1, 2 * lease},
		{"unwrap", func(f *failingStore) core.Store { return unwrappingStore{f} }, 0, 2 * lease},
		{"opaque", func(f *failingStore) core.Store { return f }, 0, lease / 3},
	} {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			forEachDialect(t, testdb.Dialects, func(t *testing.T, tg testdb.Target) {
				testWriteBackFailures(t, tg, lease, v.wrap, v.batch, v.failFor, v.name == "opaque")
			})
		})
	}
}

// testWriteBackFailures runs one path of TestWriteBackFailures. Without
// renewal (noRenewal), the lease of an event whose RETRY write keeps failing
// may expire before the write lands (under -race on 2 loaded cores, seen 2
// times in 60 runs): this instance's poller then claims it again, the new
// claim replaces the pending RETRY (see dispatch/inflight.go), and the
// second delivery succeeds: still exactly two listener calls, but the row
// ends DONE with 0 attempts, the RETRY never written.
func testWriteBackFailures(t *testing.T, tg testdb.Target, lease time.Duration, wrap func(*failingStore) core.Store, batch int, failFor time.Duration, noRenewal bool) {
	const perKind = 3 // events ending DONE, DONE after one RETRY, DEAD
	envs, ids := chaosEnvs(t, 3*perKind, nil)
	kind := func(ev core.Event) int { i, _ := strconv.Atoi(ev.AggregateID()); return i % 3 }
	log := testnode.NewDeliveryLog()
	reg := core.NewRegistry()
	if err := reg.RegisterFunc(chaos.Aggregate, chaos.EventType, func(_ context.Context, ev core.Event) error {
		n := log.Record(ev.ID())
		switch kind(ev) {
		case 1:
			if n == 1 {
				return errors.New("fails once")
			}
		case 2:
			return core.Permanent(errors.New("fails for good"))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	fs := &failingStore{Store: tg.Store, failFor: failFor, first: map[string]time.Time{}}
	st := wrap(fs)
	n := startNode(t, st, tg.DB, reg, testnode.Options{
		Dispatch: func(c *dispatch.Config) {
			c.LeaseTimeout = lease
			c.DoneBatchSize = batch
		},
		Poller: func(c *poller.Config) { c.Interval = 50 * time.Millisecond },
	})
	for _, env := range envs {
		if err := n.Write(context.Background(), env); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, 2*time.Minute, 50*time.Millisecond, "every row terminal", func() (bool, error) {
		c, err := chaos.StatusCounts(context.Background(), tg.DB, tg.Table)
		return err == nil && c[core.StatusDone] == 2*perKind && c[core.StatusDead] == perKind, err
	})
	n.Close(t)
	for i, id := range ids {
		ev, err := tg.Store.Get(context.Background(), tg.DB, id)
		if err != nil {
			t.Fatal(err)
		}
		wantCalls, wantStatus, wantAttempts := 1, core.StatusDone, 0
		switch i % 3 {
		case 1:
			wantCalls, wantAttempts = 2, 1
		case 2:
			wantStatus, wantAttempts = core.StatusDead, 1
		}
		if c := log.Count(id); c != wantCalls {
			t.Errorf("event %d: listener called %d times, want %d", i, c, wantCalls)
		}
		if i%3 == 1 && noRenewal && ev.Status == core.StatusDone && ev.Attempts == 0 {
			t.Logf("event %d: reclaimed after its lease expired while its RETRY was being written; the RETRY was superseded", i)
			continue
		}
		if ev.Status != wantStatus || ev.Attempts != wantAttempts {
			t.Errorf("event %d: %v with %d attempts, want %v with %d", i, ev.Status, ev.Attempts, wantStatus, wantAttempts)
		}
	}
	failed := fs.failures()
	t.Logf("write-back failures %s (%T, DoneBatchSize %d, failing for %s, lease %s): injected %v; listener calls as required",
		tg.Name, st, batch, failFor, lease, failed)
	if failed["retry"] == 0 || failed["dead"] == 0 {
		t.Errorf("injected failures %v: RETRY and DEAD write-backs never failed", failed)
	}
	if _, unwraps := st.(core.StoreUnwrapper); !unwraps && failed["done"] == 0 {
		t.Errorf("injected failures %v: DONE write-backs never failed", failed)
	}
}

// TestLeaseLostMidDelivery: while an event is being delivered, another owner
// takes its lease (an operator, or a claimer whose clock ran ahead). The next
// renewal finds the lease lost: the listener's context is cancelled, and the
// dispatcher writes no outcome, so the row stays as the other owner left it.
//
// Claim path only: it is about leases, and position delivery gives STREAM
// events none (the reader hands them over under its own owner, written on
// no row); its retries are RETRY rows that this claim path serves, leases
// and all, so the test covers them as it is.
func TestLeaseLostMidDelivery(t *testing.T) {
	t.Parallel()
	forEachDialect(t, testdb.Dialects, func(t *testing.T, tg testdb.Target) {
		const lease = 600 * time.Millisecond
		started := make(chan core.Event, 1)
		cancelled := make(chan error, 1)
		reg := core.NewRegistry()
		if err := reg.RegisterFunc(chaos.Aggregate, chaos.EventType, func(ctx context.Context, ev core.Event) error {
			started <- ev
			select {
			case <-ctx.Done():
				cancelled <- context.Cause(ctx)
				return ctx.Err()
			case <-time.After(time.Minute):
				return nil
			}
		}); err != nil {
			t.Fatal(err)
		}
		n := startNode(t, tg.Store, tg.DB, reg, testnode.Options{
			Dispatch: func(c *dispatch.Config) { c.LeaseTimeout = lease },
		})
		envs, _ := chaosEnvs(t, 1, nil)
		if err := n.Write(context.Background(), envs[0]); err != nil {
			t.Fatal(err)
		}
		ev := <-started
		if _, err := tg.DB.ExecContext(context.Background(),
			fmt.Sprintf("UPDATE %s SET locked_by = 'thief' WHERE event_id = '%s'", tg.Table, ev.ID())); err != nil {
			t.Fatal(err)
		}
		select {
		case cause := <-cancelled:
			if cause == nil || !strings.Contains(cause.Error(), "lease") {
				t.Errorf("listener context cancelled with cause %v, want the lost lease", cause)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the listener's context was not cancelled after its lease was lost")
		}
		n.Close(t) // every write-back is done when Close returns
		got, err := tg.Store.Get(context.Background(), tg.DB, ev.ID())
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != core.StatusNew || got.Attempts != 0 || got.LockedBy != "thief" || got.LastError != "" {
			t.Errorf("row after the lost lease: %v, %d attempts, locked by %q, last error %q; want it as the thief left it",
				got.Status, got.Attempts, got.LockedBy, got.LastError)
		}
	})
}

// failingStore fails each write-back (MarkDone, MarkDoneBatch through
// batchingStore, MarkRetry, MarkDead) of an event for failFor after its
// first attempt, then lets it through. Embedding core.Store, it hides every
// optional capability of the store it wraps, renewal included.
type failingStore struct {
	core.Store
	failFor time.Duration

	mu     sync.Mutex
	first  map[string]time.Time // by kind and id
	failed map[string]int       // by kind
}

// fail reports whether the write-back what of ids fails now.
func (s *failingStore) fail(what string, ids ...string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	fail := false
	for _, id := range ids {
		k := what + " " + id
		at, ok := s.first[k]
		if !ok {
			at = now
			s.first[k] = at
		}
		fail = fail || now.Sub(at) < s.failFor
	}
	if fail {
		if s.failed == nil {
			s.failed = map[string]int{}
		}
		s.failed[what]++
	}
	return fail
}

func (s *failingStore) failures() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.failed {
		out[k] = v
	}
	return out
}

var errInjected = errors.New("injected write-back failure")

func (s *failingStore) MarkDone(ctx context.Context, db core.DBTX, owner, id string, now time.Time) (bool, error) {
	if s.fail("done", id) {
		return false, errInjected
	}
	return s.Store.MarkDone(ctx, db, owner, id, now)
}

func (s *failingStore) MarkRetry(ctx context.Context, db core.DBTX, owner, id string, next time.Time, lastErr string) (bool, error) {
	if s.fail("retry", id) {
		return false, errInjected
	}
	return s.Store.MarkRetry(ctx, db, owner, id, next, lastErr)
}

func (s *failingStore) MarkDead(ctx context.Context, db core.DBTX, owner, id string, now time.Time, lastErr string) (bool, error) {
	if s.fail("dead", id) {
		return false, errInjected
	}
	return s.Store.MarkDead(ctx, db, owner, id, now, lastErr)
}

// batchingStore is a failingStore that also batches DONE writes (failing
// them as MarkDone does) and renews leases: a store with the capabilities
// whose writes fail.
type batchingStore struct{ *failingStore }

func (s batchingStore) MarkDoneBatch(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time) (int64, error) {
	if s.fail("done", ids...) {
		return 0, errInjected
	}
	return s.Store.(core.BatchMarker).MarkDoneBatch(ctx, db, owner, ids, now)
}

func (s batchingStore) RenewLeases(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time) ([]string, error) {
	return s.Store.(core.LeaseRenewer).RenewLeases(ctx, db, owner, ids, now)
}

// unwrappingStore is a failingStore that exposes the wrapped store through
// Unwrap, so that the dispatcher finds its capabilities (DONE batches and
// lease renewal), which then bypass the wrapper.
type unwrappingStore struct{ *failingStore }

func (s unwrappingStore) Unwrap() core.Store { return s.Store }
