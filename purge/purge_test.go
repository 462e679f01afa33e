package purge

import (
	"bytes"
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

	"go.uber.org/goleak"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// now is the fixed "current time" of the purgers under test.
var now = time.Now().UTC().Truncate(time.Second)

const day = 24 * time.Hour

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// seedRow is a row to create: terminal rows get done_at = at, the others
// created_at = at.
type seedRow struct {
	id     string
	status core.Status
	at     time.Time
}

func seed(t *testing.T, tg testdb.Target, rows ...seedRow) {
	t.Helper()
	ctx := testCtx(t)
	const owner = "seeder"
	for _, r := range rows {
		created := r.at
		if r.status.Terminal() {
			created = r.at.Add(-time.Minute)
		}
		env, err := core.NewEnvelope(core.EnvelopeSpec{ID: r.id, Type: core.EventName("Seeded"),
			OccurredAt: created, JSON: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		opts := core.InsertOptions{}
		if r.status != core.StatusNew {
			opts = core.InsertOptions{LeaseOwner: owner, LeaseAt: time.Now()}
		}
		if err := tg.Store.Insert(ctx, tg.DB, []core.Envelope{env}, opts); err != nil {
			t.Fatalf("insert %s: %v", r.id, err)
		}
		var ok bool
		switch r.status {
		case core.StatusNew:
			ok = true
		case core.StatusRetry:
			ok, err = tg.Store.MarkRetry(ctx, tg.DB, owner, r.id, now.Add(time.Hour), "boom")
		case core.StatusDone:
			ok, err = tg.Store.MarkDone(ctx, tg.DB, owner, r.id, r.at)
		case core.StatusDead:
			ok, err = tg.Store.MarkDead(ctx, tg.DB, owner, r.id, r.at, "boom")
		}
		if err != nil || !ok {
			t.Fatalf("seed %s as %v: %v, %v", r.id, r.status, ok, err)
		}
	}
}

// exists reports whether the row id is still in the table.
func exists(t *testing.T, tg testdb.Target, id string) bool {
	t.Helper()
	_, err := tg.Store.Get(testCtx(t), tg.DB, id)
	if errors.Is(err, core.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return true
}

func checkRows(t *testing.T, tg testdb.Target, gone, kept []string) {
	t.Helper()
	for _, id := range gone {
		if exists(t, tg, id) {
			t.Errorf("%s should have been purged", id)
		}
	}
	for _, id := range kept {
		if !exists(t, tg, id) {
			t.Errorf("%s should have been kept", id)
		}
	}
}

// countingPurger counts the statements a purge runs.
type countingPurger struct {
	core.Purger
	calls atomic.Int64
}

func (c *countingPurger) Purge(ctx context.Context, db core.DBTX, p core.PurgeParams) (int64, error) {
	c.calls.Add(1)
	return c.Purger.Purge(ctx, db, p)
}

func newPurger(t *testing.T, cfg Config) *Purger {
	t.Helper()
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return now }
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("new purger: %v", err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

func TestRunOnceDeletesOnlyOldTerminalRows(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		seed(t, tg,
			seedRow{"done-old-1", core.StatusDone, now.Add(-8 * day)},
			seedRow{"done-old-2", core.StatusDone, now.Add(-30 * day)},
			seedRow{"done-recent", core.StatusDone, now.Add(-6 * day)},
			seedRow{"done-edge", core.StatusDone, now.Add(-7 * day).Add(time.Second)},
			seedRow{"dead-old", core.StatusDead, now.Add(-8 * day)},
			seedRow{"dead-recent", core.StatusDead, now.Add(-time.Hour)},
			seedRow{"new-old", core.StatusNew, now.Add(-90 * day)},
			seedRow{"retry-old", core.StatusRetry, now.Add(-90 * day)},
		)
		var log syncBuffer
		p := newPurger(t, Config{Store: tg.Store, DB: tg.DB, Logger: slog.New(slog.NewJSONHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		n, err := p.RunOnce(testCtx(t))
		if err != nil || n != 3 {
			t.Fatalf("RunOnce = %d, %v; want 3, nil", n, err)
		}
		checkRows(t, tg, []string{"done-old-1", "done-old-2", "dead-old"},
			[]string{"done-recent", "done-edge", "dead-recent", "new-old", "retry-old"})
		if !strings.Contains(log.String(), `"deleted":3`) {
			t.Errorf("want an info line with the total, got %q", log.String())
		}

		// Nothing left to delete: no statement beyond the first, no log line.
		log.Reset()
		n, err = p.RunOnce(testCtx(t))
		if err != nil || n != 0 {
			t.Fatalf("second RunOnce = %d, %v; want 0, nil", n, err)
		}
		if log.String() != "" {
			t.Errorf("a run that deleted nothing logged %q", log.String())
		}
	})
}

func TestRunOnceBatches(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		var rows []seedRow
		for i := range 10 {
			rows = append(rows, seedRow{fmt.Sprintf("old-%02d", i), core.StatusDone, now.Add(-8*day - time.Duration(i)*time.Minute)})
		}
		rows = append(rows, seedRow{"pending", core.StatusNew, now.Add(-20 * day)},
			seedRow{"recent", core.StatusDone, now.Add(-time.Hour)})
		seed(t, tg, rows...)
		counter := &countingPurger{Purger: tg.Store}
		p := newPurger(t, Config{Store: counter, DB: tg.DB, BatchSize: 3})
		n, err := p.RunOnce(testCtx(t))
		if err != nil || n != 10 {
			t.Fatalf("RunOnce = %d, %v; want 10, nil", n, err)
		}
		if got := counter.calls.Load(); got != 4 {
			t.Errorf("purge ran %d statements, want 4 (3+3+3+1)", got)
		}
		checkRows(t, tg, []string{"old-00", "old-09"}, []string{"pending", "recent"})
	})
}

func TestDeadRetention(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		seed(t, tg,
			seedRow{"done-8d", core.StatusDone, now.Add(-8 * day)},
			seedRow{"dead-8d", core.StatusDead, now.Add(-8 * day)},
			seedRow{"dead-40d", core.StatusDead, now.Add(-40 * day)},
			seedRow{"dead-400d", core.StatusDead, now.Add(-400 * day)},
		)
		keep := newPurger(t, Config{Store: tg.Store, DB: tg.DB, KeepDead: true})
		if n, err := keep.RunOnce(testCtx(t)); err != nil || n != 1 {
			t.Fatalf("KeepDead RunOnce = %d, %v; want 1 (the DONE row), nil", n, err)
		}
		checkRows(t, tg, []string{"done-8d"}, []string{"dead-8d", "dead-40d", "dead-400d"})

		longer := newPurger(t, Config{Store: tg.Store, DB: tg.DB, DeadRetention: 30 * day})
		if n, err := longer.RunOnce(testCtx(t)); err != nil || n != 2 {
			t.Fatalf("DeadRetention=30d RunOnce = %d, %v; want 2, nil", n, err)
		}
		checkRows(t, tg, []string{"dead-40d", "dead-400d"}, []string{"dead-8d"})
	})
}

func TestConfig(t *testing.T) {
	var db fakeDB
	store := errPurger{}
	tests := []struct {
		name string
		cfg  Config
	}{
		{"nil store", Config{DB: db}},
		{"nil db", Config{Store: store}},
		{"negative retention", Config{Store: store, DB: db, Retention: -1}},
		{"negative dead retention", Config{Store: store, DB: db, DeadRetention: -1}},
		{"keep dead with dead retention", Config{Store: store, DB: db, KeepDead: true, DeadRetention: day}},
		{"negative batch", Config{Store: store, DB: db, BatchSize: -1}},
		{"negative interval", Config{Store: store, DB: db, Interval: -1}},
		{"negative timeout", Config{Store: store, DB: db, QueryTimeout: -1}},
		{"locker on a DB without connections", Config{Store: store, DB: db, Locker: nopLocker{}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); !errors.Is(err, core.ErrInvalid) {
				t.Errorf("New = %v, want an error matching core.ErrInvalid", err)
			}
		})
	}

	p, err := New(Config{Store: store, DB: db, Retention: 2 * day})
	if err != nil {
		t.Fatal(err)
	}
	c := p.cfg
	if c.Retention != 2*day || c.DeadRetention != 2*day || c.BatchSize != DefaultBatchSize ||
		c.Interval != DefaultInterval || c.QueryTimeout != DefaultQueryTimeout || c.Now == nil {
		t.Errorf("defaults not applied: %+v", c)
	}
	p, err = New(Config{Store: store, DB: db, KeepDead: true})
	if err != nil {
		t.Fatal(err)
	}
	if p.cfg.DeadRetention != 0 || p.cfg.Retention != DefaultRetention {
		t.Errorf("KeepDead defaults: %+v", p.cfg)
	}
}

func TestJitterStaysWithinTenPercent(t *testing.T) {
	p := &Purger{cfg: Config{Interval: time.Hour}}
	for range 1000 {
		if w := p.nextWait(); w < 54*time.Minute || w > 66*time.Minute {
			t.Fatalf("wait %s outside [54m, 66m]", w)
		}
	}
}

func TestLifecycle(t *testing.T) {
	p := newPurger(t, Config{Store: errPurger{}, DB: fakeDB{}})
	ctx := testCtx(t)
	if err := p.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := p.Start(ctx); !errors.Is(err, core.ErrAlreadyStarted) {
		t.Errorf("second Start = %v, want core.ErrAlreadyStarted", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := p.Start(ctx); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Start after Close = %v, want core.ErrClosed", err)
	}
	if _, err := p.RunOnce(ctx); !errors.Is(err, core.ErrClosed) {
		t.Errorf("RunOnce after Close = %v, want core.ErrClosed", err)
	}

	unstarted := newPurger(t, Config{Store: errPurger{}, DB: fakeDB{}})
	if err := unstarted.Close(ctx); err != nil {
		t.Errorf("Close without Start: %v", err)
	}
	if err := unstarted.Start(ctx); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Start after Close = %v, want core.ErrClosed", err)
	}
}

func TestConcurrentCloses(t *testing.T) {
	p := newPurger(t, Config{Store: errPurger{}, DB: fakeDB{}})
	if err := p.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { _ = p.Close(context.Background()) })
	}
	wg.Wait()
}

func TestBackgroundLoopRunsAndCloseStopsIt(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		seed(t, tg, seedRow{"old", core.StatusDone, now.Add(-8 * day)}, seedRow{"new", core.StatusNew, now})
		p := newPurger(t, Config{Store: tg.Store, DB: tg.DB})
		runs := make(chan int64, 1)
		p.afterRun = func(n int64, err error) {
			if err != nil {
				t.Errorf("background run: %v", err)
			}
			runs <- n
		}
		if err := p.Start(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		select {
		case n := <-runs:
			if n != 1 {
				t.Errorf("first background run deleted %d, want 1", n)
			}
		case <-testCtx(t).Done():
			t.Fatal("no background run")
		}
		if err := p.Close(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.loop.Done():
		default:
			t.Fatal("Close returned before the loop exited")
		}
		checkRows(t, tg, []string{"old"}, []string{"new"})
	})
}

func TestCancellingStartContextStopsTheLoop(t *testing.T) {
	p := newPurger(t, Config{Store: errPurger{}, DB: fakeDB{}, Interval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-p.loop.Done():
	case <-testCtx(t).Done():
		t.Fatal("loop still running after Start's context was cancelled")
	}
}

func TestCloseCancelsABatchWhenItsContextIsDone(t *testing.T) {
	blocking := &blockingPurger{entered: make(chan struct{})}
	p := newPurger(t, Config{Store: blocking, DB: fakeDB{}})
	if err := p.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	<-blocking.entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !blocking.cancelled.Load() {
		t.Error("the batch in progress did not see its context cancelled")
	}
}

func TestBackgroundErrorsAreLoggedNotPropagated(t *testing.T) {
	var log syncBuffer
	p := newPurger(t, Config{Store: errPurger{}, DB: fakeDB{}, Logger: slog.New(slog.NewJSONHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	errs := make(chan error, 1)
	p.afterRun = func(_ int64, err error) { errs <- err }
	if err := p.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; !errors.Is(err, errBoom) {
		t.Errorf("run error = %v, want errBoom", err)
	}
	if err := p.Close(testCtx(t)); err != nil {
		t.Errorf("Close = %v; background errors must not surface", err)
	}
	if !strings.Contains(log.String(), "outbox purge failed") || !strings.Contains(log.String(), `"level":"ERROR"`) {
		t.Errorf("error not logged: %q", log.String())
	}
}

func TestRunOnceReturnsPartialCountOnError(t *testing.T) {
	fp := &failingAfter{n: 2, batch: 5}
	p := newPurger(t, Config{Store: fp, DB: fakeDB{}, BatchSize: 5})
	n, err := p.RunOnce(testCtx(t))
	if !errors.Is(err, errBoom) || n != 10 {
		t.Errorf("RunOnce = %d, %v; want 10 and errBoom", n, err)
	}
}

var errBoom = errors.New("boom")

// errPurger always fails; it stands in where no database is needed.
type errPurger struct{}

func (errPurger) Purge(context.Context, core.DBTX, core.PurgeParams) (int64, error) {
	return 0, errBoom
}

// failingAfter deletes full batches n times, then fails.
type failingAfter struct {
	n, batch int
	calls    int
}

func (f *failingAfter) Purge(context.Context, core.DBTX, core.PurgeParams) (int64, error) {
	f.calls++
	if f.calls > f.n {
		return 0, errBoom
	}
	return int64(f.batch), nil
}

// blockingPurger blocks its first call until its context is done.
type blockingPurger struct {
	entered   chan struct{}
	once      sync.Once
	cancelled atomic.Bool
}

func (b *blockingPurger) Purge(ctx context.Context, _ core.DBTX, _ core.PurgeParams) (int64, error) {
	b.once.Do(func() { close(b.entered) })
	<-ctx.Done()
	b.cancelled.Store(true)
	return 0, ctx.Err()
}

// fakeDB satisfies core.DBTX for tests whose purger never touches it.
type fakeDB struct{}

func (fakeDB) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	return nil, errors.New("fakeDB")
}
func (fakeDB) QueryContext(context.Context, string, ...any) (*sql.Rows, error) {
	return nil, errors.New("fakeDB")
}
func (fakeDB) QueryRowContext(context.Context, string, ...any) *sql.Row { return nil }

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}

// TestRunOnceDeletesIdleKeys: after the events, the run deletes the key rows
// of ordered keys whose events are all finished and purged, and keeps those
// of keys with an event left.
func TestRunOnceDeletesIdleKeys(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		st, ok := core.StoreAs[core.OrderedStore](tg.Ordered)
		if !ok {
			t.Fatalf("%T is not ordered", tg.Ordered)
		}
		envs := make([]core.Envelope, 0, 3)
		for _, id := range []string{"A", "B", "B"} {
			env, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("Placed"), AggregateType: core.AggregateName("Order"), AggregateID: id, JSON: []byte(`{}`)})
			if err != nil {
				t.Fatal(err)
			}
			envs = append(envs, env)
		}
		if _, err := st.InsertOrdered(testCtx(t), tg.DB, envs, core.InsertOptions{LeaseOwner: "o", LeaseAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		// A's only event and B's first are delivered; B's second is left.
		if n, _, err := st.MarkDoneOrdered(testCtx(t), tg.DB, "o", []string{envs[0].ID(), envs[1].ID()}, time.Now()); err != nil || n != 2 {
			t.Fatalf("mark done: %d, %v", n, err)
		}
		var log syncBuffer
		// Eight days on, past the default retention of seven.
		p := newPurger(t, Config{Store: tg.Ordered, DB: tg.DB, Logger: slog.New(slog.NewJSONHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Now: func() time.Time { return time.Now().Add(8 * day) }})
		if n, err := p.RunOnce(testCtx(t)); err != nil || n != 2 {
			t.Fatalf("RunOnce = %d, %v; want 2, nil", n, err)
		}
		kt := tg.Ordered.(interface{ KeyTable() string }).KeyTable()
		rows, err := tg.DB.QueryContext(testCtx(t), "SELECT aggregate_id FROM "+kt)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var keys []string
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if len(keys) != 1 || keys[0] != "B" {
			t.Errorf("key rows left %v, want [B]", keys)
		}
		if !strings.Contains(log.String(), "idle ordered keys") {
			t.Errorf("want an info line for the key rows, got %q", log.String())
		}
	})
}
