package active

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const interval = 50 * time.Millisecond

// change is one state change of a named gate.
type change struct {
	gate   string
	active bool
}

// countingLocker reports each refused try of one gate on refused.
type countingLocker struct {
	core.Locker
	refused chan struct{}
}

func (c countingLocker) TryLock(ctx context.Context, db core.Conner, name string) (core.Lock, bool, error) {
	l, ok, err := c.Locker.TryLock(ctx, db, name)
	if !ok && err == nil {
		select {
		case c.refused <- struct{}{}:
		default:
		}
	}
	return l, ok, err
}

// slowLocker takes delay before each try, as a new connection to a loaded
// server can, and honours the try's deadline.
type slowLocker struct {
	core.Locker
	delay time.Duration
}

func (s slowLocker) TryLock(ctx context.Context, db core.Conner, name string) (core.Lock, bool, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	return s.Locker.TryLock(ctx, db, name)
}

// TestTryOutlastsShortInterval: a try that takes longer than a short
// Interval still takes the lock (a standby whose tries were all cut at
// Interval would never take over on a loaded machine).
func TestTryOutlastsShortInterval(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		l := slowLocker{Locker: locker(t, tg), delay: 4 * interval}
		changes := make(chan change, 4)
		g := newGate(t, "a", l, tg.DB, changes)
		if err := g.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if c := next(t, changes); c != (change{"a", true}) {
			t.Fatalf("got %+v, want a active", c)
		}
	})
}

func newGate(t *testing.T, name string, locker core.Locker, db *sql.DB, changes chan<- change) *Gate {
	t.Helper()
	g, err := New(Config{Locker: locker, DB: db, Interval: interval,
		OnChange: func(active bool) { changes <- change{name, active} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close(context.Background()) })
	return g
}

func next(t *testing.T, changes <-chan change) change {
	t.Helper()
	select {
	case c := <-changes:
		return c
	case <-time.After(30 * time.Second):
		t.Fatal("no state change within 30 s")
		return change{}
	}
}

func locker(t *testing.T, tg testdb.Target) core.Locker {
	t.Helper()
	l, ok := core.StoreAs[core.Locker](tg.Store)
	if !ok {
		t.Skipf("%s has no named locks: one process owns the database file", tg.Name)
	}
	return l
}

// startInOrder starts a, waits until it is active, and starts b.
func startInOrder(t *testing.T, a, b *Gate, changes <-chan change) {
	t.Helper()
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := next(t, changes); c != (change{"a", true}) {
		t.Fatalf("first change %+v, want a active", c)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestOneActiveAndHandOver: of two gates on separate pools, the first to
// try is active and the other stands by (it is refused while the first
// holds the lock); when the active one closes, it stands by before it
// releases the lock, and the other takes over.
func TestOneActiveAndHandOver(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		lk := locker(t, tg)
		changes := make(chan change, 16)
		refused := make(chan struct{}, 1)
		a := newGate(t, "a", lk, tg.DB, changes)
		b := newGate(t, "b", countingLocker{lk, refused}, tg.Reopen(t), changes)
		ctx := context.Background()
		startInOrder(t, a, b, changes)
		<-refused // b tried while a held the lock
		if !a.Active() || b.Active() {
			t.Fatalf("a active %v, b active %v; want only a", a.Active(), b.Active())
		}
		if err := a.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if c := next(t, changes); c != (change{"a", false}) {
			t.Fatalf("after a's Close: %+v, want a standing by first", c)
		}
		if c := next(t, changes); c != (change{"b", true}) {
			t.Fatalf("after a's Close: %+v, want b active", c)
		}
	})
}

// TestLostSessionStandsBy: when the database ends the active gate's session
// (as a broken connection or a server restart does), the gate notices at
// its next check and stands by, and an instance (this one again, or the
// other, possibly even before that check) becomes active.
func TestLostSessionStandsBy(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		lk := locker(t, tg)
		changes := make(chan change, 16)
		a := newGate(t, "a", lk, tg.DB, changes)
		b := newGate(t, "b", lk, tg.Reopen(t), changes)
		startInOrder(t, a, b, changes)
		killHolder(t, tg, tg.Table+":"+LockName)
		// b may take the freed lock before a's next check notices the loss:
		// the overlap the package comment describes.
		bActive := false
		for c := next(t, changes); c != (change{"a", false}); c = next(t, changes) {
			if c != (change{"b", true}) {
				t.Fatalf("after the kill: %+v, want a standing by (or b taking over first)", c)
			}
			bActive = true
		}
		if !bActive {
			if c := next(t, changes); !c.active {
				t.Fatalf("after a stood by: %+v, want an instance active", c)
			}
		}
	})
}

// killHolder ends the database session that holds the lock key.
func killHolder(t *testing.T, tg testdb.Target, key string) {
	t.Helper()
	ctx := context.Background()
	var err error
	switch tg.Name {
	case "postgres":
		var killed bool
		err = tg.DB.QueryRowContext(ctx, "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "+
			"AND granted AND objsubid = 1 AND classid::bigint = (hashtextextended($1, 0) >> 32) & 4294967295 "+
			"AND objid::bigint = hashtextextended($1, 0) & 4294967295", key).Scan(&killed)
	case "mysql":
		var id sql.NullInt64
		err = tg.DB.QueryRowContext(ctx, "SELECT IS_USED_LOCK(CONCAT('outbox.', SHA1(CONCAT(COALESCE(DATABASE(), ''), '.', ?))))", key).Scan(&id)
		if err == nil && !id.Valid {
			err = errors.New("nobody holds the lock")
		}
		if err == nil {
			_, err = tg.DB.ExecContext(ctx, "KILL ?", id.Int64)
		}
	}
	if err != nil {
		t.Fatalf("end the session holding %s: %v", key, err)
	}
}

func TestConfig(t *testing.T) {
	if _, err := New(Config{}); !errors.Is(err, core.ErrInvalid) {
		t.Errorf("New without Locker and DB = %v, want core.ErrInvalid", err)
	}
}

// claimCounter counts the claims that reach it.
type claimCounter struct {
	core.Store
	claims int
}

func (c *claimCounter) Claim(context.Context, core.DBTX, core.ClaimParams) ([]core.Event, []core.RowError, error) {
	c.claims++
	return nil, nil, nil
}

// TestGatedStoreClaimsOnlyWhenActive: the poller's store claims nothing
// while the gate stands by, and keeps the wrapped store's capabilities.
func TestGatedStoreClaimsOnlyWhenActive(t *testing.T) {
	inner := &claimCounter{}
	g := &Gate{}
	s := g.Store(inner)
	ctx := context.Background()
	_, _, _ = s.Claim(ctx, nil, core.ClaimParams{})
	if inner.claims != 0 {
		t.Fatalf("standing by, %d claims reached the store, want 0", inner.claims)
	}
	g.active.Store(true)
	_, _, _ = s.Claim(ctx, nil, core.ClaimParams{})
	if inner.claims != 1 {
		t.Fatalf("active, %d claims reached the store, want 1", inner.claims)
	}
	if got, ok := core.StoreAs[*claimCounter](s); !ok || got != inner {
		t.Fatalf("StoreAs through the gate: %v, %v", got, ok)
	}
}
