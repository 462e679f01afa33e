// Command brokerbench measures the "outbox to broker" workload: how fast a
// backlog of pending events drains through a publisher into NATS JetStream
// and RabbitMQ, against a raw asynchronous publish loop to the same broker
// in the same run, and the commit-to-acknowledgement latency of events
// written live. It is a module of its own so that the root module, and its
// bench, need no broker client.
//
//	go run ./bench/brokerbench                 # both brokers, SQLite outbox
//	go run ./bench/brokerbench -broker jetstream -db postgres -n 50000
//	go run ./bench/brokerbench -defaults       # the outbox as a user who sets nothing runs it
//
// -defaults leaves the dispatcher and poller configuration zero, so that
// the publisher's InFlight (core.AsyncListener) sizes the workers; run it
// alternately with -workers 256 (the tuned figures) to compare.
//
// The raw loop publishes the very messages the publisher would send for the
// same events (-raw-bare: payload and dedupe id only). The outbox drains run
// in each delivery of -delivery (default both: outbox.DeliveryClaim, and
// outbox.DeliveryPosition, whose backlog is STREAM rows read by position),
// in turn within every round, each beside the same raw loop. A second row runs the
// publisher alone, without an outbox: as many goroutines as -workers call
// its Handle, which separates the publisher's cost from the outbox's. Beside the rates, the
// bench reports the CPU time per message of its own process and of the
// broker's server process (found by name on this machine, or -nats-pid,
// -rabbitmq-pid), and the poller's claims, so that a run on a loaded
// machine still says where the time goes.
//
// Each run makes its own stream, exchange, queue and outbox table, with
// unique names, and deletes them at the end. Kafka is not measured: no
// Kafka server can run on the project's machines (its tests use kfake).
package main

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/broker"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/internal/procstat"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/poller"
	"github.com/outboxkit/outbox/store/postgres"
	"github.com/outboxkit/outbox/store/sqlite"
	"github.com/outboxkit/outbox/txctx"
)

var (
	flagBroker = flag.String("broker", "jetstream,rabbitmq", "brokers to measure, comma-separated")
	flagDB     = flag.String("db", "sqlite", "outbox database: sqlite or postgres (OUTBOX_POSTGRES_DSN)")
	// A drain starts an outbox on a new pool: its first connections, the
	// first statements of their backends and the workers' first stacks
	// cost the same whatever the backlog, about a fifth of the CPU of a
	// 20,000-event drain (docs/benchmarks.md#short-drains), and a
	// small share of a 100,000-event one.
	flagN       = flag.Int("n", 100000, "events in the backlog and messages in the raw loop")
	flagLive    = flag.Int("live", 2000, "events written live for the latency figures")
	flagWorkers = flag.Int("workers", 128, "dispatcher workers (publishes in flight)")
	flagWindow  = flag.Int("window", 4096, "the raw loop's publishes awaiting their ack")
	flagRounds  = flag.Int("rounds", 2, "raw and outbox runs, alternated")
	flagBatch   = flag.Int("poll-batch", 500, "poller batch size")
	flagProfile = flag.String("cpuprofile", "", "write a CPU profile of the outbox drains to this file, and of the no-op drains to this file with .noop appended "+
		"(position delivery's: .position and .position.noop)")
	flagMemProf  = flag.String("memprofile", "", "write the process's allocation profile to this file at the end (with -delivery position, focus on dispatch and position to see a drain's)")
	flagRawBare  = flag.Bool("raw-bare", false, "raw loop: publish bare messages (payload and dedupe id only) instead of the publisher's own messages")
	flagNATSPID  = flag.Int("nats-pid", 0, "pid of the nats-server whose CPU time to report; 0 finds the only process named nats-server, -1 reports none")
	flagAMQPPID  = flag.Int("rabbitmq-pid", 0, "pid of the RabbitMQ server (beam.smp) whose CPU time to report; 0 finds the only one, -1 reports none")
	flagDelivery = flag.String("delivery", "claim,position", "the outbox drains to run, each beside the raw loop in every round: "+
		"claim (outbox.DeliveryClaim: claims and DONE writes) and position (outbox.DeliveryPosition: the backlog written as STREAM rows "+
		"and read by position, no write per delivered event), comma-separated")
	flagBatchL  = flag.Bool("batch", true, "hand a publisher that takes batches (core.BatchListener) the queued events together")
	flagDefault = flag.Bool("defaults", false, "run the outbox at the library's defaults, as a user who sets nothing: no Workers, queue "+
		"sizes or poller settings (-workers and -poll-batch are ignored); the publisher's InFlight sizes the workers")
)

// workers is the number of concurrent calls of the publisher: -workers, or
// with -defaults its InFlight (the dispatcher's own choice, which takes
// batches into account, is in each drain's row).
func workers(l core.Listener) int {
	if !*flagDefault {
		return *flagWorkers
	}
	if a, ok := l.(core.AsyncListener); ok {
		return max(dispatch.DefaultWorkers, a.InFlight())
	}
	return dispatch.DefaultWorkers
}

// asyncFunc is a listener function that keeps the InFlight of the
// publisher it wraps, so that the dispatcher sizes its workers for it.
type asyncFunc struct {
	core.ListenerFunc
	n int
}

func (a asyncFunc) InFlight() int { return a.n }

// batchFunc is asyncFunc for a publisher that takes batches
// (core.BatchListener): it calls each for every event delivered.
type batchFunc struct {
	asyncFunc
	b        core.BatchListener
	each     func(core.Event)
	progress chan struct{}

	calls, events atomic.Int64
}

func (f *batchFunc) MaxBatch() int { return f.b.MaxBatch() }

func (f *batchFunc) HandleBatch(ctx context.Context, evs []core.Event) []error {
	f.calls.Add(1)
	f.events.Add(int64(len(evs)))
	errs := f.b.HandleBatch(ctx, evs)
	for i, ev := range evs {
		if errs[i] == nil {
			f.each(ev)
		}
	}
	select {
	case f.progress <- struct{}{}:
	default:
	}
	return errs
}

// target is one broker: a raw loop, and a listener that publishes to it.
type target interface {
	Name() string
	// Raw publishes evs as fast as the client allows, at most window
	// awaiting their acknowledgement, and waits for every acknowledgement.
	// With bare, each message carries the payload and the dedupe id only;
	// otherwise it is the very message the publisher sends for the event.
	Raw(ctx context.Context, evs []core.Event, window int, bare bool) error
	Listener() core.Listener
	ServerPID() int                         // the broker's server process on this machine, 0 if unknown
	Count(ctx context.Context) (int, error) // messages the broker holds for this run
	Reset(ctx context.Context) error        // empty what the last run left
	Close()
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	ctx := context.Background()
	payload := []byte(`{"order_id":"o-123456","customer":"c-98765","total_cents":125000,"currency":"EUR","items":[{"sku":"A-1","qty":2},{"sku":"B-7","qty":1}],"note":"benchmark payload of about two hundred bytes"}`)
	raw := "the publisher's own messages"
	if *flagRawBare {
		raw = "bare messages"
	}
	settings := fmt.Sprintf("%d workers, poll batch %d, cold queue %d", *flagWorkers, *flagBatch, 4**flagBatch)
	if *flagDefault {
		settings = "the library's defaults (workers from the publisher's InFlight, poller and queues at their defaults)"
	}
	fmt.Printf("outbox to broker: %d events, %s, %s outbox (delivery %s), raw loop of %s, GOMAXPROCS %d, %d CPUs, load average %s, %s\n\n",
		*flagN, settings, *flagDB, *flagDelivery, raw, runtime.GOMAXPROCS(0), runtime.NumCPU(), procstat.LoadAvg(), time.Now().UTC().Format(time.RFC3339))
	fmt.Println("| broker | run | msgs/s | ratio | per round | commit-to-ack p50 ms | p99 ms | max ms | CPU µs/msg bench / server (/ PostgreSQL backends) | claims (events each) |")
	fmt.Println("|---|---|---:|---:|---|---:|---:|---:|---|---|")
	failed := false
	var notes []string
	for name := range strings.SplitSeq(*flagBroker, ",") {
		tg, err := open(ctx, name)
		if err != nil {
			log.Printf("%s: skipped: %v", name, err)
			failed = failed || errors.Is(err, errBadFlag)
			continue
		}
		note, err := measure(ctx, tg, payload)
		if err != nil {
			log.Printf("%s: %v", name, err)
			failed = true
		}
		if note != "" {
			notes = append(notes, note)
		}
		tg.Close()
	}
	fmt.Println()
	for _, n := range notes {
		fmt.Println(n)
	}
	fmt.Printf("load average at the end: %s\n", procstat.LoadAvg())
	if *flagMemProf != "" {
		if err := procstat.WriteAllocs(*flagMemProf); err != nil {
			log.Printf("memprofile: %v", err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

var errBadFlag = errors.New("bad flag")

func open(ctx context.Context, name string) (target, error) {
	switch name {
	case "jetstream":
		return openJetStream(ctx, cmp.Or(os.Getenv("OUTBOX_NATS_URL"), "nats://127.0.0.1:4222"))
	case "rabbitmq":
		return openRabbitMQ(ctx, cmp.Or(os.Getenv("OUTBOX_AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/"))
	}
	return nil, fmt.Errorf("%w: unknown broker %q", errBadFlag, name)
}

// deliveries returns the deliveries of -delivery, or an error naming a bad
// one.
func deliveries() ([]outbox.Delivery, error) {
	var ds []outbox.Delivery
	for name := range strings.SplitSeq(*flagDelivery, ",") {
		switch name {
		case "claim":
			ds = append(ds, outbox.DeliveryClaim)
		case "position":
			ds = append(ds, outbox.DeliveryPosition)
		default:
			return nil, fmt.Errorf("%w: unknown -delivery %q", errBadFlag, name)
		}
	}
	return ds, nil
}

// deliveryName is the name a row gives d.
func deliveryName(d outbox.Delivery) string {
	if d == outbox.DeliveryPosition {
		return "position"
	}
	return "claim"
}

// drains sums the outbox runs of one delivery over the rounds: the drains
// into the broker and the no-op drains.
type drains struct {
	obRates, noopRates      []float64
	obTotal, noopTotal      time.Duration
	obCPU, noopCPU          cpuUse
	obClaims, obClaimed     int64
	obCalls, obCallEvents   int64 // HandleBatch calls of the publisher, and their events
	workers                 int   // the dispatcher's
	noopClaims, noopClaimed int64
	lat                     []time.Duration
}

// measure prints tg's rows of the table, and returns a note on the CPU
// they cost.
func measure(ctx context.Context, tg target, payload []byte) (string, error) {
	ds, err := deliveries()
	if err != nil {
		return "", err
	}
	var rawRates, pubRates []float64
	var rawTotal, pubTotal time.Duration
	var rawCPU, pubCPU cpuUse
	runs := make([]drains, len(ds))
	meter := cpuMeter{pid: tg.ServerPID()}
	for round := range *flagRounds {
		// New events each round: JetStream would drop messages whose
		// Nats-Msg-Id it stored in the last round as duplicates.
		evs, err := events(*flagN, payload)
		if err != nil {
			return "", err
		}
		if err := tg.Reset(ctx); err != nil {
			return "", err
		}
		c0 := meter.read()
		start := time.Now()
		if err := tg.Raw(ctx, evs, *flagWindow, *flagRawBare); err != nil {
			return "", fmt.Errorf("raw loop: %w", err)
		}
		d := time.Since(start)
		rawCPU = rawCPU.add(meter.read().sub(c0))
		rawTotal += d
		rawRates = append(rawRates, float64(*flagN)/d.Seconds())
		if n, err := tg.Count(ctx); err != nil || n != *flagN {
			return "", fmt.Errorf("raw loop: broker holds %d messages, want %d (%v)", n, *flagN, err)
		}

		// The publisher alone, without an outbox: as many goroutines as
		// the dispatcher has workers call Handle, each waiting for its
		// own acknowledgement as a worker does.
		if evs, err = events(*flagN, payload); err != nil {
			return "", err
		}
		if err := tg.Reset(ctx); err != nil {
			return "", err
		}
		c0 = meter.read()
		start = time.Now()
		if err := publishAlone(ctx, tg.Listener(), evs, workers(tg.Listener())); err != nil {
			return "", fmt.Errorf("publisher alone: %w", err)
		}
		d = time.Since(start)
		pubCPU = pubCPU.add(meter.read().sub(c0))
		pubTotal += d
		pubRates = append(pubRates, float64(*flagN)/d.Seconds())
		if n, err := tg.Count(ctx); err != nil || n != *flagN {
			return "", fmt.Errorf("publisher alone: broker holds %d messages, want %d (%v)", n, *flagN, err)
		}

		// The deliveries in turn, the first one first in odd rounds and
		// last in even ones, so that neither always runs on a broker
		// that has just taken the other's messages.
		order := make([]int, len(ds))
		for i := range order {
			order[i] = i
			if round%2 == 1 {
				order[i] = len(ds) - 1 - i
			}
		}
		for _, i := range order {
			dv, acc := ds[i], &runs[i]
			if err := tg.Reset(ctx); err != nil {
				return "", err
			}
			r, err := outboxRun(ctx, tg, meter, payload, dv, round == 0, false)
			if err != nil {
				return "", fmt.Errorf("outbox run (%s): %w", deliveryName(dv), err)
			}
			acc.obTotal += r.drain
			acc.obCPU = acc.obCPU.add(r.cpu)
			acc.obClaims, acc.obClaimed = acc.obClaims+r.claims, acc.obClaimed+r.claimed
			acc.obCalls, acc.obCallEvents = acc.obCalls+r.calls, acc.obCallEvents+r.callEvents
			acc.workers = r.workers
			acc.obRates = append(acc.obRates, float64(*flagN)/r.drain.Seconds())
			acc.lat = append(acc.lat, r.lat...)
			if n, err := tg.Count(ctx); err != nil || n < *flagN {
				return "", fmt.Errorf("outbox run (%s): broker holds %d messages, want %d (%v)", deliveryName(dv), n, *flagN, err)
			}

			// The same drain with a listener that publishes nothing: the
			// outbox's own ceiling on this database, which bounds the
			// ratio.
			r, err = outboxRun(ctx, tg, meter, payload, dv, false, true)
			if err != nil {
				return "", fmt.Errorf("outbox run (%s), no-op listener: %w", deliveryName(dv), err)
			}
			acc.noopTotal += r.drain
			acc.noopCPU = acc.noopCPU.add(r.cpu)
			acc.noopClaims, acc.noopClaimed = acc.noopClaims+r.claims, acc.noopClaimed+r.claimed
			acc.noopRates = append(acc.noopRates, float64(*flagN)/r.drain.Seconds())
		}
	}
	total := *flagN * *flagRounds
	raw := float64(total) / rawTotal.Seconds()
	fmt.Printf("| %s | raw async publish | %.0f | 1.00 | %s | | | | %s | |\n", tg.Name(), raw, rates(rawRates), rawCPU.perMsg(total))
	pub := float64(total) / pubTotal.Seconds()
	fmt.Printf("| %s | publisher alone, %d concurrent calls, no outbox | %.0f | %.2f | %s | | | | %s | |\n", tg.Name(), workers(tg.Listener()), pub, pub/raw,
		rates(pubRates), pubCPU.perMsg(total))
	var notes []string
	for i, dv := range ds {
		acc := &runs[i]
		name := deliveryName(dv)
		ob := float64(total) / acc.obTotal.Seconds()
		slices.Sort(acc.lat)
		fmt.Printf("| %s | outbox backlog drain, %s, %d workers | %.0f | %.2f | %s | %s | %s | %s | %s | %s |\n", tg.Name(), name, acc.workers, ob, ob/raw, rates(acc.obRates),
			ms(pct(acc.lat, 50)), ms(pct(acc.lat, 99)), ms(pct(acc.lat, 100)), acc.obCPU.perMsg(total),
			claimsPer(acc.obClaims, acc.obClaimed)+callsPer(acc.obCalls, acc.obCallEvents))
		noop := float64(total) / acc.noopTotal.Seconds()
		fmt.Printf("| %s | outbox drain, %s, no-op listener (ceiling) | %.0f | %.2f | %s | | | | %s | %s |\n", tg.Name(), name, noop, noop/raw, rates(acc.noopRates),
			acc.noopCPU.perMsg(total), claimsPer(acc.noopClaims, acc.noopClaimed))
		if n := cpuNote(tg.Name()+", "+name, total, rawCPU, acc.obCPU, acc.noopCPU); n != "" {
			notes = append(notes, n)
		}
	}
	return strings.Join(notes, "\n"), nil
}

// cpuNote compares the CPU time per message, bench and server together, of
// the raw loop and the outbox drains. Where CPU is what limits the rate (a
// few shared cores), the ratio of the rates tends to the inverse ratio of
// these costs, and a publisher that cost nothing would still add the no-op
// drain's cost to the raw loop's.
func cpuNote(name string, msgs int, raw, ob, noop cpuUse) string {
	if raw.server < 0 || ob.server < 0 || noop.server < 0 {
		return ""
	}
	r, o, n := raw.self+raw.server, ob.self+ob.server+max(ob.db, 0), noop.self+noop.server+max(noop.db, 0)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(msgs) }
	with := "bench and server"
	if ob.db >= 0 {
		with = "bench, server and PostgreSQL backends"
	}
	return fmt.Sprintf("%s: CPU µs per message, %s: raw %.0f, outbox drain %.0f, no-op drain %.0f; raw/drain %.2f, raw/(raw+no-op) %.2f",
		name, with, us(r), us(o), us(n), float64(r)/float64(max(o, 1)), float64(r)/float64(max(r+n, 1)))
}

// publishAlone calls l.Handle for every event of evs from workers
// goroutines, and returns the first error.
func publishAlone(ctx context.Context, l core.Listener, evs []core.Event, workers int) error {
	var next atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(evs) || first.Load() != nil {
					return
				}
				if err := l.Handle(ctx, evs[i]); err != nil {
					first.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, ok := first.Load().(error); ok {
		return err
	}
	return nil
}

// events returns n events like those of the outbox runs, for the raw loop.
func events(n int, payload []byte) ([]core.Event, error) {
	evs := make([]core.Event, n)
	for i := range evs {
		env, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("OrderPlaced"),
			AggregateType: core.AggregateName("Order"), AggregateID: fmt.Sprintf("o-%d", i%1000), JSON: payload})
		if err != nil {
			return nil, err
		}
		evs[i] = core.Event{Envelope: env}
	}
	return evs, nil
}

// callsPer describes the publisher's HandleBatch calls, if it had any.
func callsPer(calls, events int64) string {
	if calls == 0 {
		return ""
	}
	return fmt.Sprintf("; %d batches (%.0f)", calls, float64(events)/float64(calls))
}

func claimsPer(claims, events int64) string {
	return fmt.Sprintf("%d (%.0f)", claims, float64(events)/float64(max(claims, 1)))
}

func rates(r []float64) string {
	s := make([]string, len(r))
	for i, v := range r {
		s[i] = fmt.Sprintf("%.0f", v)
	}
	return strings.Join(s, " / ")
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

// outboxRun fills a fresh outbox table with n pending events, starts an
// outbox whose every event goes to tg's publisher, and times the drain from
// the start until the last acknowledgement; then (with live) writes
// flagLive events one transaction each and returns their commit-to-ack
// latencies.
// runResult is what outboxRun measured: the drain's duration and CPU use,
// and the commit-to-ack latencies of the live events.
type runResult struct {
	drain             time.Duration
	cpu               cpuUse
	claims, claimed   int64 // claims that returned events during the drain, and their events
	calls, callEvents int64 // HandleBatch calls of the publisher during the drain, and their events
	workers           int   // the dispatcher's
	lat               []time.Duration
}

func outboxRun(ctx context.Context, tg target, meter cpuMeter, payload []byte, dv outbox.Delivery, live, noop bool) (runResult, error) {
	db, st, cleanup, err := openOutbox(ctx)
	if err != nil {
		return runResult{}, err
	}
	defer cleanup()
	if *flagDB == "postgres" {
		// The backends of this pool, which keeps its connections open (see
		// openOutbox): their CPU is the database's share of the drain.
		meter.dbPIDs = func() []int { return backends(ctx, db) }
	}
	// The backlog is written as the delivery writes it: pending rows for
	// the claim path, STREAM rows with positions for position delivery
	// (through a WriterOnly outbox, which writes them and delivers
	// nothing).
	wo, err := outbox.New(outbox.Config{DB: db, Store: st, Mode: outbox.WriterOnly, Delivery: dv})
	if err != nil {
		return runResult{}, err
	}
	defer wo.Close(context.WithoutCancel(ctx))
	w := wo.Writer()
	for done := 0; done < *flagN; {
		batch := min(1000, *flagN-done)
		envs := make([]core.Envelope, batch)
		for i := range envs {
			envs[i], err = core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("OrderPlaced"),
				AggregateType: core.AggregateName("Order"), AggregateID: fmt.Sprintf("o-%d", (done+i)%1000), JSON: payload})
			if err != nil {
				return runResult{}, err
			}
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return runResult{}, err
		}
		if _, err := w.WriteAllTx(ctx, tx, envs); err != nil {
			_ = tx.Rollback()
			return runResult{}, err
		}
		if err := tx.Commit(); err != nil {
			return runResult{}, err
		}
		done += batch
	}
	if *flagDB == "postgres" {
		// As autovacuum would soon after such a write (the bench of
		// package bench does the same after its fills). Without
		// statistics, PostgreSQL plans the first five reads or claims of
		// each connection as a scan and sort of the whole table.
		if _, err := db.ExecContext(ctx, "ANALYZE "+st.Table()); err != nil {
			return runResult{}, fmt.Errorf("analyze: %w", err)
		}
	}

	var acked atomic.Int64
	progress := make(chan struct{}, 1)
	waitAcked := func(want int64, limit time.Duration) error {
		deadline := time.After(limit)
		for acked.Load() < want {
			select {
			case <-progress:
			case <-deadline:
				return fmt.Errorf("%d of %d acknowledged after %s", acked.Load(), want, limit)
			}
		}
		return nil
	}
	var commitAt sync.Map // event id -> time.Time, live phase only
	var latMu sync.Mutex
	var lat []time.Duration
	pub := tg.Listener()
	if noop {
		pub = core.ListenerFunc(func(context.Context, core.Event) error { return nil })
	}
	// delivered notes an acknowledged event: its commit-to-ack latency
	// (live phase) and the count the drain waits for.
	// Only live events have a commit time: the backlog's pay no clock read.
	delivered := func(ev core.Event) {
		if t0, ok := commitAt.Load(ev.ID()); ok {
			d := time.Since(t0.(time.Time))
			latMu.Lock()
			lat = append(lat, d)
			latMu.Unlock()
		}
		acked.Add(1)
	}
	listener := core.ListenerFunc(func(ctx context.Context, ev core.Event) error {
		if err := pub.Handle(ctx, ev); err != nil {
			return err
		}
		delivered(ev)
		select {
		case progress <- struct{}{}:
		default:
		}
		return nil
	})
	var registered core.Listener = listener
	var batches *batchFunc
	if a, ok := tg.Listener().(core.AsyncListener); ok {
		// The no-op drain too: the outbox's ceiling at the same workers.
		registered = asyncFunc{listener, a.InFlight()}
		if b, ok := pub.(core.BatchListener); ok && *flagBatchL {
			batches = &batchFunc{asyncFunc: asyncFunc{listener, a.InFlight()}, b: b, each: delivered, progress: progress}
			registered = batches
		}
	}
	reg := core.NewRegistry()
	if err := reg.RegisterFallback(registered); err != nil {
		return runResult{}, err
	}
	counted := &claimCounter{Store: st}
	cfg := outbox.Config{DB: db, Store: counted, Registry: reg, Delivery: dv,
		Dispatch: dispatch.Config{Workers: *flagWorkers, ColdQueueSize: 4 * *flagBatch},
		Poller:   poller.Config{BatchSize: *flagBatch, Interval: time.Second},
	}
	if *flagDefault {
		cfg.Dispatch, cfg.Poller = dispatch.Config{}, poller.Config{}
	}
	ob, err := outbox.New(cfg)
	if err != nil {
		return runResult{}, err
	}
	stopProfile := func() {}
	if *flagProfile != "" {
		name := *flagProfile
		if dv == outbox.DeliveryPosition {
			name += ".position"
		}
		if noop {
			name += ".noop"
		}
		f, err := os.Create(name)
		if err != nil {
			return runResult{}, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return runResult{}, err
		}
		var once sync.Once
		stopProfile = func() { once.Do(func() { pprof.StopCPUProfile(); _ = f.Close() }) }
		defer stopProfile()
	}
	c0 := meter.read()
	start := time.Now()
	if err := ob.Start(ctx); err != nil {
		return runResult{}, err
	}
	defer ob.Close(context.WithoutCancel(ctx))
	if want := workers(tg.Listener()); !*flagDefault && ob.Dispatcher().Workers() != want {
		return runResult{}, fmt.Errorf("the dispatcher runs %d workers, want %d", ob.Dispatcher().Workers(), want)
	}
	if err := waitAcked(int64(*flagN), 10*time.Minute); err != nil {
		return runResult{}, fmt.Errorf("drain: %w", err)
	}
	stopProfile()
	res := runResult{drain: time.Since(start), cpu: meter.read().sub(c0), workers: ob.Dispatcher().Workers(),
		claims: counted.claims.Load(), claimed: counted.events.Load()}
	if batches != nil {
		res.calls, res.callEvents = batches.calls.Load(), batches.events.Load()
	}
	if !live {
		return res, nil
	}

	// Live: one transaction per event, 8 writers, through the hot path.
	var wg sync.WaitGroup
	var werr atomic.Value
	per := *flagLive / 8
	for range 8 {
		wg.Go(func() {
			for range per {
				env, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("OrderPlaced"),
					AggregateType: core.AggregateName("Order"), AggregateID: "live", JSON: payload})
				if err != nil {
					werr.Store(err)
					return
				}
				err = ob.Do(ctx, func(ctx context.Context) error {
					tx, _ := txctx.From(ctx)
					// Registered before the writer's hook: it runs first
					// after COMMIT, before the hot path hands the event on.
					tx.AfterCommit(func(context.Context) { commitAt.Store(env.ID(), time.Now()) })
					_, err := ob.Writer().Write(ctx, env)
					return err
				})
				if err != nil {
					werr.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, ok := werr.Load().(error); ok {
		return runResult{}, err
	}
	if err := waitAcked(int64(*flagN+per*8), 2*time.Minute); err != nil {
		return runResult{}, fmt.Errorf("live: %w", err)
	}
	latMu.Lock()
	defer latMu.Unlock()
	res.lat = slices.Clone(lat)
	return res, nil
}

// appName is the application_name of this process's PostgreSQL
// connections.
var appName = fmt.Sprintf("brokerbench_%d", os.Getpid())

// backends returns the pids of this process's PostgreSQL backends (the
// server is on this machine for the CPU figures to mean anything), nil if
// they cannot be listed.
func backends(ctx context.Context, db *sql.DB) []int { return procstat.PGBackends(ctx, db, appName) }

func openOutbox(ctx context.Context) (*sql.DB, testdb.Store, func(), error) {
	table := testdb.UniqueName("bench_broker")
	var db *sql.DB
	var st testdb.Store
	var err error
	cleanup := func() {}
	switch *flagDB {
	case "sqlite":
		dir, derr := os.MkdirTemp("", "brokerbench")
		if derr != nil {
			return nil, nil, nil, derr
		}
		cleanup = func() { _ = os.RemoveAll(dir) }
		db, err = sqlite.Open(filepath.Join(dir, "outbox.db"))
		if err == nil {
			st, err = sqlite.New(sqlite.Config{Table: table})
		}
	case "postgres":
		dsn := os.Getenv("OUTBOX_POSTGRES_DSN")
		if dsn == "" {
			return nil, nil, nil, fmt.Errorf("%w: -db postgres needs OUTBOX_POSTGRES_DSN", errBadFlag)
		}
		// The application name finds this pool's backends (backends).
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		db, err = postgres.Open(dsn + sep + "application_name=" + appName)
		if err == nil {
			// Connections stay open, so that their backends' CPU is
			// counted to the end of a run.
			n := *flagWorkers
			if *flagDefault {
				n = broker.DefaultInFlight
			}
			db.SetMaxOpenConns(n/4 + 8)
			db.SetMaxIdleConns(n/4 + 8)
			st, err = postgres.New(postgres.Config{Table: table})
		}
	default:
		return nil, nil, nil, fmt.Errorf("%w: unknown -db %q", errBadFlag, *flagDB)
	}
	if err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	if err := st.CreateSchema(ctx, db); err != nil {
		_ = db.Close()
		cleanup()
		return nil, nil, nil, err
	}
	prev := cleanup
	cleanup = func() {
		_ = testdb.DropTable(context.WithoutCancel(ctx), db, st)
		_ = db.Close()
		prev()
	}
	return db, st, cleanup, nil
}
