package dispatch

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/outboxkit/outbox/core"
)

// errLeaseLost is the cause of a listener context cancelled because the
// event's lease was found lost by a renewal (context.Cause reports it).
var errLeaseLost = errors.New("outbox: the event's lease was lost to another owner")

// inflight is the set of events the dispatcher holds: queued, being
// delivered, or with an outcome being written. An id it holds is never
// accepted twice, so an event is not delivered twice by one dispatcher, and
// a lease this dispatcher holds is never released behind its back. Every
// event it holds has its lease renewed (see renew.go). It also owns intake:
// once stopped, no event enters.
//
// Each held event has an entry, whose state says what a new claim of the
// same id means:
//
//   - active: queued or being delivered. A claim of it is this dispatcher's
//     own poller renewing the lease (it expired: renewal is off or failing):
//     the event stays held, no second copy is queued.
//   - finishing: a terminal outcome (DONE, DEAD) is being written, and
//     retried until it lands. A claim of it is, again, a renewal.
//   - reopening: an outcome that makes the row claimable again (RETRY) is
//     being written, and retried until it lands. Until it lands the row is
//     leased by this dispatcher and renewed, so no poller claims it; the
//     moment it lands, this dispatcher's own poller may claim the row, and
//     must not find it held, or the event would stay leased, undelivered,
//     until its lease expired. So a claim of a reopening entry replaces it:
//     the new claim is queued as a new entry, and the pending write of the
//     old one, no longer current, is dropped (or, already landed, only
//     finds its entry gone).
//
// A write-back removes its entry only if it is still current (the same
// pointer), so that the write of an old delivery never untracks a newer
// one. A renewal that finds a lease lost removes the entry at once and
// cancels its listener: the dispatcher writes no outcome for it.
//
// The ordering guarantees the rest of the package relies on:
//
//   - An id is tracked before any worker can take its event from a queue:
//     offer sends and tracks under one lock, so a worker cannot untrack the
//     id before it is tracked.
//   - An entry leaves the tracker only AFTER its outcome is written (or the
//     write is given up, or the lease is lost): until then its lease is
//     renewed and a claim of it by this dispatcher's own poller finds it
//     held (or, reopening, replaces it).
//   - A claim that committed BEFORE an outcome landed may be offered AFTER
//     the entry left (the poller claims, the write lands and untracks, then
//     the poller hands over what it claimed): offering it would deliver a
//     finished event again. Such a claim is possible only if the lease had
//     expired, which renewal prevents unless it was failing; so an entry
//     that leaves with a lease older than half the lease timeout leaves a
//     tombstone, its id and the time it left, for one lease timeout, and an
//     offer of that id whose lease (the claim's time) is not later than the
//     tombstone is stale and refused. A later claim (a RETRY that fell due,
//     a DEAD event replayed) is accepted.
//   - Once intake has stopped (stopIntake), no offer succeeds, so the workers
//     can drain the queues knowing that once empty they stay empty.
type inflight struct {
	mu      sync.Mutex
	ids     map[string]*entry
	stopped bool // intake stopped; set once, never cleared

	lease time.Duration    // the lease timeout; 0: no tombstones
	now   func() time.Time // the dispatcher's clock
	tombs map[string]time.Time
	order []tomb // tombs in the order they were made, to expire them

	// stopCause is set by cancelRunning at the hard stop: the listeners
	// running then are cancelled with it, and so are those that begin
	// after it.
	stopCause error
}

// entryState is what a held event is waiting for; see inflight.
type entryState int

const (
	active    entryState = iota // queued or being delivered
	finishing                   // a DONE or DEAD is being written
	reopening                   // a RETRY is being written
)

// entry is one held event. The queues carry it beside its event (item), so
// that the worker that takes it needs no look-up by id.
type entry struct {
	id, owner string
	seq       int64 // the event's position in its key; 0: unordered
	state     entryState
	leasedAt  time.Time               // when its lease was last set: claim, insert or renewal
	cancel    context.CancelCauseFunc // cancels the listener while it runs; nil otherwise
	lost      bool                    // a renewal found the lease lost
	// gone: the entry left ids (written, given up, lost, replaced by a new
	// claim or untracked): f.ids[id] != e, known without a look-up.
	gone bool
}

// item is what the queues carry: an event and its entry.
type item struct {
	ev core.Event
	e  *entry
}

type tomb struct {
	id string
	at time.Time
}

// maxTombs bounds the tombstones; beyond it the oldest are dropped early.
const maxTombs = 100_000

func newInflight() *inflight {
	return &inflight{ids: make(map[string]*entry), tombs: make(map[string]time.Time), now: time.Now}
}

// offerResult is what became of an event offered to a queue.
type offerResult int

const (
	queued  offerResult = iota
	held                // the id is held already: queued, in flight or finishing
	refused             // the queue is full, intake has stopped, or the claim is stale
)

// offer queues ev on q without blocking and tracks its id, unless the id is
// held already, intake has stopped, q is full or the offer is a stale claim
// of an event that has just left (see inflight).
func (f *inflight) offer(q chan<- item, ev core.Event) offerResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := ev.ID()
	old, dup := f.ids[id]
	if dup && old.state != reopening {
		return held
	}
	// A reopening entry's id offered again is a new claim: it is queued as
	// any other, or refused (and released by the poller), never held.
	if f.stopped {
		return refused
	}
	if at, ok := f.tombs[id]; ok {
		if !ev.LockedAt.After(at) {
			return refused
		}
		delete(f.tombs, id)
	}
	e := &entry{id: id, owner: ev.LockedBy, leasedAt: ev.LockedAt, seq: ev.Seq}
	select {
	case q <- item{ev, e}:
		// Under f.mu: the worker that takes e cannot begin it first.
		if dup {
			old.gone = true // replaced: its pending write is no longer current
		}
		f.ids[id] = e
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

// begin records cancel as the listener's of e, taken from a queue, and
// reports whether e is still held: false when it left meanwhile (its lease
// was lost). After the hard stop (cancelRunning), it cancels it at once.
func (f *inflight) begin(e *entry, cancel context.CancelCauseFunc) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.gone {
		return false
	}
	e.cancel = cancel
	if f.stopCause != nil {
		cancel(f.stopCause)
	}
	return true
}

// cancelRunning cancels, with cause, the listeners running and every one
// that begins after it: the listener contexts do not descend from the
// workers' (see Dispatcher.listenerContext), and this is their hard stop.
func (f *inflight) cancelRunning(cause error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopCause = cause
	for _, e := range f.ids {
		if e.cancel != nil {
			e.cancel(cause)
		}
	}
}

// writing moves e, whose delivery is over, to the state of the outcome
// about to be written, and reports whether it may be written: false when
// its lease was lost, and the dispatcher must write nothing.
func (f *inflight) writing(e *entry, s entryState) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	e.cancel = nil
	if e.lost || e.gone {
		return false
	}
	e.state = s
	return true
}

// current reports whether e is still the entry of its id: its lease is not
// lost and no newer claim replaced it.
func (f *inflight) current(e *entry) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !e.gone
}

// currentOf returns the ops of ops whose entries are current, in order, in
// ops' own array: one lock for a batch.
func (f *inflight) currentOf(ops []writeOp) []writeOp {
	f.mu.Lock()
	defer f.mu.Unlock()
	kept := ops[:0]
	for _, op := range ops {
		if !op.e.gone {
			kept = append(kept, op)
		}
	}
	return kept
}

// doneAll is done for the entries of ops, under one lock.
func (f *inflight) doneAll(ops []writeOp) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, op := range ops {
		f.removeLocked(op.e)
	}
}

// done removes e once its outcome is written (or given up): a no-op when e
// is no longer current.
func (f *inflight) done(e *entry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removeLocked(e)
}

func (f *inflight) removeLocked(e *entry) {
	if e.gone {
		return
	}
	e.gone = true
	delete(f.ids, e.id)
	if f.lease <= 0 {
		return
	}
	now := f.now()
	if now.Sub(e.leasedAt) <= f.lease/2 {
		return // no claim of it can have happened: its lease never expired
	}
	f.expireTombs(now)
	if len(f.order) >= maxTombs {
		f.dropTomb()
	}
	f.tombs[e.id] = now
	f.order = append(f.order, tomb{e.id, now})
}

// expireTombs drops the tombstones older than one lease timeout: by then any
// claim made before they were laid has been handed over.
func (f *inflight) expireTombs(now time.Time) {
	for len(f.order) > 0 && now.Sub(f.order[0].at) > f.lease {
		f.dropTomb()
	}
}

func (f *inflight) dropTomb() {
	t := f.order[0]
	f.order = f.order[1:]
	if at, ok := f.tombs[t.id]; ok && at.Equal(t.at) {
		delete(f.tombs, t.id)
	}
}

// leases returns the entries whose leases are to be renewed, by owner.
func (f *inflight) leases() map[string][]*entry {
	f.mu.Lock()
	defer f.mu.Unlock()
	byOwner := make(map[string][]*entry)
	for _, e := range f.ids {
		if e.owner != "" {
			byOwner[e.owner] = append(byOwner[e.owner], e)
		}
	}
	return byOwner
}

// renewed records the result of a renewal of es at now: the entries whose id
// is in lost leave the tracker and their listeners are cancelled; the others
// have their lease time moved to now. It returns how many queued or running
// deliveries it found lost; an entry whose outcome was being written is
// usually reported lost because the write has just landed, and is not
// counted.
func (f *inflight) renewed(es []*entry, lost []string, now time.Time) int {
	gone := make(map[string]bool, len(lost))
	for _, id := range lost {
		gone[id] = true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, e := range es {
		if e.gone {
			continue // left or replaced meanwhile
		}
		if !gone[e.id] {
			e.leasedAt = now
			continue
		}
		if e.state == active {
			n++
		}
		e.lost = true
		if e.cancel != nil {
			e.cancel(errLeaseLost)
		}
		f.removeLocked(e)
	}
	return n
}

// untrack forgets id whatever its entry: the dispatcher accepts it again.
// Used for events it gives back (lease released) without delivering them.
func (f *inflight) untrack(id string) {
	f.mu.Lock()
	f.untrackLocked(id)
	f.mu.Unlock()
}

func (f *inflight) untrackLocked(id string) {
	if e, ok := f.ids[id]; ok {
		e.gone = true
		delete(f.ids, id)
	}
}

// untrackAll forgets ids.
func (f *inflight) untrackAll(ids []string) {
	f.mu.Lock()
	for _, id := range ids {
		f.untrackLocked(id)
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
