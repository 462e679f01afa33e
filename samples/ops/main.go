// Command ops is a scripted session of ops tooling with the dead-event
// manager (package dead), on SQLite in a temporary directory; it needs no
// server and exits by itself.
//
//	go run ./samples/ops
//
// A service delivers five events: three whose listener keeps failing until
// the downstream system is fixed, and two nobody listens to yet. All five end
// DEAD. The script then does what an operator does in an incident: list and
// count the dead events by type, fix the cause, replay one event and check
// it, replay the rest in batches, and finally purge the delivered rows. Every
// step has an outboxctl equivalent, printed alongside.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dead"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/poller"
	"github.com/outboxkit/outbox/purge"
	"github.com/outboxkit/outbox/store/sqlite"
)

const (
	Order           = core.AggregateName("Order")
	PaymentCaptured = core.EventName("PaymentCaptured")
	OrderShipped    = core.EventName("OrderShipped")
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ops:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	dir, err := os.MkdirTemp("", "outbox-ops-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "shop.db")
	db, err := sqlite.Open(path)
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := sqlite.New(sqlite.Config{})
	if err != nil {
		return err
	}
	if err := store.CreateSchema(ctx, db); err != nil {
		return err
	}

	// The service: the payment listener fails until the downstream is fixed;
	// OrderShipped has no listener yet.
	var fixed atomic.Bool
	reg := core.NewRegistry()
	err = reg.RegisterFunc(Order, PaymentCaptured, func(ctx context.Context, ev core.Event) error {
		if !fixed.Load() {
			return errors.New("ledger service: 503 unavailable")
		}
		return nil
	})
	if err != nil {
		return err
	}
	ob, err := outbox.New(outbox.Config{
		DB: db, Store: store, Registry: reg,
		Dispatch: dispatch.Config{MaxAttempts: 3, Retry: &core.ExponentialBackoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond}},
		Poller:   poller.Config{Interval: 50 * time.Millisecond},
		Purge:    &purge.Config{Retention: time.Nanosecond, KeepDead: true}, // for RunOnce below
	})
	if err != nil {
		return err
	}
	if err := ob.Start(ctx); err != nil {
		return err
	}
	defer ob.Close(context.WithoutCancel(ctx))

	err = ob.Do(ctx, func(ctx context.Context) error {
		for i, typ := range []core.EventName{PaymentCaptured, OrderShipped, PaymentCaptured, OrderShipped, PaymentCaptured} {
			env, err := core.NewEnvelope(core.EnvelopeSpec{ID: fmt.Sprintf("evt-%d", i+1), Type: typ,
				AggregateType: Order, AggregateID: fmt.Sprintf("o-%d", i+1), JSON: []byte(`{}`)})
			if err != nil {
				return err
			}
			if _, err := ob.Writer().Write(ctx, env); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}

	// The ops tool: a dead.Manager on the same table.
	m, err := dead.New(dead.Config{DB: db, Store: store, BatchSize: 2})
	if err != nil {
		return err
	}
	if err := waitFor(ctx, "5 dead events", func() (bool, error) {
		n, err := m.Count(ctx, core.DeadFilter{})
		return n == 5, err
	}); err != nil {
		return err
	}
	fmt.Fprintln(out, "1. five events died. List them, oldest first")
	fmt.Fprintln(out, "   $ outboxctl --dsn sqlite://DB dead list")
	events, err := m.List(ctx, core.DeadFilter{})
	if err != nil {
		return err
	}
	for _, ev := range events {
		fmt.Fprintf(out, "   %-6s %-16s attempts=%d  %s\n", ev.ID(), ev.Type(), ev.Attempts, ev.LastError)
	}

	fmt.Fprintln(out, "2. count them by type")
	fmt.Fprintln(out, "   $ outboxctl --dsn sqlite://DB dead count --type T")
	for _, typ := range []core.EventName{PaymentCaptured, OrderShipped} {
		n, err := m.Count(ctx, core.DeadFilter{EventType: typ.Name()})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "   %-16s %d\n", typ, n)
	}

	fmt.Fprintln(out, "3. the ledger service is back; replay one event and check it")
	fmt.Fprintln(out, "   $ outboxctl --dsn sqlite://DB dead replay evt-1 --yes")
	fixed.Store(true)
	ok, err := m.Replay(ctx, "evt-1")
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "   replayed evt-1:", ok)
	if err := waitStatus(ctx, store, db, core.StatusDone, "evt-1"); err != nil {
		return err
	}
	ev, err := store.Get(ctx, db, "evt-1")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "   evt-1 is now %s (attempts counted afresh: %d)\n", ev.Status, ev.Attempts)
	ok, err = m.Replay(ctx, "evt-1")
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "   replaying evt-1 again:", ok, "(it is not DEAD any more)")

	fmt.Fprintln(out, "4. deploy the missing OrderShipped listener, then replay all the rest, in batches of 2")
	fmt.Fprintln(out, "   $ outboxctl --dsn sqlite://DB dead replay-all --batch 2 --yes")
	if err := reg.RegisterFunc(Order, OrderShipped, func(context.Context, core.Event) error { return nil }); err != nil {
		return err
	}
	n, err := m.ReplayAll(ctx, core.DeadFilter{}, func(total int64) {
		fmt.Fprintln(out, "   progress:", total)
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "   replayed:", n)
	if err := waitStatus(ctx, store, db, core.StatusDone, "evt-2", "evt-3", "evt-4", "evt-5"); err != nil {
		return err
	}
	left, err := m.Count(ctx, core.DeadFilter{})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "   dead events left:", left)

	fmt.Fprintln(out, "5. purge delivered rows (retention shortened for the demo; the default is 7 days)")
	fmt.Fprintln(out, "   $ outboxctl --dsn sqlite://DB purge --older-than 1ns --keep-dead --yes")
	deleted, err := ob.Purger().RunOnce(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "   deleted:", deleted)
	return nil
}

// waitStatus waits until every id has status want.
func waitStatus(ctx context.Context, store *sqlite.Store, db core.DBTX, want core.Status, ids ...string) error {
	for _, id := range ids {
		err := waitFor(ctx, id+" "+want.String(), func() (bool, error) {
			ev, err := store.Get(ctx, db, id)
			return ev.Status == want, err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func waitFor(ctx context.Context, what string, cond func() (bool, error)) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
}
