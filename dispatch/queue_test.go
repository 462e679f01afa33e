package dispatch_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
)

// TestFairness pre-fills both queues behind a blocked worker, then measures
// the order in which one worker drains them: two hot events for every cold
// one while both have work, so the cold queue empties long before the hot one.
func TestFairness(t *testing.T) {
	t.Parallel()
	const nHot, nCold = 300, 30
	var (
		mu      sync.Mutex
		order   []string
		entered = make(chan struct{})
		gate    = make(chan struct{})
	)
	h := newHarness(t, func(_ context.Context, ev core.Event) error {
		if ev.ID() == "blocker" {
			close(entered)
			<-gate
			return nil
		}
		mu.Lock()
		order = append(order, ev.ID())
		mu.Unlock()
		return nil
	}, func(c *dispatch.Config) {
		c.Workers = 1
		c.HotQueueSize = nHot
		c.ColdQueueSize = nCold
	})
	h.start()
	h.hot("blocker")
	<-entered
	for i := range nHot {
		h.hot(fmt.Sprintf("hot-%03d", i))
	}
	for i := range nCold {
		ev := h.store.insertLeased(t, testOwner, newEnv(t, fmt.Sprintf("cold-%03d", i)))
		if !h.d.EnqueueCold(ev) {
			t.Fatal("EnqueueCold refused")
		}
	}
	if got := h.d.ColdCapacity(); got != 0 {
		t.Fatalf("ColdCapacity = %d with a full cold queue", got)
	}
	close(gate)
	h.close() // drains everything

	mu.Lock()
	defer mu.Unlock()
	if len(order) != nHot+nCold {
		t.Fatalf("processed %d events, want %d", len(order), nHot+nCold)
	}
	hot := 0
	for _, id := range order[:30] {
		if strings.HasPrefix(id, "hot") {
			hot++
		}
	}
	if hot < 19 || hot > 21 {
		t.Errorf("first 30 deliveries: %d hot, want 20 (2:1)", hot)
	}
	lastCold := 0
	for i, id := range order {
		if strings.HasPrefix(id, "cold") {
			lastCold = i
		}
	}
	// At 2:1 the 30th cold event is about the 90th delivery; strict hot
	// priority would put it after all 300 hot ones.
	if lastCold > 95 {
		t.Errorf("last cold event delivered at position %d of %d: cold starved under hot load", lastCold, len(order))
	}
}

// With only one queue holding work, a worker takes it on every turn.
func TestWorkerUsesEitherQueue(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	h := newHarness(t, func(context.Context, core.Event) error { calls.Add(1); return nil },
		func(c *dispatch.Config) { c.Workers = 1 })
	for i := range 20 {
		ev := h.store.insertLeased(t, testOwner, newEnv(t, fmt.Sprintf("cold-%02d", i)))
		h.d.EnqueueCold(ev)
	}
	h.start()
	h.store.waitFor(t, "all cold events done", func(rows map[string]*core.Event) bool {
		for _, r := range rows {
			if r.Status != core.StatusDone {
				return false
			}
		}
		return true
	})
	if calls.Load() != 20 {
		t.Errorf("calls = %d, want 20", calls.Load())
	}
}

func TestDuplicateEnqueueRefused(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	h := newHarness(t, func(context.Context, core.Event) error { calls.Add(1); return nil }, nil)
	ev := h.store.insertLeased(t, testOwner, newEnv(t, "ev-1"))
	if !h.d.EnqueueHot(ev) {
		t.Fatal("first EnqueueHot refused")
	}
	if h.d.EnqueueHot(ev) {
		t.Error("second EnqueueHot of the same id accepted")
	}
	capBefore := h.d.ColdCapacity()
	// The poller renewed our own lease: the dispatcher still holds the event.
	if !h.d.EnqueueCold(ev) {
		t.Error("EnqueueCold of an id held under our lease: got false, want true (held)")
	}
	other := ev
	other.LockedBy = "owner-2"
	if h.d.EnqueueCold(other) {
		t.Error("EnqueueCold of a queued id under another owner accepted")
	}
	if got := h.d.ColdCapacity(); got != capBefore {
		t.Errorf("ColdCapacity %d -> %d: a duplicate was queued", capBefore, got)
	}
	if n := h.metrics.Counts().HotDropped; n != 1 {
		t.Errorf("HotDropped = %d, want 1", n)
	}
	h.start()
	h.store.waitStatus(t, "ev-1", core.StatusDone)
	h.close()
	if calls.Load() != 1 {
		t.Errorf("listener calls = %d, want 1", calls.Load())
	}
	if h.d.EnqueueHot(ev) || h.d.EnqueueCold(ev) {
		t.Error("enqueue accepted after Close")
	}
}

// Many goroutines enqueue the same few ids on both queues while eight workers
// run: the listener must never see one id twice at the same time.
func TestSameIDNeverProcessedConcurrently(t *testing.T) {
	t.Parallel()
	const ids, rounds = 5, 2000
	var (
		mu        sync.Mutex
		active    = map[string]int{}
		maxActive int
		calls     atomic.Int64
	)
	h := newHarness(t, func(_ context.Context, ev core.Event) error {
		calls.Add(1)
		mu.Lock()
		active[ev.ID()]++
		maxActive = max(maxActive, active[ev.ID()])
		mu.Unlock()
		runtime.Gosched()
		mu.Lock()
		active[ev.ID()]--
		mu.Unlock()
		return nil
	}, func(c *dispatch.Config) { c.Workers = 8 })
	evs := make([]core.Event, ids)
	for i := range evs {
		evs[i] = h.store.insertLeased(t, testOwner, newEnv(t, fmt.Sprintf("ev-%d", i)))
	}
	h.start()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for r := range rounds {
				ev := evs[(g+r)%ids]
				if r%2 == 0 {
					h.d.EnqueueHot(ev)
				} else {
					h.d.EnqueueCold(ev)
				}
			}
		})
	}
	wg.Wait()
	h.close()
	if maxActive != 1 {
		t.Errorf("an id was processed by %d workers at once", maxActive)
	}
	if calls.Load() < ids {
		t.Errorf("calls = %d, want at least %d", calls.Load(), ids)
	}
}
