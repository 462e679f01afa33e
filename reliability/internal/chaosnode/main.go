// Command chaosnode is the helper process of the reliability crash test: a
// worker (a Dispatcher and a Poller whose listener records each delivery,
// with its owner and when it started and finished, in the deliveries table,
// in its own transaction) or a writer (inserts events
// in business transactions, retrying failed ones as an application would).
// The test builds it, starts three workers and one writer on one database,
// and SIGKILLs workers while they run.
//
// With -position both roles use position delivery (outbox.DeliveryPosition):
// a worker is an outbox.Outbox (MultiNode with SingleActive, so that one
// worker at a time reads the position; SingleNode on SQLite, which has no
// relay lock, where the test runs one worker), and the writer a WriterOnly
// Outbox, whose events are STREAM rows. The claim path runs a Dispatcher
// and a Poller wired by hand, as before.
//
// A worker started with -write also writes events, through a Writer wired
// to its own dispatcher's hot path (in position delivery its Outbox's
// Writer), as an application instance does: a kill
// then takes down writers, their open transactions and the events their
// commits had just queued, all at once.
//
// Protocol: a worker prints "ready <owner>" once it delivers, and shuts down
// cleanly on SIGTERM or when its stdin closes (the supervisor died), printing
// "stopped delivered=<n>". A writer prints "written=<n> retries=<n>
// ambiguous=<n>" when it is done; so does a worker's writing, once it has
// written -events events (0: no limit) or, sooner, on SIGUSR1. With
// -time-done (claim path only) a process also prints "done-write
// <ordered|held|batch> <events> <nanoseconds> <ok|failed>" after each DONE
// batch write of its dispatcher ("held": for events whose key rows it found
// held, see chaos.DoneWrite).
// Errors go to stderr; the exit status is 0 only after a clean run.
package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/poller"
	"github.com/outboxkit/outbox/reliability/internal/chaos"
	"github.com/outboxkit/outbox/store"
	"github.com/outboxkit/outbox/txctx"
)

type options struct {
	chaos.Node

	// worker
	workers, coldQueue, batch int
	maxAttempts               int
	fail                      float64 // share of listener calls that fail

	// both: the chaos aggregate type is ordered per key
	ordered bool
	// worker: also write, as a writer does (SIGUSR1 stops it)
	write bool

	// writer: with keys > 0, each event's key is one of keys at random, and
	// every event of keys "0".."poisonKeys-1" is poison (its listener always
	// fails); skew is added to each event's OccurredAt.
	keys, poisonKeys int
	skew             time.Duration
	// writer: with counters (a chaos.Counters table, keys > 0), each
	// transaction writes 1 to 3 events of one key numbered by the key's
	// counter, instead of perTx events of random keys.
	counters string
	// both: print every DONE batch write with its duration
	timeDone bool

	// writer
	events, concurrency, perTx int
	rate                       float64
}

func main() {
	var o options
	o.Flags(flag.CommandLine, "worker", "postgres, mysql or sqlite")
	flag.IntVar(&o.workers, "workers", 4, "dispatcher workers")
	flag.IntVar(&o.coldQueue, "cold", 100, "cold queue size")
	flag.IntVar(&o.batch, "batch", 50, "poller batch size")
	flag.IntVar(&o.maxAttempts, "max-attempts", 1000, "dispatcher MaxAttempts")
	flag.Float64Var(&o.fail, "fail", 0, "share of listener calls that fail (worker)")
	flag.BoolVar(&o.ordered, "ordered", false, "deliver the events in order per key")
	flag.BoolVar(&o.write, "write", false, "also write events through this worker's hot path, as a writer does, until -events (0: no limit) or SIGUSR1 (worker)")
	flag.IntVar(&o.keys, "keys", 0, "write each event to one of this many keys at random, 0 for a key per event (writer)")
	flag.IntVar(&o.poisonKeys, "poison-keys", 0, "keys whose events always fail (writer)")
	flag.DurationVar(&o.skew, "skew", 0, "added to each event's OccurredAt, as a host with a wrong clock would (writer)")
	flag.StringVar(&o.counters, "counters", "", "counters table: each transaction writes 1 to 3 events of one of -keys keys, numbered by the key's counter, which it locks (writer)")
	flag.BoolVar(&o.timeDone, "time-done", false, "print each DONE batch write and its duration (worker)")
	flag.IntVar(&o.events, "events", 1000, "events to write (writer)")
	flag.IntVar(&o.concurrency, "concurrency", 4, "concurrent writing goroutines (writer)")
	flag.IntVar(&o.perTx, "per-tx", 5, "events per business transaction (writer)")
	flag.Float64Var(&o.rate, "rate", 0, "events per second, 0 for no limit (writer)")
	flag.Parse()

	var err error
	switch {
	case o.Position && o.timeDone:
		err = errors.New("-position does not go with -time-done")
	case o.Role == "worker" && o.Position:
		err = runPositionWorker(o)
	case o.Role == "worker":
		err = runWorker(o)
	case o.Role == "writer" && o.Position:
		err = runPositionWriter(o)
	case o.Role == "writer":
		err = runWriter(o)
	default:
		err = fmt.Errorf("-role must be worker or writer, not %q", o.Role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosnode:", err)
		os.Exit(1)
	}
}

func open(o options) (*sql.DB, store.SchemaManager, error) {
	db, err := chaos.Open(o.Dialect, o.DSN)
	if err != nil {
		return nil, nil, err
	}
	if o.Dialect != "sqlite" {
		conns := o.workers + 3
		if o.Position {
			conns += 2 // the relay lock's connection and the reader's LISTEN
		}
		if o.write {
			conns += o.concurrency
		}
		db.SetMaxOpenConns(conns)
		db.SetMaxIdleConns(conns)
	}
	var ordering core.Ordering
	if o.ordered {
		ordering = core.Ordering{string(chaos.Aggregate): core.DeadBlocks}
	}
	st, err := chaos.NewOrderedStore(o.Dialect, o.Table, ordering)
	if err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	if o.timeDone {
		st = chaos.TimeDoneWrites(st, func(w chaos.DoneWrite) {
			kind, outcome := "batch", "ok"
			switch {
			case w.Held:
				kind = "held"
			case w.Ordered:
				kind = "ordered"
			}
			if w.Err != nil {
				outcome = "failed"
			}
			fmt.Printf("done-write %s %d %d %s\n", kind, w.Events, w.Took.Nanoseconds(), outcome)
		})
	}
	return db, st, nil
}

func runWorker(o options) error {
	db, st, err := open(o)
	if err != nil {
		return err
	}
	defer db.Close()
	deliveries, err := chaos.NewDeliveries(o.Dialect, o.Deliveries)
	if err != nil {
		return err
	}
	owner := core.NewOwner()
	var delivered atomic.Int64
	reg, err := registry(o, db, deliveries, func() string { return owner }, &delivered)
	if err != nil {
		return err
	}
	logger := o.Logger(zerolog.WarnLevel, owner)
	d, err := dispatch.New(dispatch.Config{
		Store: st, DB: db, Registry: reg, Owner: owner,
		Workers: o.workers, ColdQueueSize: o.coldQueue, MaxAttempts: o.maxAttempts,
		Retry: chaos.Backoff(), Logger: logger, LeaseTimeout: o.Lease,
	})
	if err != nil {
		return err
	}
	p, err := poller.New(poller.Config{
		Store: st, DB: db, Handler: d,
		Interval: o.Interval, BatchSize: o.batch, Logger: logger, // the lease is the dispatcher's
	})
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := d.Start(ctx); err != nil {
		return err
	}
	if err := p.Start(ctx); err != nil {
		_ = d.Close(ctx)
		return err
	}
	var w *core.Writer
	if o.write {
		if w, err = core.NewWriter(core.WriterConfig{Store: st, Hook: d.WriterHook(), Logger: logger}); err != nil {
			_ = p.Close(ctx)
			_ = d.Close(ctx)
			return err
		}
	}
	stopWrites := startWrites(o, db, w)
	waitForStop := chaos.CatchStop()
	fmt.Printf("ready %s\n", owner)
	waitForStop()
	errW := stopWrites()
	errP := p.Close(ctx)
	errD := d.Close(ctx)
	fmt.Printf("stopped delivered=%d\n", delivered.Load())
	return errors.Join(errW, errP, errD)
}

// registry returns the workers' registry: the recording listener, behind
// the failures of -fail and of poison events.
func registry(o options, db *sql.DB, deliveries chaos.Deliveries, owner func() string, delivered *atomic.Int64) (*core.Registry, error) {
	reg := core.NewRegistry()
	record := chaos.RecordingListener(db, deliveries, owner, o.Work, func() { delivered.Add(1) })
	var failMu sync.Mutex
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid())))
	err := reg.RegisterFunc(chaos.Aggregate, chaos.EventType, func(ctx context.Context, ev core.Event) error {
		if bytes.Contains(ev.RawPayload(), []byte(`"poison":true`)) {
			return errors.New("poison event")
		}
		failMu.Lock()
		failed := rng.Float64() < o.fail
		failMu.Unlock()
		if failed {
			return errors.New("injected listener failure")
		}
		return record(ctx, ev)
	})
	return reg, err
}

// startWrites starts a worker's writes through w (nil: -write is off) and
// returns the function that stops them, waits for them and returns their
// error. Writing stops on SIGUSR1 too.
func startWrites(o options, db *sql.DB, w *core.Writer) (stop func() error) {
	if w == nil {
		return func() error { return nil }
	}
	var (
		errW     error
		wg       sync.WaitGroup
		stopOnce sync.Once
	)
	stopCh := make(chan struct{})
	stopWrites := func() { stopOnce.Do(func() { close(stopCh) }) }
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	wg.Go(func() {
		select {
		case <-usr1:
			stopWrites()
		case <-stopCh:
		}
	})
	wg.Go(func() { errW = write(o, db, w, stopCh) })
	return func() error {
		stopWrites()
		wg.Wait()
		signal.Stop(usr1)
		return errW
	}
}

func runWriter(o options) error {
	db, st, err := open(o)
	if err != nil {
		return err
	}
	defer db.Close()
	w, err := core.NewWriter(core.WriterConfig{Store: st})
	if err != nil {
		return err
	}
	return write(o, db, w, nil)
}

// write writes o.events events (0: until stop) through w, o.perTx per
// business transaction from o.concurrency goroutines, and prints what it
// did; closing stop ends it after the transactions under way.
func write(o options, db *sql.DB, w *core.Writer, stop <-chan struct{}) error {
	txm, err := txctx.New(db, txctx.Config{})
	if err != nil {
		return err
	}
	var counters chaos.Counters
	if o.counters != "" {
		if o.keys <= 0 {
			return errors.New("-counters needs -keys")
		}
		if counters, err = chaos.NewCounters(o.Dialect, o.counters); err != nil {
			return err
		}
	}
	var (
		next                        atomic.Int64 // events handed out so far
		written, retries, ambiguous atomic.Int64
		wg                          sync.WaitGroup
		start                       = time.Now()
		errMu                       sync.Mutex
		firstErr                    error
	)
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	for g := range o.concurrency {
		keyRNG := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid()*64+g)))
		wg.Go(func() {
			for {
				perTx := o.perTx
				var key string
				var poison bool
				if o.counters != "" {
					// One key, and mostly one event: 2 or 3 in a fifth of
					// the transactions.
					k := keyRNG.IntN(o.keys)
					key, poison, perTx = fmt.Sprint(k), k < o.poisonKeys, 1
					if x := keyRNG.Float64(); x < 0.1 {
						perTx = 2
					} else if x < 0.2 {
						perTx = 3
					}
				}
				n := int(next.Add(int64(perTx)))
				first := n - perTx
				if stopped() || o.events > 0 && first >= o.events {
					return
				}
				count := perTx
				if o.events > 0 {
					count = min(count, o.events-first)
				}
				if o.rate > 0 {
					// Pace by the schedule: event i is due at start + i/rate.
					due := start.Add(time.Duration(float64(first) / o.rate * float64(time.Second)))
					if d := time.Until(due); d > 0 {
						time.Sleep(d)
					}
				}
				if o.counters != "" {
					r, err := chaos.WriteCounted(txm, w, counters, key, count, o.skew, poison)
					retries.Add(int64(r))
					if err != nil {
						errMu.Lock()
						firstErr = cmpErr(firstErr, err)
						errMu.Unlock()
						return
					}
					written.Add(int64(count))
					continue
				}
				envs := make([]core.Envelope, count)
				for i := range envs {
					key, poison := first+i, false
					if o.keys > 0 {
						key = keyRNG.IntN(o.keys)
						poison = key < o.poisonKeys
					}
					env, err := core.NewEnvelope(core.EnvelopeSpec{
						Type: chaos.EventType, AggregateType: chaos.Aggregate,
						AggregateID: fmt.Sprint(key),
						OccurredAt:  time.Now().Add(o.skew),
						JSON:        fmt.Appendf(nil, `{"n":%d,"poison":%t}`, first+i, poison),
					})
					if err != nil {
						errMu.Lock()
						firstErr = cmpErr(firstErr, err)
						errMu.Unlock()
						return
					}
					envs[i] = env
				}
				r, amb, err := chaos.WriteWithRetry(txm, w, envs)
				retries.Add(int64(r))
				if amb {
					ambiguous.Add(1)
				}
				if err != nil {
					errMu.Lock()
					firstErr = cmpErr(firstErr, err)
					errMu.Unlock()
					return
				}
				written.Add(int64(count))
			}
		})
	}
	wg.Wait()
	fmt.Printf("written=%d retries=%d ambiguous=%d\n", written.Load(), retries.Load(), ambiguous.Load())
	return firstErr
}

func cmpErr(old, err error) error {
	if old != nil {
		return old
	}
	return err
}

// runPositionWorker is runWorker in position delivery: an outbox.Outbox
// with the same listener and settings.
func runPositionWorker(o options) error {
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
	)
	reg, err := registry(o, db, deliveries, func() string { return owner }, &delivered)
	if err != nil {
		return err
	}
	logger := o.Logger(zerolog.WarnLevel, "")
	cfg := outbox.Config{DB: db, Store: st, Registry: reg, Delivery: outbox.DeliveryPosition,
		Mode: outbox.MultiNode, SingleActive: true,
		Dispatch: dispatch.Config{Workers: o.workers, ColdQueueSize: o.coldQueue, MaxAttempts: o.maxAttempts,
			Retry: chaos.Backoff(), LeaseTimeout: o.Lease},
		Poller: poller.Config{Interval: o.Interval, BatchSize: o.batch},
		Logger: logger,
	}
	if o.Dialect == "sqlite" {
		// No relay lock: one process reads the position.
		cfg.Mode, cfg.SingleActive = outbox.SingleNode, false
	}
	ob, err := outbox.New(cfg)
	if err != nil {
		return err
	}
	owner = ob.Dispatcher().Owner()
	ctx := context.Background()
	if err := ob.Start(ctx); err != nil {
		return err
	}
	var w *core.Writer
	if o.write {
		w = ob.Writer()
	}
	stopWrites := startWrites(o, db, w)
	waitForStop := chaos.CatchStop()
	fmt.Printf("ready %s\n", owner)
	waitForStop()
	errW := stopWrites()
	err = ob.Close(ctx)
	fmt.Printf("stopped delivered=%d\n", delivered.Load())
	return errors.Join(errW, err)
}

// runPositionWriter is runWriter in position delivery: the events are
// written as STREAM rows by a WriterOnly Outbox.
func runPositionWriter(o options) error {
	db, st, err := open(o)
	if err != nil {
		return err
	}
	defer db.Close()
	ob, err := outbox.New(outbox.Config{DB: db, Store: st, Mode: outbox.WriterOnly, Delivery: outbox.DeliveryPosition})
	if err != nil {
		return err
	}
	return errors.Join(write(o, db, ob.Writer(), nil), ob.Close(context.Background()))
}
