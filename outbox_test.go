package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/poller"
	"github.com/outboxkit/outbox/purge"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	orders      = core.AggregateName("Order")
	orderPlaced = core.EventName("OrderPlaced")
	deadline    = 30 * time.Second
	// floorDeadline bounds a wait for the position reader's floor, which
	// waits for every older transaction on the shared server to end.
	floorDeadline = 2 * time.Minute
)

func newEnv(t testing.TB, aggID string) core.Envelope {
	t.Helper()
	env, err := core.NewEnvelope(core.EnvelopeSpec{Type: orderPlaced, AggregateType: orders, AggregateID: aggID,
		JSON: []byte(`{"order":"` + aggID + `"}`)})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// seen records the event ids a listener received.
type seen struct {
	mu  sync.Mutex
	ids map[string]int
}

func (s *seen) record(_ context.Context, ev core.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = make(map[string]int)
	}
	s.ids[ev.ID()]++
	return nil
}

func (s *seen) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

func registry(t testing.TB, s *seen) *core.Registry {
	t.Helper()
	reg := core.NewRegistry()
	if err := reg.RegisterFunc(orders, orderPlaced, s.record); err != nil {
		t.Fatal(err)
	}
	return reg
}

// fast makes retries and polls quick for tests.
func fast(cfg outbox.Config) outbox.Config {
	if cfg.Mode != outbox.WriterOnly {
		cfg.Dispatch.Retry = &core.ExponentialBackoff{Base: time.Millisecond, Max: 5 * time.Millisecond}
		cfg.Poller.Interval = 20 * time.Millisecond
	}
	return cfg
}

func start(t *testing.T, cfg outbox.Config) *outbox.Outbox {
	t.Helper()
	ob, err := outbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		if err := ob.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return ob
}

func write(t *testing.T, ob *outbox.Outbox, n int, prefix string) []string {
	t.Helper()
	ids := make([]string, 0, n)
	err := ob.Do(context.Background(), func(ctx context.Context) error {
		for i := range n {
			id, err := ob.Writer().Write(ctx, newEnv(t, fmt.Sprintf("%s-%d", prefix, i)))
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// waitStatus waits until every id has status want.
func waitStatus(t *testing.T, tg testdb.Target, want core.Status, ids ...string) {
	t.Helper()
	ctx := context.Background()
	end := time.Now().Add(deadline)
	for _, id := range ids {
		for {
			ev, err := tg.Store.Get(ctx, tg.DB, id)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Status == want {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("event %s: status %s, want %s", id, ev.Status, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	tg := testdb.SQLite(t)
	reg := core.NewRegistry()
	ok := outbox.Config{DB: tg.DB, Store: tg.Store, Registry: reg}
	tests := []struct {
		name string
		mod  func(*outbox.Config)
		want string
	}{
		{"nil DB", func(c *outbox.Config) { c.DB = nil }, "DB is nil"},
		{"typed nil DB", func(c *outbox.Config) { c.DB = (*sql.DB)(nil) }, "DB is nil"},
		{"nil Store", func(c *outbox.Config) { c.Store = nil }, "Store is nil"},
		{"nil Registry", func(c *outbox.Config) { c.Registry = nil }, "Registry is nil"},
		{"unknown mode", func(c *outbox.Config) { c.Mode = 7 }, "unknown Mode 7"},
		{"writer only with registry", func(c *outbox.Config) { c.Mode = outbox.WriterOnly }, "Registry is set in WriterOnly"},
		{"writer only with dispatch", func(c *outbox.Config) {
			c.Mode, c.Registry, c.Dispatch.Workers = outbox.WriterOnly, nil, 2
		}, "Dispatch is set in WriterOnly"},
		{"writer only with poller", func(c *outbox.Config) {
			c.Mode, c.Registry, c.Poller.Interval = outbox.WriterOnly, nil, time.Second
		}, "Poller is set in WriterOnly"},
		{"poller owner differs", func(c *outbox.Config) { c.Poller.Owner = "other" }, "Poller.Owner"},
		{"poller handler set", func(c *outbox.Config) { c.Poller.Handler = &dispatch.Dispatcher{} }, "Poller.Handler"},
		{"bad dispatch config", func(c *outbox.Config) { c.Dispatch.Workers = -1 }, "Workers is negative"},
		{"bad poller config", func(c *outbox.Config) { c.Poller.BatchSize = -1 }, "BatchSize is negative"},
		{"bad purge config", func(c *outbox.Config) { c.Purge = &purge.Config{Retention: -1} }, "Retention is negative"},
		{"single active in single node", func(c *outbox.Config) { c.SingleActive = true }, "SingleActive is set in SingleNode"},
		{"single active without named locks", func(c *outbox.Config) {
			c.Mode, c.SingleActive = outbox.MultiNode, true
		}, "SingleActive needs a store with named locks"},
		{"single active interval alone", func(c *outbox.Config) {
			c.Mode, c.SingleActiveInterval = outbox.MultiNode, time.Second
		}, "SingleActiveInterval is set without SingleActive"},
		{"negative single active interval", func(c *outbox.Config) {
			c.Mode, c.SingleActive, c.SingleActiveInterval = outbox.MultiNode, true, -1
		}, "SingleActiveInterval is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ok
			tt.mod(&cfg)
			ob, err := outbox.New(cfg)
			if !errors.Is(err, core.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %v, %v; want an ErrInvalid containing %q", ob, err, tt.want)
			}
		})
	}
}

func TestComponentsPerMode(t *testing.T) {
	t.Parallel()
	tg := testdb.SQLite(t)
	reg := core.NewRegistry()
	for _, tt := range []struct {
		cfg                        outbox.Config
		dispatcher, poller, purger bool
		wantMode                   string
	}{
		{outbox.Config{Registry: reg}, true, true, false, "SingleNode"},
		{outbox.Config{Registry: reg, Mode: outbox.MultiNode, Purge: &purge.Config{}}, true, true, true, "MultiNode"},
		{outbox.Config{Mode: outbox.WriterOnly}, false, false, false, "WriterOnly"},
		{outbox.Config{Mode: outbox.WriterOnly, Purge: &purge.Config{}}, false, false, true, "WriterOnly"},
	} {
		cfg := tt.cfg
		cfg.DB, cfg.Store = tg.DB, tg.Store
		ob, err := outbox.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := ob.Mode().String(); got != tt.wantMode {
			t.Errorf("Mode = %s, want %s", got, tt.wantMode)
		}
		if ob.Writer() == nil || ob.TxManager() == nil {
			t.Errorf("%s: no writer or tx manager", tt.wantMode)
		}
		if (ob.Dispatcher() != nil) != tt.dispatcher || (ob.Poller() != nil) != tt.poller || (ob.Purger() != nil) != tt.purger {
			t.Errorf("%s: dispatcher %v poller %v purger %v; want %v %v %v", tt.wantMode,
				ob.Dispatcher() != nil, ob.Poller() != nil, ob.Purger() != nil, tt.dispatcher, tt.poller, tt.purger)
		}
		if ob.Poller() != nil && ob.Poller().Owner() != ob.Dispatcher().Owner() {
			t.Errorf("poller owner %q != dispatcher owner %q", ob.Poller().Owner(), ob.Dispatcher().Owner())
		}
		if err := ob.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOwner(t *testing.T) {
	t.Parallel()
	tg := testdb.SQLite(t)
	reg := core.NewRegistry()
	single, err := outbox.New(outbox.Config{DB: tg.DB, Store: tg.Store, Registry: reg,
		Dispatch: dispatch.Config{Owner: "orders"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := single.Dispatcher().Owner(); got != "orders" {
		t.Errorf("SingleNode owner = %q, want orders", got)
	}
	owners := map[string]bool{}
	for range 2 {
		ob, err := outbox.New(outbox.Config{DB: tg.DB, Store: tg.Store, Registry: reg, Mode: outbox.MultiNode,
			Dispatch: dispatch.Config{Owner: strings.Repeat("o", 200)[:core.MaxOwnerLen]}})
		if err != nil {
			t.Fatal(err)
		}
		o := ob.Dispatcher().Owner()
		if len(o) > core.MaxOwnerLen || !strings.HasPrefix(o, "ooo") || ob.Poller().Owner() != o {
			t.Errorf("MultiNode owner %q (%d bytes), poller %q", o, len(o), ob.Poller().Owner())
		}
		owners[o] = true
	}
	if len(owners) != 2 {
		t.Errorf("two MultiNode outboxes share an owner: %v", owners)
	}
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	tg := testdb.SQLite(t)
	ctx := context.Background()
	ob, err := outbox.New(outbox.Config{DB: tg.DB, Store: tg.Store, Registry: core.NewRegistry(), Purge: &purge.Config{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ob.Start(ctx); !errors.Is(err, core.ErrAlreadyStarted) {
		t.Errorf("second Start: %v, want ErrAlreadyStarted", err)
	}
	if err := ob.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ob.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := ob.Start(ctx); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Start after Close: %v, want ErrClosed", err)
	}
	if _, err := ob.Poller().PollOnce(ctx); !errors.Is(err, core.ErrClosed) {
		t.Errorf("poller after Close: %v, want ErrClosed", err)
	}
	if err := ob.Dispatcher().Start(ctx); !errors.Is(err, core.ErrClosed) {
		t.Errorf("dispatcher after Close: %v, want ErrClosed", err)
	}
	if _, err := ob.Purger().RunOnce(ctx); !errors.Is(err, core.ErrClosed) {
		t.Errorf("purger after Close: %v, want ErrClosed", err)
	}
}

// A component that fails to start makes Start close the ones it started.
func TestStartFailureClosesStarted(t *testing.T) {
	t.Parallel()
	tg := testdb.SQLite(t)
	ctx := context.Background()
	ob, err := outbox.New(outbox.Config{DB: tg.DB, Store: tg.Store, Registry: core.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Poller().Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ob.Start(ctx); !errors.Is(err, core.ErrAlreadyStarted) {
		t.Fatalf("Start: %v, want ErrAlreadyStarted from the poller", err)
	}
	if err := ob.Dispatcher().Start(ctx); !errors.Is(err, core.ErrClosed) {
		t.Errorf("dispatcher after failed Start: %v, want ErrClosed", err)
	}
	if err := ob.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// Cancelling Start's context stops every component; Close then returns.
func TestStartContextCancel(t *testing.T) {
	t.Parallel()
	tg := testdb.SQLite(t)
	ctx, cancel := context.WithCancel(context.Background())
	ob, err := outbox.New(outbox.Config{DB: tg.DB, Store: tg.Store, Registry: core.NewRegistry(), Purge: &purge.Config{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := ob.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestSingleNodeDelivers(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		var s seen
		ob := start(t, fast(outbox.Config{DB: tg.DB, Store: tg.Store, Registry: registry(t, &s),
			Purge: &purge.Config{}}))
		ids := write(t, ob, 5, "o")
		waitStatus(t, tg, core.StatusDone, ids...)

		// A rolled-back transaction leaves nothing to deliver.
		errBusiness := errors.New("card declined")
		err := ob.Do(context.Background(), func(ctx context.Context) error {
			if _, err := ob.Writer().Write(ctx, newEnv(t, "rolled-back")); err != nil {
				return err
			}
			return errBusiness
		})
		if !errors.Is(err, errBusiness) {
			t.Fatalf("Do: %v", err)
		}
		if err := ob.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := s.count(); got != 5 {
			t.Errorf("listener saw %d events, want 5", got)
		}
	})
}

// Two MultiNode outboxes on one table, each with its own pool (as two
// processes have), deliver every event written through either.
func TestMultiNodeShareTable(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		var s seen
		reg := registry(t, &s)
		a := start(t, fast(outbox.Config{DB: tg.DB, Store: tg.Store, Registry: reg, Mode: outbox.MultiNode,
			Dispatch: dispatch.Config{Owner: "svc"}}))
		b := start(t, fast(outbox.Config{DB: tg.Reopen(t), Store: tg.Store, Registry: reg, Mode: outbox.MultiNode,
			Dispatch: dispatch.Config{Owner: "svc"}}))
		if a.Dispatcher().Owner() == b.Dispatcher().Owner() {
			t.Fatalf("both nodes have owner %q", a.Dispatcher().Owner())
		}
		ids := append(write(t, a, 20, "a"), write(t, b, 20, "b")...)
		// Events written with a plain *sql.Tx are not leased: either
		// node's poller claims them.
		tx, err := tg.DB.BeginTx(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			id, err := a.Writer().WriteTx(context.Background(), tx, newEnv(t, fmt.Sprintf("plain-%d", i)))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, tg, core.StatusDone, ids...)
		if got := s.count(); got != len(ids) {
			t.Errorf("listener saw %d distinct events, want %d", got, len(ids))
		}
	})
}

// A WriterOnly outbox inserts unleased rows and delivers nothing; a
// delivering outbox on the same table picks them up.
func TestWriterOnly(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		w := start(t, outbox.Config{DB: tg.DB, Store: tg.Store, Mode: outbox.WriterOnly})
		ids := write(t, w, 3, "w")
		for _, id := range ids {
			ev, err := tg.Store.Get(context.Background(), tg.DB, id)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Status != core.StatusNew || ev.LockedBy != "" {
				t.Fatalf("written event: status %s, locked by %q; want NEW, unleased", ev.Status, ev.LockedBy)
			}
		}
		var s seen
		start(t, fast(outbox.Config{DB: tg.Reopen(t), Store: tg.Store, Registry: registry(t, &s),
			Poller: poller.Config{Interval: 10 * time.Millisecond}}))
		waitStatus(t, tg, core.StatusDone, ids...)
	})
}

// Events written before Start wait in the table and are delivered once the
// outbox runs; Do works without Start.
func TestWriteBeforeStart(t *testing.T) {
	t.Parallel()
	tg := testdb.SQLite(t)
	var s seen
	ob, err := outbox.New(fast(outbox.Config{DB: tg.DB, Store: tg.Store, Registry: registry(t, &s)}))
	if err != nil {
		t.Fatal(err)
	}
	ids := write(t, ob, 3, "early")
	if err := ob.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer ob.Close(context.Background())
	waitStatus(t, tg, core.StatusDone, ids...)
}
