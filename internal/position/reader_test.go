package position_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/position"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// handler records what the reader hands over.
type handler struct {
	owner string
	mu    sync.Mutex
	got   []string
}

func (h *handler) EnqueueCold(ev core.Event) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, ev.ID())
	return true
}
func (h *handler) ColdCapacity() int { return 1000 }
func (h *handler) Owner() string     { return h.owner }

// take returns and forgets what was handed over.
func (h *handler) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	got := h.got
	h.got = nil
	slices.Sort(got)
	return got
}

func env(t *testing.T, id string) core.Envelope {
	t.Helper()
	e, err := core.NewEnvelope(core.EnvelopeSpec{ID: id, Type: core.EventName("T"), JSON: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

type fixture struct {
	t  *testing.T
	tg testdb.Target
	lg position.Log
	r  *position.Reader
	st core.Store // the reader's store: outcomes go through it
	h  *handler
}

func newFixture(t *testing.T, tg testdb.Target) *fixture { return newFixtureOf(t, tg, "test-owner") }

func newFixtureOf(t *testing.T, tg testdb.Target, owner string) *fixture {
	t.Helper()
	lg := schemaLog(t, tg, tg.Store)
	h := &handler{owner: owner}
	r, err := position.New(position.Config{SaveEvery: time.Nanosecond, Log: lg, Store: tg.Store, DB: tg.DB, Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, tg: tg, lg: lg, r: r, st: r.Store(), h: h}
}

// schemaLog returns the position log of st, a store of tg's table, once
// its schema is in place; it skips the test on a store without one.
func schemaLog(t testing.TB, tg testdb.Target, st core.Store) position.Log {
	t.Helper()
	lg := position.LogOf(st)
	if lg == nil {
		t.Skipf("%s has no position log", tg.Name)
	}
	if err := lg.CheckSchema(context.Background(), tg.DB); err != nil {
		t.Fatal(err)
	}
	return lg
}

// insert writes ids as STREAM rows in tx (begun on the fixture's pool when
// nil, and committed).
func (f *fixture) insert(tx *sql.Tx, ids ...string) {
	f.t.Helper()
	ctx := context.Background()
	own := tx == nil
	if own {
		var err error
		if tx, err = f.tg.DB.BeginTx(ctx, nil); err != nil {
			f.t.Fatal(err)
		}
	}
	envs := make([]core.Envelope, len(ids))
	for i, id := range ids {
		envs[i] = env(f.t, id)
	}
	if err := f.st.Insert(ctx, tx, envs, core.InsertOptions{}); err != nil {
		f.t.Fatal(err)
	}
	if own {
		if err := tx.Commit(); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *fixture) cycle() []string {
	f.t.Helper()
	if _, err := f.r.Cycle(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	return f.h.take()
}

func (f *fixture) done(ids ...string) {
	f.t.Helper()
	n, err := f.st.(core.BatchMarker).MarkDoneBatch(context.Background(), f.tg.DB, f.r.Owner(), ids, time.Now())
	if err != nil || n != int64(len(ids)) {
		f.t.Fatalf("done %v: %d, %v", ids, n, err)
	}
}

func (f *fixture) wantState(floor, cursor int64) {
	f.t.Helper()
	st, err := f.lg.LoadState(context.Background(), f.tg.DB)
	if err != nil {
		f.t.Fatal(err)
	}
	if st.Floor != floor || st.Cursor != cursor {
		f.t.Fatalf("persisted floor %d cursor %d (open %v), want %d and %d", st.Floor, st.Cursor, st.Open, floor, cursor)
	}
}

// waitFloor runs cycles until the persisted floor reaches floor. A gap
// becomes final only when every older transaction on the server has ended,
// other tests' included, so the wait is generous.
func (f *fixture) waitFloor(floor int64) {
	f.t.Helper()
	end := time.Now().Add(2 * time.Minute)
	for {
		if _, err := f.r.Cycle(context.Background()); err != nil {
			f.t.Fatal(err)
		}
		st, err := f.lg.LoadState(context.Background(), f.tg.DB)
		if err != nil {
			f.t.Fatal(err)
		}
		if st.Floor >= floor {
			return
		}
		if time.Now().After(end) {
			f.t.Fatalf("floor stayed at %d (open %v), want %d", st.Floor, st.Open, floor)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func wantIDs(t *testing.T, got []string, want ...string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("handed over %v, want %v", got, want)
	}
}

// TestReaderGaps: on PostgreSQL and MariaDB, a position left by a
// transaction still open when a larger one committed is a gap: delivered
// when it commits, final when it rolls back; the floor never passes an
// unresolved position.
func TestReaderGaps(t *testing.T) {
	for _, name := range []string{"postgres", "mysql"} {
		t.Run(name, func(t *testing.T) { testReaderGaps(t, testdb.Open(t, name)) })
	}
}

func testReaderGaps(t *testing.T, tg testdb.Target) {
	f := newFixture(t, tg)
	ctx := context.Background()

	// a-1 takes position 1 and stays open; b-1 takes 2 and commits.
	txA, err := tg.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = txA.Rollback() }()
	f.insert(txA, "a-1")
	f.insert(nil, "b-1")
	wantIDs(t, f.cycle(), "b-1")
	f.done("b-1")
	f.cycle()
	f.wantState(0, 2) // position 1 is a gap that may still commit
	wantIDs(t, f.cycle())
	if err := txA.Commit(); err != nil {
		t.Fatal(err)
	}
	wantIDs(t, f.cycle(), "a-1")
	f.wantState(0, 2) // a-1 in flight
	f.done("a-1")
	f.cycle()
	f.wantState(2, 2)

	// c-1 takes 3 and rolls back after d-1 (4) committed: 3 is final
	// once c-1's transaction has ended.
	txC, err := tg.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.insert(txC, "c-1")
	f.insert(nil, "d-1")
	wantIDs(t, f.cycle(), "d-1")
	f.done("d-1")
	f.cycle()
	f.wantState(2, 4)
	if err := txC.Rollback(); err != nil {
		t.Fatal(err)
	}
	// Final once the oldest running transaction of the server started
	// after the read that left the gap: at once on a quiet server, later
	// while another client's older transaction runs.
	f.waitFloor(4)
	wantIDs(t, f.h.take())
	f.wantState(4, 4)

	// An event in flight holds the floor; a failed one resolves its
	// position with its RETRY.
	f.insert(nil, "e-1", "e-2")
	wantIDs(t, f.cycle(), "e-1", "e-2")
	f.done("e-2")
	f.cycle()
	f.wantState(4, 6)
	if ok, err := f.st.MarkRetry(ctx, tg.DB, f.r.Owner(), "e-1", time.Now(), "boom"); err != nil || !ok {
		t.Fatalf("retry: %v %v", ok, err)
	}
	f.cycle()
	f.wantState(6, 6)
	if ev, err := tg.Store.Get(ctx, tg.DB, "e-1"); err != nil || ev.Status != core.StatusRetry || ev.Attempts != 1 {
		t.Fatalf("e-1: %+v, %v", ev, err)
	}
	if ev, err := tg.Store.Get(ctx, tg.DB, "e-2"); err != nil || ev.Status != core.StatusStream {
		t.Fatalf("e-2: %+v, %v", ev, err)
	}
}

// TestReaderResumes: on every database with position delivery, a new
// reader resumes from the persisted position: what was resolved is not
// handed over again, what was in flight is.
func TestReaderResumes(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		f := newFixture(t, tg)
		f.insert(nil, "a", "b", "c")
		wantIDs(t, f.cycle(), "a", "b", "c")
		f.done("a", "c")
		f.cycle()
		f.wantState(1, 3)
		// Stats: b and c lie above the floor; the lag is 3 - 1.
		st, err := core.StoreAs[core.Inspector](tg.Store)
		if !err {
			t.Fatal("no core.Inspector")
		}
		stats, serr := st.Stats(context.Background(), tg.DB)
		if serr != nil || stats.Stream != 2 || stats.PositionLag != 2 || stats.OldestStream.IsZero() {
			t.Fatalf("stats %+v, %v: want 2 STREAM rows above the floor, a lag of 2", stats, serr)
		}
		// The purge deletes delivered STREAM rows at or below the floor only.
		if n, err := f.lg.PurgeStream(context.Background(), tg.DB, time.Now().Add(time.Hour), 100); err != nil || n != 1 {
			t.Fatalf("purge: %d, %v: want a alone", n, err)
		}
		if _, err := tg.Store.Get(context.Background(), tg.DB, "a"); !errors.Is(err, core.ErrNotFound) {
			t.Fatalf("a after the purge: %v", err)
		}

		g := newFixtureOf(t, tg, "restarted") // a restarted process
		f.insert(nil, "d")
		wantIDs(t, g.cycle(), "b", "d")
		// The first reader lost the position: its save is fenced.
		f.done("b")
		if _, err := f.r.Cycle(context.Background()); err == nil {
			t.Fatal("the first reader saved over the second")
		}
		g.done("b", "d")
		g.cycle()
		g.wantState(4, 4)
	})
}

// TestReaderHotPath: a position the hot path holds is not handed over by
// the reader; resolved ahead of the read, it is skipped; given back, it is.
func TestReaderHotPath(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		f := newFixture(t, tg)
		f.cycle() // takes the position: the hot path runs only then
		ctx := context.Background()
		leased := func(ids ...string) {
			tx, err := tg.DB.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			envs := make([]core.Envelope, len(ids))
			for i, id := range ids {
				envs[i] = env(t, id)
			}
			if err := f.st.Insert(ctx, tx, envs, core.InsertOptions{LeaseOwner: "test-owner", LeaseAt: time.Now()}); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		leased("h-1", "h-2", "h-3")
		// h-1 delivered by the hot path before the reader reads.
		if n, err := f.st.(core.BatchMarker).MarkDoneBatch(ctx, tg.DB, "test-owner", []string{"h-1"}, time.Now()); err != nil || n != 1 {
			t.Fatal(n, err)
		}
		wantIDs(t, f.cycle())
		f.wantState(1, 3) // h-2, h-3 held by the hot path
		// h-2 refused by the hot queue: released, the reader delivers it.
		if _, err := f.st.Release(ctx, tg.DB, "test-owner", []string{"h-2"}); err != nil {
			t.Fatal(err)
		}
		wantIDs(t, f.cycle(), "h-2")
		f.done("h-2")
		if ok, err := f.st.MarkDone(ctx, tg.DB, "test-owner", "h-3", time.Now()); err != nil || !ok {
			t.Fatal(ok, err)
		}
		f.cycle()
		f.wantState(3, 3)
		for _, id := range []string{"h-1", "h-2", "h-3"} {
			if ev, err := tg.Store.Get(ctx, tg.DB, id); err != nil || ev.Status != core.StatusStream {
				t.Fatalf("%s: %+v, %v: a delivered STREAM row is not written", id, ev, err)
			}
		}
	})
}
