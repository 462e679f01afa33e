// Command relaynode is the helper process of the reliability test of the
// single-active relay (reliability/takeover_test.go): a relay (an
// outbox.Outbox in MultiNode mode with SingleActive, whose listener records
// each delivery in the deliveries table, in its own transaction) or a writer
// (a WriterOnly outbox.Outbox writing events in business transactions, so
// that only the active relay delivers them). The test starts two relays and
// a writer on one database and SIGKILLs the active relay.
//
// Protocol: a relay prints "ready <owner>" once started, "active <t>" each
// time it becomes the active instance and "first <t>" at its first delivery
// (t in Unix nanoseconds, on this machine's clock, which the test shares),
// and shuts down cleanly on SIGTERM or when its stdin closes (the supervisor
// died), printing "stopped delivered=<n>". A writer prints "written=<n>
// retries=<n> ambiguous=<n>" when it is done. Errors go to stderr; the exit
// status is 0 only after a clean run.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/poller"
	"github.com/outboxkit/outbox/reliability/internal/chaos"
	"github.com/outboxkit/outbox/store"
)

type options struct {
	chaos.Node

	// relay
	activeInterval time.Duration

	// writer
	events int
	rate   float64
}

func main() {
	var o options
	o.Flags(flag.CommandLine, "relay", "postgres or mysql")
	flag.DurationVar(&o.activeInterval, "active-interval", 0, "SingleActiveInterval, 0 for the default (relay)")
	flag.IntVar(&o.events, "events", 1000, "events to write (writer)")
	flag.Float64Var(&o.rate, "rate", 200, "events per second (writer)")
	flag.Parse()

	var err error
	switch o.Role {
	case "relay":
		err = runRelay(o)
	case "writer":
		err = runWriter(o)
	default:
		err = fmt.Errorf("-role must be relay or writer, not %q", o.Role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "relaynode:", err)
		os.Exit(1)
	}
}

// printer writes the protocol's lines; fmt.Printf from two goroutines could
// interleave them.
var printMu sync.Mutex

func say(format string, args ...any) {
	printMu.Lock()
	defer printMu.Unlock()
	fmt.Printf(format+"\n", args...)
}

// open returns a pool on o's database and the store of o's table.
func open(o options) (*sql.DB, store.SchemaManager, error) {
	db, err := chaos.Open(o.Dialect, o.DSN)
	if err != nil {
		return nil, nil, err
	}
	st, err := chaos.NewStore(o.Dialect, o.Table)
	if err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return db, st, nil
}

func runRelay(o options) error {
	db, st, err := open(o)
	if err != nil {
		return err
	}
	defer db.Close()
	deliveries, err := chaos.NewDeliveries(o.Dialect, o.Deliveries)
	if err != nil {
		return err
	}
	var (
		owner     string // set before Start, which starts the listeners
		delivered atomic.Int64
		first     sync.Once
	)
	reg := core.NewRegistry()
	record := chaos.RecordingListener(db, deliveries, func() string { return owner }, o.Work,
		func() { delivered.Add(1) })
	err = reg.RegisterFunc(chaos.Aggregate, chaos.EventType, func(ctx context.Context, ev core.Event) error {
		first.Do(func() { say("first %d", time.Now().UnixNano()) })
		return record(ctx, ev)
	})
	if err != nil {
		return err
	}
	ob, err := outbox.New(outbox.Config{
		DB: db, Store: st, Registry: reg, Mode: outbox.MultiNode, Delivery: o.Delivery(),
		SingleActive: true, SingleActiveInterval: o.activeInterval,
		Dispatch: dispatch.Config{Retry: chaos.Backoff(), MaxAttempts: 1000},
		Poller:   poller.Config{LeaseTimeout: o.Lease, Interval: o.Interval},
		Logger:   o.Logger(zerolog.InfoLevel, ""),
	})
	if err != nil {
		return err
	}
	owner = ob.Dispatcher().Owner()
	ctx := context.Background()
	if err := ob.Start(ctx); err != nil {
		return err
	}
	waitForStop := chaos.CatchStop()
	say("ready %s", owner)

	// Watch for the moment this instance becomes active, to print it: the
	// Outbox reports the state, not its changes.
	watchDone := make(chan struct{})
	stopWatch := make(chan struct{})
	go func() {
		defer close(watchDone)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		was := false
		for {
			select {
			case <-stopWatch:
				return
			case <-tick.C:
			}
			if now := ob.Active(); now != was {
				if now {
					say("active %d", time.Now().UnixNano())
				}
				was = now
			}
		}
	}()

	waitForStop()
	close(stopWatch)
	<-watchDone
	err = ob.Close(ctx)
	say("stopped delivered=%d", delivered.Load())
	return err
}

func runWriter(o options) error {
	db, st, err := open(o)
	if err != nil {
		return err
	}
	defer db.Close()
	ob, err := outbox.New(outbox.Config{DB: db, Store: st, Mode: outbox.WriterOnly, Delivery: o.Delivery()})
	if err != nil {
		return err
	}
	var written, retries, ambiguous int
	start := time.Now()
	var werr error
	for i := range o.events {
		// Pace by the schedule: event i is due at start + i/rate.
		if d := time.Until(start.Add(time.Duration(float64(i) / o.rate * float64(time.Second)))); d > 0 {
			time.Sleep(d)
		}
		env, err := core.NewEnvelope(core.EnvelopeSpec{
			Type: chaos.EventType, AggregateType: chaos.Aggregate,
			AggregateID: fmt.Sprint(i), JSON: fmt.Appendf(nil, `{"n":%d}`, i),
		})
		if err != nil {
			werr = err
			break
		}
		r, amb, err := chaos.WriteWithRetry(ob.TxManager(), ob.Writer(), []core.Envelope{env})
		retries += r
		if amb {
			ambiguous++
		}
		if err != nil {
			werr = err
			break
		}
		written++
	}
	say("written=%d retries=%d ambiguous=%d", written, retries, ambiguous)
	return errors.Join(werr, ob.Close(context.Background()))
}
