// Package ordercheck checks listener calls against the guarantee of ordered
// delivery: for each key, the calls in the order they started never go back
// to an earlier event after a later one started (a redelivery of the event
// at the key's head is fine), and no call for event n+1 starts before a
// successful call for event n has finished.
//
// Events are identified by their key and their position in it (core.Event's
// Seq, which starts at 1 for a new key); the checker assumes every key it
// sees starts at 1, as on a fresh table. A Checker is safe for concurrent
// use: call Start when a listener call begins and Finish when it returns.
package ordercheck

import (
	"fmt"
	"sync"
)

// Checker records calls and the violations they show.
type Checker struct {
	mu         sync.Mutex
	keys       map[string]*key
	violations []string // the first maxViolations
	violated   int      // all of them
	calls      int
}

type key struct {
	started int64 // the highest seq whose call has started
	done    int64 // the highest seq a call finished successfully, in order
	running map[int64]int
}

// New returns an empty Checker.
func New() *Checker { return &Checker{keys: map[string]*key{}} }

// maxViolations bounds the violations kept (all are counted).
const maxViolations = 100

func (c *Checker) violate(format string, args ...any) {
	c.violated++
	if len(c.violations) < maxViolations {
		c.violations = append(c.violations, fmt.Sprintf(format, args...))
	}
}

func (c *Checker) get(k string) *key {
	st := c.keys[k]
	if st == nil {
		st = &key{running: map[int64]int{}}
		c.keys[k] = st
	}
	return st
}

// Start records the start of a call for event seq of key k, and checks it.
func (c *Checker) Start(k string, seq int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	st := c.get(k)
	switch {
	case seq < st.started:
		c.violate("key %s: call for event %d started after a call for event %d", k, seq, st.started)
	case seq > st.done+1:
		c.violate("key %s: call for event %d started before event %d finished", k, seq, st.done+1)
	}
	if seq > st.started {
		st.started = seq
	}
	st.running[seq]++
}

// Finish records the end of a call started for seq of key k; ok says the
// listener succeeded (the event goes DONE).
func (c *Checker) Finish(k string, seq int64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.get(k)
	if st.running[seq]--; st.running[seq] <= 0 {
		delete(st.running, seq)
	}
	if ok && seq == st.done+1 {
		st.done = seq
	}
}

// Skip records that event seq of key k finished without a successful call
// (it went DEAD under a policy that lets its key go on, or was skipped).
func (c *Checker) Skip(k string, seq int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.get(k); seq == st.done+1 {
		st.done = seq
	}
}

// Violations returns the number of violations and the first ones.
func (c *Checker) Violations() (int, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.violated, append([]string(nil), c.violations...)
}

// Calls returns how many calls started.
func (c *Checker) Calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// Done returns, per key, the highest seq delivered in order.
func (c *Checker) Done() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.keys))
	for k, st := range c.keys {
		out[k] = st.done
	}
	return out
}
