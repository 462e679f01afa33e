package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dead"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
)

// The aggregate types of storetest.Ordering: Order blocks on a DEAD head,
// Ledger continues past it.
const (
	orderedBlocks    = core.AggregateName("Order")
	orderedContinues = core.AggregateName("Ledger")
)

// keyLog records the successful deliveries of ordered events per key, and
// fails events as their payload says: {"fail":"once"} fails the first
// attempt, {"fail":"always"} every attempt until healed.
type keyLog struct {
	mu       sync.Mutex
	byKey    map[string][]string // key -> ids in delivery order
	count    map[string]int      // id -> successful deliveries
	attempts map[string]int
	healed   map[string]bool
}

func (l *keyLog) listen(_ context.Context, ev core.Event) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byKey == nil {
		l.byKey, l.count, l.attempts, l.healed = map[string][]string{}, map[string]int{}, map[string]int{}, map[string]bool{}
	}
	l.attempts[ev.ID()]++
	p := string(ev.Payload())
	switch {
	case strings.Contains(p, `"once"`) && l.attempts[ev.ID()] == 1:
		return errors.New("first attempt fails")
	case strings.Contains(p, `"always"`) && !l.healed[ev.ID()]:
		return errors.New("poison")
	}
	key := ev.AggregateType() + "/" + ev.AggregateID()
	l.byKey[key] = append(l.byKey[key], ev.ID())
	l.count[ev.ID()]++
	return nil
}

func (l *keyLog) heal(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.healed == nil {
		l.healed = map[string]bool{}
	}
	l.healed[id] = true
}

// delivered returns the ids delivered for key, in order.
func (l *keyLog) delivered(key string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.byKey[key])
}

// waitKey waits until key's deliveries are want, in that order, and fails
// at the first delivery out of order.
func (l *keyLog) waitKey(t *testing.T, key string, want ...string) {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		got := l.delivered(key)
		if len(got) > len(want) || !slices.Equal(got, want[:len(got)]) {
			t.Fatalf("key %s delivered %v, want %v", key, got, want)
		}
		if len(got) == len(want) {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("key %s delivered %v, want %v", key, got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func orderedRegistry(t *testing.T, l *keyLog) *core.Registry {
	t.Helper()
	reg := core.NewRegistry()
	for _, agg := range []core.AggregateName{orderedBlocks, orderedContinues} {
		if err := reg.RegisterFunc(agg, orderPlaced, l.listen); err != nil {
			t.Fatal(err)
		}
	}
	return reg
}

func orderedPositionConfig(t *testing.T, tg testdb.Target, l *keyLog) outbox.Config {
	t.Helper()
	cfg := fast(outbox.Config{DB: tg.DB, Store: tg.Ordered, Registry: orderedRegistry(t, l), Delivery: outbox.DeliveryPosition})
	cfg.Dispatch.MaxAttempts = 3
	return cfg
}

// writeKey writes one event of key (agg, id) per transaction, with payload
// fail ("", "once", "always"), and returns their ids.
func writeKey(t *testing.T, ob *outbox.Outbox, agg core.AggregateName, id, fail string, n int) []string {
	t.Helper()
	var ids []string
	for range n {
		env, err := core.NewEnvelope(core.EnvelopeSpec{Type: orderPlaced, AggregateType: agg, AggregateID: id,
			JSON: []byte(`{"fail":"` + fail + `"}`)})
		if err != nil {
			t.Fatal(err)
		}
		err = ob.Do(context.Background(), func(ctx context.Context) error {
			got, err := ob.Writer().Write(ctx, env)
			ids = append(ids, got)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// keyRows counts the rows of the key table of tg.Ordered.
func keyRows(t *testing.T, tg testdb.Target) int {
	t.Helper()
	kt := tg.Ordered.(interface{ KeyTable() string }).KeyTable()
	if tg.Name == "mysql" {
		kt = "`" + kt + "`"
	}
	var n int
	if err := tg.DB.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM "+kt).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPositionOrdered: in DeliveryPosition, events of ordered aggregate
// types are STREAM rows and no key row is written; writers that serialise
// on a key (here a mutex per key held through the commit) have its events
// delivered in their commit order, each once, with many keys and
// concurrent writers, through the hot path's transactions and plain ones.
func TestPositionOrdered(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		var l keyLog
		ob := start(t, orderedPositionConfig(t, tg, &l))
		const keys, writers, perWriter = 12, 6, 30
		var locks [keys]sync.Mutex
		var mu sync.Mutex
		want := map[string][]string{}
		var all []string
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w := range writers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), 7))
				for range perWriter {
					k := rng.IntN(keys)
					agg := orderedBlocks
					if k%3 == 0 {
						agg = orderedContinues
					}
					id := fmt.Sprint("k-", k)
					env, err := core.NewEnvelope(core.EnvelopeSpec{Type: orderPlaced, AggregateType: agg, AggregateID: id, JSON: []byte(`{}`)})
					if err != nil {
						errs <- err
						return
					}
					locks[k].Lock()
					var got string
					if rng.IntN(4) == 0 {
						// A plain transaction: no hook, the reader finds it.
						tx, err := tg.DB.BeginTx(context.Background(), nil)
						if err == nil {
							if got, err = ob.Writer().WriteTx(context.Background(), tx, env); err == nil {
								err = tx.Commit()
							} else {
								_ = tx.Rollback()
							}
						}
						if err != nil {
							locks[k].Unlock()
							errs <- err
							return
						}
					} else if err := ob.Do(context.Background(), func(ctx context.Context) error {
						got, err = ob.Writer().Write(ctx, env)
						return err
					}); err != nil {
						locks[k].Unlock()
						errs <- err
						return
					}
					mu.Lock()
					key := string(agg) + "/" + id
					want[key] = append(want[key], got)
					all = append(all, got)
					mu.Unlock()
					locks[k].Unlock()
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for key, ids := range want {
			l.waitKey(t, key, ids...)
		}
		waitStatus(t, tg, core.StatusStream, all...)
		if n := keyRows(t, tg); n != 0 {
			t.Errorf("%d key rows written, want none", n)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		for id, n := range l.count {
			if n != 1 {
				t.Errorf("%s delivered %d times", id, n)
			}
		}
	})
}

// TestPositionOrderedFailure: a failed head keeps its key waiting in
// DeliveryPosition as in DeliveryClaim: RETRY then DONE; DEAD under
// DeadBlocks (listed as a blocked key; skip; replay), also across a
// restart, with events of the key written while no Outbox ran; DEAD under
// DeadContinues moves on. Keys without failures go on meanwhile.
func TestPositionOrderedFailure(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		ctx := context.Background()
		var l keyLog
		ob, err := outbox.New(orderedPositionConfig(t, tg, &l))
		if err != nil {
			t.Fatal(err)
		}
		if err := ob.Start(ctx); err != nil {
			t.Fatal(err)
		}
		dm, err := dead.New(dead.Config{DB: tg.DB, Store: tg.Ordered})
		if err != nil {
			t.Fatal(err)
		}
		om := ob

		// RETRY, then DONE: the key waits for its head.
		retry := writeKey(t, om, orderedBlocks, "retry", "once", 1)
		retry = append(retry, writeKey(t, om, orderedBlocks, "retry", "", 3)...)
		// DEAD under DeadContinues: the key goes on.
		cont := writeKey(t, om, orderedContinues, "cont", "always", 1)
		cont = append(cont, writeKey(t, om, orderedContinues, "cont", "", 2)...)
		// DEAD under DeadBlocks: skipped later, across a restart.
		skip := writeKey(t, om, orderedBlocks, "skip", "always", 1)
		skip = append(skip, writeKey(t, om, orderedBlocks, "skip", "", 2)...)
		// DEAD under DeadBlocks: replayed later.
		replay := writeKey(t, om, orderedBlocks, "replay", "always", 1)
		replay = append(replay, writeKey(t, om, orderedBlocks, "replay", "", 2)...)
		free := writeKey(t, om, orderedBlocks, "free", "", 3)

		l.waitKey(t, "Order/retry", retry...)
		l.waitKey(t, "Ledger/cont", cont[1:]...)
		l.waitKey(t, "Order/free", free...)
		waitStatus(t, tg, core.StatusDead, skip[0], replay[0], cont[0])
		waitStatus(t, tg, core.StatusWaiting, skip[1:]...)
		waitStatus(t, tg, core.StatusWaiting, replay[1:]...)
		blocked, err := dm.BlockedKeys(ctx, core.DeadFilter{})
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(blocked, func(a, b core.BlockedKey) int { return strings.Compare(a.AggregateID, b.AggregateID) })
		if len(blocked) != 2 || blocked[0].EventID != replay[0] || blocked[0].Waiting != 2 ||
			blocked[1].EventID != skip[0] || blocked[1].Waiting != 2 {
			t.Fatalf("blocked keys %+v, want replay and skip with 2 waiting each", blocked)
		}

		// Replay: the healed head, then the rest, in order.
		l.heal(replay[0])
		if ok, err := dm.Replay(ctx, replay[0]); err != nil || !ok {
			t.Fatalf("replay: %v, %v", ok, err)
		}
		l.waitKey(t, "Order/replay", replay...)

		// Restart with the key still blocked; more events of it are written
		// while no Outbox runs, and after.
		if err := ob.Close(ctx); err != nil {
			t.Fatal(err)
		}
		w, err := outbox.New(outbox.Config{DB: tg.DB, Store: tg.Ordered, Mode: outbox.WriterOnly, Delivery: outbox.DeliveryPosition})
		if err != nil {
			t.Fatal(err)
		}
		skip = append(skip, writeKey(t, w, orderedBlocks, "skip", "", 1)...)
		ob2 := start(t, orderedPositionConfig(t, tg, &l))
		skip = append(skip, writeKey(t, ob2, orderedBlocks, "skip", "", 1)...)
		more := writeKey(t, ob2, orderedBlocks, "free", "", 2)
		l.waitKey(t, "Order/free", append(free, more...)...)
		// The restarted reader knows the key waits: it moves the new
		// events behind the dead head.
		waitStatus(t, tg, core.StatusWaiting, skip[1:]...)
		if got := l.delivered("Order/skip"); len(got) != 0 {
			t.Fatalf("blocked key delivered %v", got)
		}
		if n, err := dm.Skip(ctx, skip[0]); err != nil || n != 1 {
			t.Fatalf("skip: %d, %v", n, err)
		}
		l.waitKey(t, "Order/skip", skip[1:]...)
		waitStatus(t, tg, core.StatusDone, skip[1:]...)

		// The key is back on position delivery once its claim-path
		// events finished: a new event is a STREAM row again.
		last := writeKey(t, ob2, orderedBlocks, "skip", "", 1)
		l.waitKey(t, "Order/skip", append(skip[1:], last...)...)
		waitStatus(t, tg, core.StatusStream, last...)

		l.mu.Lock()
		defer l.mu.Unlock()
		for id, n := range l.count {
			if n != 1 {
				t.Errorf("%s delivered %d times", id, n)
			}
		}
	})
}

// TestPositionOrderedRefusesDelayed: an ordered event with a NotBefore is
// refused in DeliveryPosition (its key's later events would not wait for
// it), and so is one without an aggregate id; nothing is written.
func TestPositionOrderedRefusesDelayed(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		var l keyLog
		ob := start(t, orderedPositionConfig(t, tg, &l))
		for _, spec := range []core.EnvelopeSpec{
			{Type: orderPlaced, AggregateType: orderedBlocks, AggregateID: "a", JSON: []byte(`{}`), NotBefore: time.Now().Add(time.Hour)},
			{Type: orderPlaced, AggregateType: orderedBlocks, JSON: []byte(`{}`)},
		} {
			env, err := core.NewEnvelope(spec)
			if err != nil {
				t.Fatal(err)
			}
			err = ob.Do(context.Background(), func(ctx context.Context) error {
				_, err := ob.Writer().Write(ctx, env)
				return err
			})
			if !errors.Is(err, core.ErrInvalid) {
				t.Errorf("write of %+v: %v, want ErrInvalid", spec, err)
			}
		}
	})
}

// TestPositionOrderedSingleActive: two SingleActive instances write events
// of the same keys; the active one delivers them in key order, the standby
// none; a key whose head died stays blocked when the active instance
// closes and the standby takes over, and the new active instance delivers
// the rest in key order once the head is skipped, nothing twice.
func TestPositionOrderedSingleActive(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		if tg.Name == "sqlite" {
			t.Skip("SingleActive with DeliveryPosition: no named locks on SQLite")
		}
		ctx := context.Background()
		var la, lb keyLog
		cfg := func(db outbox.DB, l *keyLog) outbox.Config {
			c := orderedPositionConfig(t, tg, l)
			c.DB, c.Mode, c.SingleActive, c.SingleActiveInterval = db, outbox.MultiNode, true, 250*time.Millisecond
			return c
		}
		a, err := outbox.New(cfg(tg.DB, &la))
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Start(ctx); err != nil {
			t.Fatal(err)
		}
		waitActive(t, a, true)
		b := start(t, cfg(tg.Reopen(t), &lb))

		var k1 []string
		for i := range 6 {
			w := a
			if i%2 == 1 {
				w = b
			}
			k1 = append(k1, writeKey(t, w, orderedBlocks, "k1", "", 1)...)
		}
		blocked := writeKey(t, b, orderedBlocks, "k2", "always", 1)
		blocked = append(blocked, writeKey(t, a, orderedBlocks, "k2", "", 1)...)
		blocked = append(blocked, writeKey(t, b, orderedBlocks, "k2", "", 1)...)
		la.waitKey(t, "Order/k1", k1...)
		waitStatus(t, tg, core.StatusDead, blocked[0])
		waitStatus(t, tg, core.StatusWaiting, blocked[1:]...)
		if err := a.Close(ctx); err != nil {
			t.Fatal(err)
		}
		waitActive(t, b, true)
		blocked = append(blocked, writeKey(t, b, orderedBlocks, "k2", "", 1)...)
		more := writeKey(t, b, orderedBlocks, "k1", "", 2)
		lb.waitKey(t, "Order/k1", more...)
		waitStatus(t, tg, core.StatusWaiting, blocked[1:]...)
		dm, err := dead.New(dead.Config{DB: tg.DB, Store: tg.Ordered})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := dm.Skip(ctx, blocked[0]); err != nil || n != 1 {
			t.Fatalf("skip: %d, %v", n, err)
		}
		lb.waitKey(t, "Order/k2", blocked[1:]...)
		if got := la.delivered("Order/k2"); len(got) != 0 {
			t.Errorf("the closed instance delivered %v of the blocked key", got)
		}
		for _, l := range []*keyLog{&la, &lb} {
			l.mu.Lock()
			for id, n := range l.count {
				if n != 1 {
					t.Errorf("%s delivered %d times", id, n)
				}
			}
			l.mu.Unlock()
		}
		if got := lb.delivered("Order/k1"); len(got) != len(more) {
			t.Errorf("the new active instance delivered %d events of k1, want %d", len(got), len(more))
		}
	})
}

// TestPositionOrderedDeadAtOnce: with MaxAttempts 1 a head's first failure
// is DEAD on position delivery's side: under DeadContinues the row alone is
// written DEAD and the key's next events stay STREAM rows, delivered in
// order; under DeadBlocks the key moves behind its DEAD head.
func TestPositionOrderedDeadAtOnce(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		var l keyLog
		cfg := orderedPositionConfig(t, tg, &l)
		cfg.Dispatch.MaxAttempts = 1
		ob := start(t, cfg)
		cont := writeKey(t, ob, orderedContinues, "c", "always", 1)
		cont = append(cont, writeKey(t, ob, orderedContinues, "c", "", 2)...)
		blocks := writeKey(t, ob, orderedBlocks, "b", "always", 1)
		blocks = append(blocks, writeKey(t, ob, orderedBlocks, "b", "", 2)...)
		l.waitKey(t, "Ledger/c", cont[1:]...)
		waitStatus(t, tg, core.StatusDead, cont[0], blocks[0])
		waitStatus(t, tg, core.StatusStream, cont[1:]...)
		waitStatus(t, tg, core.StatusWaiting, blocks[1:]...)
		if n := keyRows(t, tg); n != 1 {
			t.Errorf("%d key rows, want 1 (the blocked key's)", n)
		}
		if got := l.delivered("Order/b"); len(got) != 0 {
			t.Errorf("blocked key delivered %v", got)
		}
	})
}
