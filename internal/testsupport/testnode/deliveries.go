package testnode

import (
	"maps"
	"sync"
	"testing"
	"time"
)

// DeliveryLog records listener calls in memory: how many per event id and
// when the first one happened. Listeners call Record; the test waits on the
// counts with WaitFor. It is safe for concurrent use.
type DeliveryLog struct {
	// OnTimeout, if set, runs before WaitFor fails the test, with a copy of
	// the call counts, to log what is stuck. Set it before the log is shared.
	OnTimeout func(calls map[string]int)

	mu      sync.Mutex
	calls   map[string]int
	first   map[string]time.Time
	changed chan struct{} // closed and replaced on every call
}

// NewDeliveryLog returns an empty log.
func NewDeliveryLog() *DeliveryLog {
	return &DeliveryLog{calls: map[string]int{}, first: map[string]time.Time{}, changed: make(chan struct{})}
}

// Record counts a call of id and returns how many there were so far,
// this one included.
func (l *DeliveryLog) Record(id string) int {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls[id]++
	if l.calls[id] == 1 {
		l.first[id] = now
	}
	close(l.changed)
	l.changed = make(chan struct{})
	return l.calls[id]
}

// Count returns how many calls of id there were.
func (l *DeliveryLog) Count(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[id]
}

// FirstAt returns when id was first recorded, and false if it never was.
func (l *DeliveryLog) FirstAt(id string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.first[id]
	return at, ok
}

// Distinct returns how many ids were delivered at least once.
func (l *DeliveryLog) Distinct() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.calls)
}

// Duplicates returns the events delivered more than once and the deliveries
// beyond the first of each.
func (l *DeliveryLog) Duplicates() (events, extra int) {
	return l.DuplicatesBeyond(func(string) int { return 1 })
}

// DuplicatesBeyond is Duplicates for events expected to be delivered
// expected(id) times.
func (l *DeliveryLog) DuplicatesBeyond(expected func(id string) int) (events, extra int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, c := range l.calls {
		if want := expected(id); c > want {
			events++
			extra += c - want
		}
	}
	return events, extra
}

// Holds reports whether cond holds on the call counts now. cond must not
// keep or change the map.
func (l *DeliveryLog) Holds(cond func(calls map[string]int) bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return cond(l.calls)
}

// WaitFor waits until cond holds on the call counts, checking it at every
// call. After timeout it runs OnTimeout and fails the test, saying what it
// waited for and how many distinct events were delivered. cond must not keep
// or change the map.
func (l *DeliveryLog) WaitFor(t testing.TB, timeout time.Duration, what string, cond func(calls map[string]int) bool) {
	t.Helper()
	if Await(timeout, func() (bool, <-chan struct{}) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return cond(l.calls), l.changed
	}) {
		return
	}
	l.mu.Lock()
	calls := maps.Clone(l.calls)
	l.mu.Unlock()
	if l.OnTimeout != nil {
		l.OnTimeout(calls)
	}
	t.Fatalf("timed out after %s waiting for %s (%d distinct events delivered)", timeout, what, len(calls))
}

// AllDelivered is a WaitFor condition: every id has at least one call.
func AllDelivered(ids []string) func(calls map[string]int) bool {
	return func(calls map[string]int) bool {
		for _, id := range ids {
			if calls[id] == 0 {
				return false
			}
		}
		return true
	}
}

// Await waits for a condition on state that announces its changes: check
// reports, under the state's lock, whether the condition holds and the
// channel that the state's next change will close. Await calls check again
// each time that channel is closed, and returns true once the condition
// holds, or false when timeout has passed first.
func Await(timeout time.Duration, check func() (ok bool, changed <-chan struct{})) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		ok, changed := check()
		if ok {
			return true
		}
		select {
		case <-changed:
		case <-deadline.C:
			return false
		}
	}
}
