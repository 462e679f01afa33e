package dispatch

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/delivery"
	"github.com/outboxkit/outbox/internal/lease"
	"github.com/outboxkit/outbox/internal/lifecycle"
	"github.com/outboxkit/outbox/outboxlog"
)

// Dispatcher delivers events to their listeners from two bounded in-memory
// queues: the hot queue, fed after commit by the writer hook, and the cold
// queue, fed by a poller. A pool of workers drains both, hot twice as often as
// cold while both have work, and records each outcome in the store: DONE,
// RETRY (with backoff) or DEAD.
//
// A Dispatcher is safe for concurrent use. Its lifecycle is New, Start, Close.
type Dispatcher struct {
	cfg   Config
	owner string
	log   *slog.Logger
	// refused sums the hot queue's refusals into one warning a second.
	refused *outboxlog.Sum

	hot, cold chan item           // queued events with their entries; see inflight.go
	tick      atomic.Uint64       // weighted round-robin position shared by all workers
	inflight  *inflight           // what the dispatcher holds; see inflight.go
	batch     *doneBatcher        // nil: DONE outcomes are written one by one
	doneBatch recordFunc          // how batch writes DONE outcomes; nil when batch is
	memDone   delivery.MemoryDone // nil: every DONE is written; see doneInMemory
	pending   *pendingWrites      // write-backs to try again; see writeback.go
	renewer   core.LeaseRenewer   // nil: no lease renewal; see renew.go
	ordered   core.OrderedStore   // nil: the store orders nothing; see ordered.go
	held      *heldDone           // nil: ordered DONE outcomes wait for held key rows; see ordered.go
	latency   core.LatencyMetrics // nil: Metrics records no durations
	yield     func()              // run by the writer hook once it queued events; nil: none
	releaser  *lease.Releaser     // leases whose release failed; see release.go

	// listenBase is the parent of every listener context: the workers'
	// context without its cancellation, set by Start. See
	// listenerContext.
	listenBase context.Context

	dueMu sync.Mutex
	due   []func(due, from time.Time) // NotifyDueFrom's subscribers

	life     *lifecycle.Staged // Start, Close and the shutdown stages set in New
	workers  sync.WaitGroup
	retrying chan struct{} // closed when the release retry goroutine has exited

	// autoWorkers: Config.Workers was zero, and Start sizes the workers to
	// the registered listeners (see Workers); nworkers is what it chose.
	autoWorkers bool
	nworkers    atomic.Int64
	writeSlots  chan struct{} // see maxWorkerWrites

	stopWrites, stopRenew chan struct{}  // closed at shutdown to stop retryWrites, renewLeases
	writers, renewers     sync.WaitGroup // retryWrites, renewLeases
}

// New validates cfg and returns a Dispatcher ready to accept events; call
// Start to begin delivering them. Bad configuration returns an error matching
// core.ErrInvalid.
func New(cfg Config) (*Dispatcher, error) {
	auto := cfg.Workers == 0
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	d := &Dispatcher{
		cfg:      cfg,
		owner:    cfg.Owner,
		log:      outboxlog.Or(cfg.Logger).With("component", "outbox.dispatcher"),
		hot:      make(chan item, cfg.HotQueueSize),
		cold:     make(chan item, cfg.ColdQueueSize),
		inflight: newInflight(),
		retrying: make(chan struct{}),
		pending:  newPendingWrites(),

		stopWrites: make(chan struct{}),
		stopRenew:  make(chan struct{}),
	}
	d.refused = outboxlog.NewSum(d.log, slog.LevelWarn, refusedMsg, "events", outboxlog.SumOptions{})
	d.autoWorkers, d.writeSlots = auto, make(chan struct{}, maxWorkerWrites)
	d.inflight.lease, d.inflight.now = cfg.LeaseTimeout, cfg.Now
	d.renewer, _ = core.StoreAs[core.LeaseRenewer](cfg.Store)
	if o, ok := core.StoreAs[core.OrderedStore](cfg.Store); ok && len(o.Ordering()) > 0 {
		d.ordered = o
		// Only on the value that orders: a wrapper of MarkDoneOrdered
		// that does not implement it is not bypassed.
		if nw, ok := o.(core.OrderedNoWaitMarker); ok {
			d.held = newHeldDone(d, nw)
		}
	}
	d.latency, _ = cfg.Metrics.(core.LatencyMetrics)
	d.releaser = d.newReleaser()
	d.life = lifecycle.NewStaged(lifecycle.Stages{
		StopIntake:   d.inflight.stopIntake,
		Drain:        d.workers.Wait,
		DrainTimeout: cfg.DrainTimeout,
		DrainTimedOut: func() {
			d.log.LogAttrs(context.Background(), slog.LevelWarn, "outbox dispatcher drain timed out; cancelling listeners",
				slog.Int64("drain_timeout_ms", cfg.DrainTimeout.Milliseconds()))
		},
		AfterHardStop: func() {
			<-d.retrying // its last try is releaseQueued's
			if d.batch != nil {
				// No worker adds any more: write the last DONE batch.
				close(d.batch.in)
				<-d.batch.done
			}
			// No worker or batcher writes any more: stop the retries and
			// make the last attempt, with the leases still renewed; only
			// then stop renewing.
			close(d.stopWrites)
			d.writers.Wait()
			d.lastWrites(context.Background())
			if held := d.held; held != nil {
				// Nothing else writes: the held-key writer makes the last
				// attempt at what it was handed; what fails is let go by
				// a last attempt that waits itself.
				close(held.in)
				<-held.done
				d.held = nil
				d.lastWrites(context.Background())
			}
			close(d.stopRenew)
			d.renewers.Wait()
		},
		Final: func(ctx context.Context) error {
			err := d.releaseQueued(ctx)
			d.refused.Flush()
			return err
		},
	})
	if !cfg.NoYieldAfterCommit {
		d.yield = runtime.Gosched
	}
	if md, ok := core.StoreAs[delivery.MemoryDone](cfg.Store); ok && !cfg.DeleteDelivered {
		d.memDone = md
	}
	switch bm, ok := core.StoreAs[core.BatchMarker](cfg.Store); {
	case cfg.DeleteDelivered:
		dd, _ := core.StoreAs[core.DoneDeleter](cfg.Store) // checked by withDefaults
		d.batch = newDoneBatcher(d, "delete")
		d.doneBatch = func(ctx context.Context, owner string, ids []string, _ time.Time) (int64, error) {
			return dd.DeleteDoneBatch(ctx, cfg.DB, owner, ids)
		}
	case ok && cfg.DoneBatchSize > 1:
		d.batch = newDoneBatcher(d, "DONE")
		d.doneBatch = func(ctx context.Context, owner string, ids []string, now time.Time) (int64, error) {
			return bm.MarkDoneBatch(ctx, cfg.DB, owner, ids, now)
		}
	}
	return d, nil
}

// Owner returns the lease owner token of this dispatcher. The Poller feeding
// it must claim with the same token.
func (d *Dispatcher) Owner() string { return d.owner }

// LeaseTimeout returns the lease duration of this dispatcher
// (Config.LeaseTimeout, defaults applied). The Poller feeding it must claim
// with the same one; poller.New takes it from here.
func (d *Dispatcher) LeaseTimeout() time.Duration { return d.cfg.LeaseTimeout }

// maxAutoWorkers caps the workers an asynchronous listener's InFlight asks
// for.
const maxAutoWorkers = 4096

// Workers returns the number of workers: Config.Workers when it was set;
// otherwise the number Start chose, or would choose now before Start:
// DefaultWorkers, or the largest InFlight of the registered listeners that
// are core.AsyncListeners (the broker publishers), at most 4096.
func (d *Dispatcher) Workers() int {
	if n := d.nworkers.Load(); n > 0 {
		return int(n)
	}
	if !d.autoWorkers {
		return d.cfg.Workers
	}
	n := DefaultWorkers
	for _, l := range d.cfg.Registry.Listeners() {
		a, ok := l.(core.AsyncListener)
		if !ok {
			continue
		}
		want := min(a.InFlight(), maxAutoWorkers)
		if bl := d.batching(l); bl != nil {
			// Each call carries up to MaxBatch events: an eighth of
			// InFlight workers, or as many as full batches need to carry
			// InFlight events, leave the queue time to form batches.
			want = min(want, max(want/batchWorkerShare, (want+bl.MaxBatch()-1)/bl.MaxBatch()))
		}
		n = max(n, want)
	}
	return n
}

// batchWorkerShare is the share of an asynchronous listener's InFlight that
// Workers asks for when the listener takes batches (see Workers).
const batchWorkerShare = 8

// Start launches the workers and returns at once. It returns
// core.ErrAlreadyStarted if the dispatcher was started before and
// core.ErrClosed after Close. Cancelling ctx shuts the dispatcher down as
// Close does (with the full DrainTimeout); listener contexts carry ctx's
// values but are cancelled only by that shutdown.
func (d *Dispatcher) Start(ctx context.Context) error {
	return d.life.Start(ctx, func(work context.Context) error {
		if d.batch != nil {
			go d.batch.run(work) // owned: AfterHardStop waits on d.batch.done
		}
		if d.held != nil {
			go d.held.run(work) // owned: AfterHardStop waits on d.held.done
		}
		d.listenBase = context.WithoutCancel(work)
		context.AfterFunc(work, func() { d.inflight.cancelRunning(cmp.Or(context.Cause(work), context.Canceled)) })
		n := d.Workers()
		d.nworkers.Store(int64(n))
		for range n {
			d.workers.Go(func() { d.work(work) })
		}
		// Owned: AfterHardStop stops and waits for both.
		d.writers.Go(func() { d.retryWrites(work, d.stopWrites) })
		if d.renewer != nil {
			d.renewers.Go(func() { d.renewLeases(work, d.stopRenew) })
		}
		go func() { // owned: AfterHardStop waits on d.retrying
			defer close(d.retrying)
			// work ends with the listeners' contexts, at the hard stop.
			d.releaser.Run(work, d.life.HardStop())
		}()
		return nil
	})
}

// listenerContext returns a context for listener calls, which the hard stop
// cancels, and the lease renewal too once cancel is handed to the tracker
// (inflight.begin). It does not descend from the workers' context, which
// the hard stop cancels, so that a delivery's context costs no registration
// with a parent that every worker shares; inflight.cancelRunning cancels it
// instead.
func (d *Dispatcher) listenerContext() (context.Context, context.CancelCauseFunc) {
	return context.WithCancelCause(d.listenBase)
}

// Close shuts the dispatcher down: it stops intake (enqueues return false),
// lets the workers drain the queues for up to DrainTimeout or until ctx is
// done, whichever comes first, then cancels the contexts of listeners still
// running and waits for them, writes the DONE outcomes still waiting for
// their batch (each write bounded by StoreTimeout, whatever ctx), and
// finally releases the leases of events still queued so that any instance
// can claim them at once. It returns when
// every goroutine of the dispatcher has exited, so a listener that ignores
// its context delays it. Close is idempotent and safe to call concurrently;
// every call waits for the shutdown to finish. The error reports a failed
// lease release (the leases then expire on their own).
func (d *Dispatcher) Close(ctx context.Context) error { return d.life.Close(ctx) }

// releaseQueued, the last step of the shutdown, empties both queues (no
// worker runs any more) and releases the leases of what was still in them,
// with those of the events whose release failed before, in one last try of
// the background retry's.
func (d *Dispatcher) releaseQueued(ctx context.Context) error {
	var queued []core.Event
	for _, q := range []chan item{d.hot, d.cold} {
	drain:
		for {
			select {
			case it := <-q:
				queued = append(queued, it.ev)
			default:
				break drain
			}
		}
	}
	ids := make([]string, len(queued))
	for i, ev := range queued {
		ids[i] = ev.ID()
	}
	d.inflight.untrackAll(ids)
	for _, ev := range queued {
		if ev.LockedBy != "" { // not leased: nothing to give back
			d.releaser.Keep(ev.LockedBy, []string{ev.ID()}, ev.LockedAt)
		}
	}
	if len(queued) > 0 {
		d.log.LogAttrs(ctx, slog.LevelInfo, "outbox dispatcher releases the leases of queued events on shutdown",
			slog.Int("events", len(queued)))
	}
	if err := d.releaser.Retry(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("on shutdown: %w", err)
	}
	return nil
}

// NotifyDue registers fn to be called with the time at which an event this
// dispatcher left in the database becomes deliverable: a failed event
// scheduled for retry, or a hot event it released (not yet available, or
// refused by a full queue). poller.New registers the poller's WakeAt here, so
// that short retry delays are not stretched to the poll interval. fn must not
// block.
func (d *Dispatcher) NotifyDue(fn func(due time.Time)) {
	if fn == nil {
		return
	}
	d.NotifyDueFrom(func(due, _ time.Time) { fn(due) })
}

// NotifyDueFrom is NotifyDue with the creation time of the oldest event
// concerned as well (its core.Event.CreatedAt; zero when the dispatcher does
// not know it), so that a poller can claim from there rather than from the
// oldest row. poller.New registers the poller's WakeAtFrom here. fn must not
// block.
func (d *Dispatcher) NotifyDueFrom(fn func(due, from time.Time)) {
	if fn == nil {
		return
	}
	d.dueMu.Lock()
	d.due = append(d.due, fn)
	d.dueMu.Unlock()
}

// notifyDue reports that events created at or after from (zero: not known)
// become deliverable at t.
func (d *Dispatcher) notifyDue(t, from time.Time) {
	d.dueMu.Lock()
	fns := d.due
	d.dueMu.Unlock()
	for _, fn := range fns {
		fn(t, from)
	}
}
