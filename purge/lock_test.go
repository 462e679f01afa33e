package purge

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
)

// gatedPurger holds its first batch until release is closed, so that a test
// can act while a run is in progress (and holds the purge lock).
type gatedPurger struct {
	core.Purger
	entered, release chan struct{}
}

func (g *gatedPurger) Purge(ctx context.Context, db core.DBTX, p core.PurgeParams) (int64, error) {
	select {
	case <-g.entered:
	default:
		close(g.entered)
		<-g.release
	}
	return g.Purger.Purge(ctx, db, p)
}

// TestTwoPurgersOneRuns: with the lock, a purger whose run starts while
// another instance's run is in progress skips it and deletes nothing; once
// that run is over the lock is free again. Each purger has its own pool, as
// two processes have.
func TestTwoPurgersOneRuns(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		locker, ok := core.StoreAs[core.Locker](tg.Store)
		if !ok {
			t.Skipf("%s has no named locks: one process owns the database file", tg.Name)
		}
		seed(t, tg,
			seedRow{"old-done-1", core.StatusDone, now.Add(-10 * day)},
			seedRow{"old-done-2", core.StatusDone, now.Add(-9 * day)},
			seedRow{"new", core.StatusNew, now.Add(-10 * day)},
		)
		gate := &gatedPurger{Purger: tg.Store, entered: make(chan struct{}), release: make(chan struct{})}
		first := newPurger(t, Config{Store: gate, DB: tg.DB, Locker: locker})
		second := newPurger(t, Config{Store: tg.Store, DB: tg.Reopen(t), Locker: locker})

		done := make(chan result, 1)
		go func() {
			n, err := first.RunOnce(testCtx(t))
			done <- result{n, err}
		}()
		select {
		case <-gate.entered: // the first run holds the lock
		case r := <-done:
			t.Fatalf("first run ended before its batch: %d, %v", r.n, r.err)
		}
		n, err := second.RunOnce(testCtx(t))
		if !errors.Is(err, ErrLocked) || n != 0 {
			t.Errorf("second purger during the first run: %d, %v, want 0, ErrLocked", n, err)
		}
		checkRows(t, tg, nil, []string{"old-done-1", "old-done-2", "new"})

		close(gate.release)
		r := <-done
		if r.err != nil || r.n != 2 {
			t.Fatalf("first run: %d, %v, want 2 rows deleted", r.n, r.err)
		}
		checkRows(t, tg, []string{"old-done-1", "old-done-2"}, []string{"new"})
		if n, err := second.RunOnce(testCtx(t)); err != nil || n != 0 {
			t.Errorf("second purger after the first run: %d, %v, want 0, nil (the lock is free again)", n, err)
		}
	})
}

// TestBackgroundRunSkipsWhenLocked: a background run that finds the lock
// held is skipped without an error, and the loop runs again later.
func TestBackgroundRunSkipsWhenLocked(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		locker, ok := core.StoreAs[core.Locker](tg.Store)
		if !ok {
			t.Skipf("%s has no named locks", tg.Name)
		}
		seed(t, tg, seedRow{"old-done", core.StatusDone, now.Add(-10 * day)})
		ctx := testCtx(t)
		held, ok, err := locker.TryLock(ctx, tg.Reopen(t), LockName)
		if err != nil || !ok {
			t.Fatalf("take the purge lock: %v, %v", ok, err)
		}
		p := newPurger(t, Config{Store: tg.Store, DB: tg.DB, Locker: locker, Interval: 50 * time.Millisecond})
		runs := make(chan result, 64)
		p.afterRun = func(n int64, err error) {
			select {
			case runs <- result{n, err}:
			default:
			}
		}
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if r := <-runs; r.n != 0 || r.err != nil {
			t.Fatalf("run while another instance holds the lock: %d, %v, want 0, nil", r.n, r.err)
		}
		checkRows(t, tg, nil, []string{"old-done"})
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		for r := range runs {
			if r.err != nil {
				t.Fatalf("background run: %v", r.err)
			}
			if r.n == 1 {
				break
			}
		}
		checkRows(t, tg, []string{"old-done"}, nil)
	})
}

type result struct {
	n   int64
	err error
}

// nopLocker never locks; configurations that must refuse a Locker use it.
type nopLocker struct{}

func (nopLocker) TryLock(context.Context, core.Conner, string) (core.Lock, bool, error) {
	return nil, false, nil
}

// failingMaintainer is a store whose partition maintenance fails.
type failingMaintainer struct {
	core.Purger
	calls int
}

var errMaintain = errors.New("maintenance failed")

func (f *failingMaintainer) MaintainPartitions(context.Context, core.DBTX, time.Time, core.PurgeParams) (created, dropped []string, err error) {
	f.calls++
	return nil, nil, errMaintain
}

// TestFailedPartitionMaintenance: a store's failed partition maintenance
// is reported by the run, after the row batches, which it does not stop.
func TestFailedPartitionMaintenance(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		seed(t, tg, seedRow{"old-done", core.StatusDone, now.Add(-10 * day)}, seedRow{"new", core.StatusNew, now.Add(-10 * day)})
		st := &failingMaintainer{Purger: tg.Store}
		p := newPurger(t, Config{Store: st, DB: tg.DB})
		n, err := p.RunOnce(testCtx(t))
		if !errors.Is(err, errMaintain) || n != 1 || st.calls != 1 {
			t.Fatalf("run: %d, %v, %d maintenance calls; want 1 row deleted, the maintenance error, 1 call", n, err, st.calls)
		}
		checkRows(t, tg, []string{"old-done"}, []string{"new"})
	})
}
