package dispatch

import "github.com/outboxkit/outbox/core"

// The two queues: the hot queue, fed by the writer hook after commit, and the
// cold queue, fed by the poller. Both are bounded channels; an offer never
// blocks, and an event enters a queue only through inflight.offer, which
// tracks its id.

// EnqueueCold queues an event claimed by the poller without blocking. It
// reports whether the dispatcher holds the event after the call: false when
// the cold queue is full or the dispatcher is closing, so that the poller
// releases the lease. When the id is already queued or in flight (closing or
// not), no second copy is queued; the result is then true if ev is leased by this
// dispatcher's owner (the poller merely renewed the lease of an event this
// dispatcher still holds, even one whose DONE or DEAD is being written, and
// must not release it) and false otherwise. An event whose RETRY is being
// written is no longer held: a claim of it is queued as usual. A stale claim
// (one made before this dispatcher's outcome for the event landed, handed
// over after; see inflight.go) is refused: its release by the poller is
// fenced off by the outcome.
func (d *Dispatcher) EnqueueCold(ev core.Event) bool {
	switch d.inflight.offer(d.cold, ev) {
	case queued:
		d.cfg.Metrics.ColdEnqueued()
		return true
	case held:
		// Our own poller re-claimed an event this dispatcher still holds
		// (queued, in flight, or with its DONE or DEAD being written): the
		// fresh lease is ours, so the outcome write-back, fenced by our
		// owner token, still lands. Releasing it here would instead let
		// that write-back be fenced off and the event be delivered again.
		// This holds while closing too: the drain may still deliver it, or
		// the last step of Close releases it.
		return ev.LockedBy == d.owner
	default:
		return false
	}
}

// enqueueHot queues ev for delivery through the hot path without blocking;
// the writer hook feeds the hot queue through it. It returns queued, held
// (ev's id is already queued or in flight) or refused (the hot queue is full
// or the dispatcher is closing), and counts Metrics.HotEnqueued or
// Metrics.HotDropped. The event must be leased by its LockedBy owner.
func (d *Dispatcher) enqueueHot(ev core.Event) offerResult {
	res := d.inflight.offer(d.hot, ev)
	if res == queued {
		d.cfg.Metrics.HotEnqueued()
	} else {
		d.cfg.Metrics.HotDropped()
	}
	return res
}

// ColdCapacity returns how many more events the cold queue accepts now; 0
// while the dispatcher is closing.
func (d *Dispatcher) ColdCapacity() int {
	if d.inflight.intakeStopped() {
		return 0
	}
	return cap(d.cold) - len(d.cold)
}

// next returns the next event to process, or false when the worker must exit.
//
// Fairness is a weighted round-robin over a counter shared by all workers:
// two turns out of three prefer the hot queue, one prefers the cold queue, so
// while both have work hot events are taken twice as often as cold ones. A
// turn whose preferred queue is empty takes from the other one, so a worker
// never waits while either queue has work; when both are empty it blocks in a
// select on both queues and the shutdown signals, so it never spins.
func (d *Dispatcher) next() (it item, hot bool, ok bool) {
	hardStop := d.life.HardStop()
	select {
	case <-hardStop:
		return item{}, false, false
	default:
	}
	first, second := d.hot, d.cold
	firstHot := true
	if d.tick.Add(1)%3 == 0 {
		first, second, firstHot = d.cold, d.hot, false
	}
	select {
	case it := <-first:
		return it, firstHot, true
	default:
	}
	select {
	case it := <-second:
		return it, !firstHot, true
	default:
	}
	select {
	case it := <-d.hot:
		return it, true, true
	case it := <-d.cold:
		return it, false, true
	case <-hardStop:
		return item{}, false, false
	case <-d.life.Stopping():
		// Draining: intake has stopped, so once both queues are empty they
		// stay empty and the worker can exit.
		select {
		case it := <-d.hot:
			return it, true, true
		case it := <-d.cold:
			return it, false, true
		default:
			return item{}, false, false
		}
	}
}
