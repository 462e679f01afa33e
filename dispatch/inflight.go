package dispatch

import (
	"sync"

	"github.com/outboxkit/outbox/core"
)

// inflight is the set of events the dispatcher holds: queued, being
// delivered, or with their DONE or DEAD being written. An id it holds is
// never accepted again, so an event is not delivered twice by one
// dispatcher, and a lease this dispatcher holds is never released behind its
// back. It also owns intake: once stopped, no event enters.
//
// The ordering guarantees the rest of the package relies on:
//
//   - An id is tracked before any worker can take its event from a queue:
//     offer sends and tracks under one lock, so a worker cannot untrack the
//     id before it is tracked.
//   - An outcome that makes the row claimable again (RETRY, a lease release)
//     untracks the event BEFORE it is written: the moment it is, this
//     dispatcher's own poller may claim the row and must find the id
//     untracked, or EnqueueCold would take the event for one still held here
//     and it would stay leased, undelivered, until its lease expired. Until
//     the write the row is leased by this dispatcher, so no poller claims it.
//   - Terminal outcomes (DONE, DEAD) untrack AFTER the write: a poller that
//     re-claims the event meanwhile (its lease expired during a slow
//     delivery) then sees it held. A DONE written in a batch untracks when
//     its batch is written, or when it is given up.
//   - Once intake has stopped (stopIntake), no offer succeeds, so the workers
//     can drain the queues knowing that once empty they stay empty.
type inflight struct {
	mu      sync.Mutex
	ids     map[string]struct{}
	stopped bool // intake stopped; set once, never cleared
}

func newInflight() *inflight { return &inflight{ids: make(map[string]struct{})} }

// offerResult is what became of an event offered to a queue.
type offerResult int

const (
	queued  offerResult = iota
	held                // the id is tracked already: queued or in flight
	refused             // the queue is full or intake has stopped
)

// offer queues ev on q without blocking and tracks its id, unless the id is
// held already or intake has stopped or q is full.
func (f *inflight) offer(q chan<- core.Event, ev core.Event) offerResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, dup := f.ids[ev.ID()]; dup {
		return held
	}
	if f.stopped {
		return refused
	}
	select {
	case q <- ev:
		// Under f.mu: the worker that takes ev cannot untrack it first.
		f.ids[ev.ID()] = struct{}{}
		return queued
	default:
		return refused
	}
}

// held reports whether the dispatcher holds id.
func (f *inflight) held(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.ids[id]
	return ok
}

// untrack forgets id: the dispatcher accepts it again. See the type's doc for
// when to call it, before or after the outcome's write.
func (f *inflight) untrack(id string) {
	f.mu.Lock()
	delete(f.ids, id)
	f.mu.Unlock()
}

// untrackAll forgets ids.
func (f *inflight) untrackAll(ids []string) {
	f.mu.Lock()
	for _, id := range ids {
		delete(f.ids, id)
	}
	f.mu.Unlock()
}

// stopIntake makes every later offer fail. Once it returns, no event enters a
// queue any more.
func (f *inflight) stopIntake() {
	f.mu.Lock()
	f.stopped = true
	f.mu.Unlock()
}

// intakeStopped reports whether stopIntake was called.
func (f *inflight) intakeStopped() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stopped
}
