package dispatch

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxkit/outbox/core"
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
	log   zerolog.Logger

	hot, cold chan core.Event
	tick      atomic.Uint64 // weighted round-robin position shared by all workers
	batch     *doneBatcher  // nil: DONE outcomes are written one by one
	yield     func()        // run by the writer hook once it queued events; nil: none

	mu      sync.Mutex
	started bool
	closing bool                // intake stopped; set once, never cleared
	tracked map[string]struct{} // ids queued, in flight, or with their DONE or DEAD being written
	due     []func(time.Time)

	unreleased unreleased // leases whose release failed; see release.go

	closeReq     chan struct{} // closed when shutdown begins (Close or Start's ctx)
	closeReqOnce sync.Once
	hardStop     chan struct{} // closed when the drain is over: stop taking work, cancel listeners
	hardStopOnce sync.Once
	done         chan struct{} // closed once every goroutine has exited and leases are released
	doneOnce     sync.Once
	closeErr     error // written before done is closed

	workers  sync.WaitGroup
	retrying chan struct{} // closed when the release retry goroutine has exited
}

// New validates cfg and returns a Dispatcher ready to accept events; call
// Start to begin delivering them. Bad configuration returns an error matching
// core.ErrInvalid.
func New(cfg Config) (*Dispatcher, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	d := &Dispatcher{
		cfg:        cfg,
		owner:      cfg.Owner,
		log:        cfg.Logger.With().Str("component", "outbox.dispatcher").Logger(),
		hot:        make(chan core.Event, cfg.HotQueueSize),
		cold:       make(chan core.Event, cfg.ColdQueueSize),
		tracked:    make(map[string]struct{}),
		unreleased: newUnreleased(),
		retrying:   make(chan struct{}),
		closeReq:   make(chan struct{}),
		hardStop:   make(chan struct{}),
		done:       make(chan struct{}),
	}
	if !cfg.NoYieldAfterCommit {
		d.yield = runtime.Gosched
	}
	switch bm, ok := core.StoreAs[core.BatchMarker](cfg.Store); {
	case cfg.DeleteDelivered:
		dd, _ := core.StoreAs[core.DoneDeleter](cfg.Store) // checked by withDefaults
		d.batch = newDoneBatcher(d, "delete", func(ctx context.Context, owner string, ids []string, _ time.Time) (int64, error) {
			return dd.DeleteDoneBatch(ctx, cfg.DB, owner, ids)
		})
	case ok && cfg.DoneBatchSize > 1:
		d.batch = newDoneBatcher(d, "DONE", func(ctx context.Context, owner string, ids []string, now time.Time) (int64, error) {
			return bm.MarkDoneBatch(ctx, cfg.DB, owner, ids, now)
		})
	}
	return d, nil
}

// Owner returns the lease owner token of this dispatcher. The Poller feeding
// it must claim with the same token.
func (d *Dispatcher) Owner() string { return d.owner }

// Start launches the workers and returns at once. It returns
// core.ErrAlreadyStarted if the dispatcher was started before and
// core.ErrClosed after Close. Cancelling ctx shuts the dispatcher down as
// Close does (with the full DrainTimeout); listener contexts carry ctx's
// values but are cancelled only by that shutdown.
func (d *Dispatcher) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.closing:
		return core.ErrClosed
	case d.started:
		return core.ErrAlreadyStarted
	}
	d.started = true
	base, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if d.batch != nil {
		go d.batch.run(base) // owned: the supervisor waits on d.batch.done
	}
	for range d.cfg.Workers {
		d.workers.Go(func() { d.work(base) })
	}
	go func() { // owned: the supervisor waits on d.retrying
		defer close(d.retrying)
		d.retryReleases(base, d.hardStop) // base ends with the listeners' contexts
	}()
	go d.supervise(ctx, cancel) // owned through d.done, which it closes last
	return nil
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
func (d *Dispatcher) Close(ctx context.Context) error {
	d.mu.Lock()
	d.closing = true
	started := d.started
	d.mu.Unlock()
	d.closeReqOnce.Do(func() { close(d.closeReq) })
	if !started {
		// No goroutine runs; give back whatever was queued before Start.
		// Concurrent callers wait in finish until it is done.
		d.finish(func() error { return d.releaseQueued(ctx) })
	}
	select {
	case <-d.done:
	case <-ctx.Done():
		d.stopHard()
		<-d.done
	}
	return d.closeErr
}

// supervise waits for the shutdown signal, then runs the shutdown sequence.
func (d *Dispatcher) supervise(startCtx context.Context, cancelListeners context.CancelFunc) {
	select {
	case <-startCtx.Done():
		d.mu.Lock()
		d.closing = true
		d.mu.Unlock()
		d.closeReqOnce.Do(func() { close(d.closeReq) })
	case <-d.closeReq:
	}

	drained := make(chan struct{})
	go func() { // owned: the supervisor waits on drained below
		d.workers.Wait()
		close(drained)
	}()
	timer := time.NewTimer(d.cfg.DrainTimeout)
	defer timer.Stop()
	select {
	case <-drained:
	case <-timer.C:
		d.log.Warn().Dur("drain_timeout", d.cfg.DrainTimeout).Msg("outbox dispatcher drain timed out; cancelling listeners")
		d.stopHard()
	case <-d.hardStop:
	}
	// Workers stop taking work; listeners still running see their context
	// cancelled (after a complete drain there are none).
	d.stopHard()
	cancelListeners()
	<-drained
	<-d.retrying // its last try is releaseQueued's
	if d.batch != nil {
		// No worker adds any more: write the last DONE batch.
		close(d.batch.in)
		<-d.batch.done
	}
	d.finish(func() error { return d.releaseQueued(context.Background()) })
}

func (d *Dispatcher) stopHard() { d.hardStopOnce.Do(func() { close(d.hardStop) }) }

// finish runs the last shutdown step once and marks the dispatcher done.
func (d *Dispatcher) finish(last func() error) {
	d.doneOnce.Do(func() {
		d.closeErr = last()
		close(d.done)
	})
}

// releaseQueued empties both queues (no worker runs any more) and releases
// the leases of what was still in them, with those of the events whose
// release failed before, in one last try of the background retry's.
func (d *Dispatcher) releaseQueued(ctx context.Context) error {
	var queued []core.Event
	for _, q := range []chan core.Event{d.hot, d.cold} {
	drain:
		for {
			select {
			case ev := <-q:
				queued = append(queued, ev)
			default:
				break drain
			}
		}
	}
	d.mu.Lock()
	for _, ev := range queued {
		delete(d.tracked, ev.ID())
	}
	d.mu.Unlock()
	for _, ev := range queued {
		if ev.LockedBy != "" { // not leased: nothing to give back
			d.unreleased.add(ev.LockedBy, []string{ev.ID()})
		}
	}
	if len(queued) > 0 {
		d.log.Info().Int("events", len(queued)).Msg("outbox dispatcher releases the leases of queued events on shutdown")
	}
	return d.releaseUnreleased(context.WithoutCancel(ctx), "on shutdown")
}

// EnqueueHot queues ev for delivery through the hot path without blocking. It
// returns false, leaving ev to the poller, when the hot queue is full, the
// dispatcher is closing, or ev's id is already queued or in flight; each
// refusal counts Metrics.HotDropped. The event must be leased by its
// LockedBy owner (the writer hook inserts it so).
func (d *Dispatcher) EnqueueHot(ev core.Event) bool {
	if d.offerHot(ev) == hotQueued {
		d.cfg.Metrics.HotEnqueued()
		return true
	}
	d.cfg.Metrics.HotDropped()
	return false
}

// EnqueueCold queues an event claimed by the poller without blocking. It
// reports whether the dispatcher holds the event after the call: false when
// the cold queue is full or the dispatcher is closing, so that the poller
// releases the lease. When the id is already queued or in flight (closing or
// not), no second copy is queued; the result is then true if ev is leased by this
// dispatcher's owner (the poller merely renewed the lease of an event this
// dispatcher still holds, even one whose DONE or DEAD is being written, and
// must not release it) and false otherwise. An event whose RETRY is being
// written is no longer held: a claim of it is queued as usual.
func (d *Dispatcher) EnqueueCold(ev core.Event) bool {
	ok, queued := d.enqueueCold(ev)
	if queued {
		d.cfg.Metrics.ColdEnqueued()
	}
	return ok
}

func (d *Dispatcher) enqueueCold(ev core.Event) (held, queued bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, dup := d.tracked[ev.ID()]; dup {
		// Our own poller re-claimed an event this dispatcher still holds
		// (queued, in flight, or with its DONE or DEAD being written): the
		// fresh lease is ours, so the outcome write-back, fenced by our
		// owner token, still lands. Releasing it here would instead let
		// that write-back be fenced off and the event be delivered again.
		// This holds while closing too: the drain may still deliver it, or
		// the last step of Close releases it.
		return ev.LockedBy == d.owner, false
	}
	if d.closing {
		return false, false
	}
	queued = d.offerLocked(d.cold, ev)
	return queued, queued
}

// hotOffer is what became of an event offered to the hot queue.
type hotOffer int

const (
	hotQueued  hotOffer = iota
	hotHeld             // the id is tracked already: queued or in flight
	hotRefused          // the queue is full or the dispatcher is closing
)

func (d *Dispatcher) offerHot(ev core.Event) hotOffer {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, dup := d.tracked[ev.ID()]; dup {
		return hotHeld
	}
	if d.closing || !d.offerLocked(d.hot, ev) {
		return hotRefused
	}
	return hotQueued
}

// offerLocked tries a non-blocking send; d.mu is held, so a worker cannot
// untrack the id before it is tracked.
func (d *Dispatcher) offerLocked(q chan core.Event, ev core.Event) bool {
	select {
	case q <- ev:
		d.tracked[ev.ID()] = struct{}{}
		return true
	default:
		return false
	}
}

// ColdCapacity returns how many more events the cold queue accepts now; 0
// while the dispatcher is closing.
func (d *Dispatcher) ColdCapacity() int {
	d.mu.Lock()
	closing := d.closing
	d.mu.Unlock()
	if closing {
		return 0
	}
	return cap(d.cold) - len(d.cold)
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
	d.mu.Lock()
	d.due = append(d.due, fn)
	d.mu.Unlock()
}

func (d *Dispatcher) notifyDue(t time.Time) {
	d.mu.Lock()
	fns := d.due
	d.mu.Unlock()
	for _, fn := range fns {
		fn(t)
	}
}
