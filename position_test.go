package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/position"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store/migrations"
	"github.com/outboxkit/outbox/store/postgres"
)

// flaky fails each event whose aggregate id starts with "fail" once.
type flaky struct {
	seen
	mu     sync.Mutex
	failed map[string]bool
}

func (f *flaky) listen(ctx context.Context, ev core.Event) error {
	if strings.HasPrefix(ev.AggregateID(), "fail") {
		f.mu.Lock()
		first := !f.failed[ev.ID()]
		if f.failed == nil {
			f.failed = map[string]bool{}
		}
		f.failed[ev.ID()] = true
		f.mu.Unlock()
		if first {
			return errors.New("first attempt fails")
		}
	}
	return f.record(ctx, ev)
}

func positionConfig(t *testing.T, tg testdb.Target, f *flaky) outbox.Config {
	t.Helper()
	reg := core.NewRegistry()
	if err := reg.RegisterFunc(orders, orderPlaced, f.listen); err != nil {
		t.Fatal(err)
	}
	return fast(outbox.Config{DB: tg.DB, Store: tg.Store, Registry: reg, Delivery: outbox.DeliveryPosition})
}

// waitSeen waits until s has received every id.
func waitSeen(t *testing.T, s *seen, ids ...string) {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		s.mu.Lock()
		missing := 0
		for _, id := range ids {
			if s.ids[id] == 0 {
				missing++
			}
		}
		s.mu.Unlock()
		if missing == 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%d of %d events not delivered", missing, len(ids))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPositionDelivery: in DeliveryPosition, events written through the hot
// path and without it are delivered once each and their rows stay STREAM
// (nothing written after the INSERT); a failing event goes RETRY and is
// delivered by the claim path; after a restart the new Outbox delivers what
// was written meanwhile and nothing again.
func TestPositionDelivery(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		var f flaky
		cfg := positionConfig(t, tg, &f)
		ctx := context.Background()
		ob, err := outbox.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := ob.Start(ctx); err != nil {
			t.Fatal(err)
		}
		hot := write(t, ob, 20, "hot")
		plain := writePlain(t, tg, ob, 20, "plain")
		fail := write(t, ob, 3, "fail")
		all := append(append(append([]string{}, hot...), plain...), fail...)
		waitSeen(t, &f.seen, all...)
		waitStatus(t, tg, core.StatusStream, append(hot, plain...)...)
		waitStatus(t, tg, core.StatusDone, fail...)
		for _, id := range fail {
			if ev, err := tg.Store.Get(ctx, tg.DB, id); err != nil || ev.Attempts != 1 {
				t.Fatalf("%s: %+v, %v: want one failed attempt", id, ev, err)
			}
		}
		if err := ob.Close(ctx); err != nil {
			t.Fatal(err)
		}

		// Written while no Outbox runs; a new one delivers them, and
		// nothing delivered before.
		later := writePlain(t, tg, ob, 10, "later")
		var g flaky
		ob2 := start(t, positionConfig(t, tg, &g))
		waitSeen(t, &g.seen, later...)
		more := write(t, ob2, 5, "more")
		waitSeen(t, &g.seen, more...)
		if err := ob2.Close(ctx); err != nil {
			t.Fatal(err)
		}
		for _, s := range []*seen{&f.seen, &g.seen} {
			s.mu.Lock()
			for id, n := range s.ids {
				if n != 1 {
					t.Errorf("%s delivered %d times (first Outbox: %v)", id, n, s == &f.seen)
				}
			}
			s.mu.Unlock()
		}
		if n := g.count(); n != len(later)+len(more) {
			t.Errorf("the restarted Outbox delivered %d events, want %d: it delivered again what the first one had", n, len(later)+len(more))
		}
	})
}

// TestPositionSchemaCheck: DeliveryPosition on a table without migration
// 0003 fails Start with an error naming the table and the migration.
func TestPositionSchemaCheck(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		ctx := context.Background()
		st, err := tg.NewStore(testdb.UniqueName("outbox_pos_old"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = testdb.DropTable(context.WithoutCancel(ctx), tg.DB, st) })
		m, err := migrations.New(migrations.Config{DB: tg.DB, Source: st.(migrations.Source)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = tg.DB.ExecContext(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+m.VersionTable()) })
		if _, err := m.Up(ctx, 2); err != nil {
			t.Fatal(err)
		}
		var f flaky
		cfg := positionConfig(t, tg, &f)
		cfg.Store = st
		ob, err := outbox.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = ob.Start(ctx)
		if !errors.Is(err, core.ErrSchema) || !strings.Contains(err.Error(), "outboxctl migrate up") ||
			!strings.Contains(err.Error(), "column pos") {
			t.Fatalf("Start on a table at version 2: %v", err)
		}
		_ = ob.Close(ctx)
		// DeliveryClaim runs on it.
		cfg.Delivery = outbox.DeliveryClaim
		start(t, cfg)
	})
}

// TestPositionSingleActive: with SingleActive, the active instance reads
// the position and delivers everything, its standby's writes included;
// when it closes, the standby takes the position over and goes on from it,
// delivering nothing twice.
func TestPositionSingleActive(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		if tg.Name == "sqlite" {
			t.Skip("SingleActive with DeliveryPosition: no named locks on SQLite")
		}
		var fa, fb flaky
		cfg := func(db outbox.DB, f *flaky) outbox.Config {
			c := positionConfig(t, tg, f)
			c.DB, c.Mode, c.SingleActive, c.SingleActiveInterval = db, outbox.MultiNode, true, 250*time.Millisecond
			return c
		}
		a := start(t, cfg(tg.DB, &fa))
		waitActive(t, a, true)
		b := start(t, cfg(tg.Reopen(t), &fb))

		plain := writePlain(t, tg, a, 20, "plain")
		fromB := write(t, b, 5, "from-b")
		fromA := write(t, a, 5, "from-a")
		waitSeen(t, &fa.seen, append(append(plain, fromB...), fromA...)...)
		if fb.count() != 0 {
			t.Fatalf("the standby delivered %d events", fb.count())
		}
		if err := a.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		waitActive(t, b, true)
		after := writePlain(t, tg, b, 10, "after")
		hotB := write(t, b, 5, "hot-b")
		waitSeen(t, &fb.seen, append(after, hotB...)...)
		if n := fb.count(); n != len(after)+len(hotB) {
			var extra []string
			fb.mu.Lock()
			for id := range fb.ids {
				if !slices.Contains(after, id) && !slices.Contains(hotB, id) {
					ev, _ := tg.Store.Get(context.Background(), tg.DB, id)
					extra = append(extra, ev.AggregateID())
				}
			}
			fb.mu.Unlock()
			t.Errorf("the new active instance delivered %d events, want %d; also %v", n, len(after)+len(hotB), extra)
		}
		for _, s := range []*seen{&fa.seen, &fb.seen} {
			s.mu.Lock()
			for id, n := range s.ids {
				if n != 1 {
					t.Errorf("%s delivered %d times", id, n)
				}
			}
			s.mu.Unlock()
		}
	})
}

// TestPositionOrderedBesideUnordered: with DeliveryPosition, events of an
// ordered aggregate type written in the transactions of unordered ones are
// STREAM rows like them, delivered in key order.
func TestPositionOrderedBesideUnordered(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		const shipments = core.AggregateName("Shipment") // not ordered
		var mu sync.Mutex
		var order []string
		reg := core.NewRegistry()
		record := func(_ context.Context, ev core.Event) error {
			mu.Lock()
			defer mu.Unlock()
			order = append(order, ev.ID())
			return nil
		}
		if err := reg.RegisterFunc(orders, orderPlaced, record); err != nil {
			t.Fatal(err)
		}
		if err := reg.RegisterFunc(shipments, orderPlaced, record); err != nil {
			t.Fatal(err)
		}
		ob := start(t, fast(outbox.Config{DB: tg.DB, Store: tg.Ordered, Registry: reg, Delivery: outbox.DeliveryPosition}))
		var ordered, plain []string
		for i := range 3 {
			err := ob.Do(context.Background(), func(ctx context.Context) error {
				o, err := core.NewEnvelope(core.EnvelopeSpec{Type: orderPlaced, AggregateType: orders, AggregateID: "key-1",
					JSON: []byte(`{}`)})
				if err != nil {
					return err
				}
				p, err := core.NewEnvelope(core.EnvelopeSpec{Type: orderPlaced, AggregateType: shipments,
					AggregateID: fmt.Sprint("s-", i), JSON: []byte(`{}`)})
				if err != nil {
					return err
				}
				ids, err := ob.Writer().WriteAll(ctx, []core.Envelope{o, p})
				if err != nil {
					return err
				}
				ordered, plain = append(ordered, ids[0]), append(plain, ids[1])
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		waitStatus(t, tg, core.StatusStream, append(ordered, plain...)...)
		end := time.Now().Add(deadline)
		for {
			mu.Lock()
			n := len(order)
			mu.Unlock()
			if n == len(ordered)+len(plain) {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("%d of %d events delivered", n, len(ordered)+len(plain))
			}
			time.Sleep(5 * time.Millisecond)
		}
		mu.Lock()
		defer mu.Unlock()
		var got []string
		for _, id := range order {
			if slices.Contains(ordered, id) {
				got = append(got, id)
			}
		}
		if !slices.Equal(got, ordered) {
			t.Errorf("ordered events delivered in order %v, want %v", got, ordered)
		}
		if len(order) != len(ordered)+len(plain) {
			t.Errorf("%d deliveries, want %d", len(order), len(ordered)+len(plain))
		}
	})
}

// TestPositionRollbackLeavesNoHole: a transaction that rolls back after
// its INSERT took a position (and the hot path held it) leaves a gap that
// becomes final: the persisted floor reaches the last position once the
// events after it are delivered.
func TestPositionRollbackLeavesNoHole(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		var f flaky
		ob := start(t, positionConfig(t, tg, &f))
		ctx := context.Background()
		first := write(t, ob, 3, "before")
		waitSeen(t, &f.seen, first...)
		boom := errors.New("roll back")
		err := ob.Do(ctx, func(ctx context.Context) error {
			if _, err := ob.Writer().Write(ctx, newEnv(t, "rolled-back")); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("Do: %v", err)
		}
		after := write(t, ob, 3, "after")
		after = append(after, writePlain(t, tg, ob, 3, "after-plain")...)
		waitSeen(t, &f.seen, after...)
		lg := position.LogOf(tg.Store)
		// A gap becomes final when every transaction older than it has
		// ended on the whole server, other tests' included.
		end := time.Now().Add(floorDeadline)
		for {
			st, err := lg.LoadState(ctx, tg.DB)
			if err != nil {
				t.Fatal(err)
			}
			// SQLite hands the rolled-back position to the next INSERT;
			// PostgreSQL's sequence leaves a gap: 3 + 6 or 3 + 1 + 6
			// positions.
			if st.Floor == st.Cursor && st.Cursor >= 9 && len(st.Open) == 0 {
				if st.Cursor != 9 && st.Cursor != 10 {
					t.Errorf("cursor %d, want 9 or 10", st.Cursor)
				}
				break
			}
			if time.Now().After(end) {
				t.Fatalf("persisted position %+v: the floor does not reach the cursor", st)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if f.count() != len(first)+len(after) {
			t.Errorf("%d events delivered, want %d", f.count(), len(first)+len(after))
		}
	})
}

// TestPositionStandbyLatency logs, without asserting it, how long after
// its COMMIT returned an event written on a standby reaches the active
// instance's listener: in DeliveryClaim through a plain *sql.Tx (no hot
// path: NOTIFY, then a claim), in DeliveryPosition through Do (NOTIFY,
// then a read). 300 events each, one after the other (PostgreSQL).
func TestPositionStandbyLatency(t *testing.T) {
	tg := testdb.Open(t, "postgres")
	for _, d := range []outbox.Delivery{outbox.DeliveryClaim, outbox.DeliveryPosition} {
		var mu sync.Mutex
		got := map[string]time.Time{}
		arrived := make(chan struct{}, 1)
		reg := core.NewRegistry()
		if err := reg.RegisterFunc(orders, orderPlaced, func(_ context.Context, ev core.Event) error {
			mu.Lock()
			got[ev.ID()] = time.Now()
			mu.Unlock()
			select {
			case arrived <- struct{}{}:
			default:
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		cfg := func(db outbox.DB) outbox.Config {
			return outbox.Config{DB: db, Store: tg.Store, Registry: reg, Mode: outbox.MultiNode, SingleActive: true, Delivery: d}
		}
		a := start(t, cfg(tg.DB))
		waitActive(t, a, true)
		b := start(t, cfg(tg.Reopen(t)))
		var lats []time.Duration
		for i := range 300 {
			var id string
			if d == outbox.DeliveryClaim {
				id = writePlain(t, tg, b, 1, fmt.Sprint("lat-", i))[0]
			} else {
				id = write(t, b, 1, fmt.Sprint("lat-", i))[0]
			}
			committed := time.Now()
			end := committed.Add(deadline)
			for {
				mu.Lock()
				at, ok := got[id]
				mu.Unlock()
				if ok {
					lats = append(lats, at.Sub(committed))
					break
				}
				select {
				case <-arrived:
				case <-time.After(time.Until(end)):
					t.Fatalf("%s: event %d not delivered", d, i)
				}
			}
		}
		slices.Sort(lats)
		t.Logf("%s: a standby's event reached the active instance's listener p50 %s, p99 %s, max %s after its COMMIT returned",
			d, lats[len(lats)/2], lats[len(lats)*99/100], lats[len(lats)-1])
		if err := a.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := b.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPositionWriterOnly: a WriterOnly process in position delivery writes
// STREAM rows, which the delivering process's reader delivers once each.
func TestPositionWriterOnly(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		var f flaky
		start(t, positionConfig(t, tg, &f))
		w := start(t, outbox.Config{DB: tg.DB, Store: tg.Store, Mode: outbox.WriterOnly, Delivery: outbox.DeliveryPosition})
		ids := write(t, w, 10, "writer-only")
		waitSeen(t, &f.seen, ids...)
		waitStatus(t, tg, core.StatusStream, ids...)
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, id := range ids {
			if n := f.ids[id]; n != 1 {
				t.Errorf("%s delivered %d times", id, n)
			}
		}
	})
}

// TestPositionNewRefuses: what DeliveryPosition does not cover is refused
// by New with an error matching core.ErrInvalid that names it.
func TestPositionNewRefuses(t *testing.T) {
	tg := testdb.Open(t, "sqlite")
	var f flaky
	for name, c := range map[string]struct {
		edit func(*outbox.Config)
		says string
	}{
		"MultiNode without SingleActive": {func(c *outbox.Config) { c.Mode = outbox.MultiNode }, "needs SingleActive"},
		"DeleteDelivered":                {func(c *outbox.Config) { c.Dispatch.DeleteDelivered = true }, "DeleteDelivered"},
		"Dispatch.Store":                 {func(c *outbox.Config) { c.Dispatch.Store = tg.Store }, "Dispatch.Store"},
		"unknown Delivery":               {func(c *outbox.Config) { c.Delivery = 7 }, "unknown Delivery 7"},
	} {
		cfg := positionConfig(t, tg, &f)
		c.edit(&cfg)
		_, err := outbox.New(cfg)
		if !errors.Is(err, core.ErrInvalid) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want an error matching core.ErrInvalid saying %q", name, err, c.says)
		}
	}
	pg := testdb.Open(t, "postgres")
	parted, err := postgres.New(postgres.Config{Table: testdb.UniqueName("outbox_parted"), Partitions: &postgres.Partitions{}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := positionConfig(t, pg, &f)
	cfg.Store = parted
	if _, err := outbox.New(cfg); !errors.Is(err, core.ErrInvalid) || !strings.Contains(err.Error(), "not partitioned") {
		t.Errorf("partitioned table: %v", err)
	}
}
