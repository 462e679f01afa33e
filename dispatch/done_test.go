package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
)

// newBatchHarness is newHarness over a store with core.BatchMarker, batches
// of size events and the given linger.
func newBatchHarness(t *testing.T, l core.ListenerFunc, size int, linger time.Duration, mod func(*dispatch.Config)) (*harness, *batchStore) {
	t.Helper()
	bs := newBatchStore()
	h := newHarness(t, l, func(c *dispatch.Config) {
		c.Store = bs
		c.DoneBatchSize = size
		c.DoneBatchLinger = linger
		if mod != nil {
			mod(c)
		}
	})
	h.store = bs.memStore
	return h, bs
}

// counter is a listener that counts its calls and signals when a number is
// reached.
type counter struct {
	mu      sync.Mutex
	calls   map[string]int
	total   int
	changed chan struct{}
}

func newCounter() *counter { return &counter{calls: map[string]int{}, changed: make(chan struct{})} }

func (c *counter) handle(_ context.Context, ev core.Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[ev.ID()]++
	c.total++
	close(c.changed)
	c.changed = make(chan struct{})
	return nil
}

// wait waits until the listener ran n times.
func (c *counter) wait(t *testing.T, n int) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		total, ch := c.total, c.changed
		c.mu.Unlock()
		if total >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %d deliveries (have %d)", n, total)
		}
	}
}

func countStatus(rows map[string]*core.Event, st core.Status) int {
	n := 0
	for _, r := range rows {
		if r.Status == st {
			n++
		}
	}
	return n
}

func batchSizes(calls []batchCall) []int {
	var out []int
	for _, c := range calls {
		out = append(out, len(c.ids))
	}
	return out
}

func TestDoneBatchFullBatchesAndFlushOnClose(t *testing.T) {
	t.Parallel()
	for _, cancelled := range []bool{false, true} {
		t.Run(fmt.Sprintf("close ctx cancelled=%v", cancelled), func(t *testing.T) {
			t.Parallel()
			c := newCounter()
			// The linger never expires: only full batches and Close write.
			h, bs := newBatchHarness(t, c.handle, 10, time.Hour, nil)
			h.start()
			for i := range 25 {
				h.hot(fmt.Sprintf("ev-%02d", i))
			}
			h.store.waitFor(t, "20 DONE", func(rows map[string]*core.Event) bool { return countStatus(rows, core.StatusDone) == 20 })
			c.wait(t, 25)
			// The last five are delivered but wait for their batch to fill.
			h.store.mu.Lock()
			done := countStatus(h.store.rows, core.StatusDone)
			h.store.mu.Unlock()
			if done != 20 {
				t.Fatalf("%d DONE before Close, want 20", done)
			}
			ctx := context.Background()
			if cancelled {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				cancel()
			}
			if err := h.d.Close(ctx); err != nil {
				t.Fatal(err)
			}
			// Close returned: the last batch is written.
			h.store.mu.Lock()
			done = countStatus(h.store.rows, core.StatusDone)
			h.store.mu.Unlock()
			if done != 25 {
				t.Errorf("%d DONE after Close, want 25", done)
			}
			calls := bs.calls()
			if got := batchSizes(calls); !slices.Equal(got, []int{10, 10, 5}) {
				t.Errorf("batch sizes %v, want [10 10 5]", got)
			}
			for _, call := range calls {
				if call.owner != testOwner {
					t.Errorf("batch owner %q, want %q", call.owner, testOwner)
				}
			}
			if s, e := h.metrics.Counts().DispatchSuccess, h.metrics.Counts().StoreError; s != 25 || e != 0 {
				t.Errorf("success=%d storeErrors=%d, want 25 and 0", s, e)
			}
		})
	}
}

func TestDoneBatchLingerWritesPartialBatch(t *testing.T) {
	t.Parallel()
	h, bs := newBatchHarness(t, func(context.Context, core.Event) error { return nil }, 100, time.Millisecond, nil)
	h.start()
	for i := range 3 {
		h.hot(fmt.Sprintf("ev-%d", i))
	}
	h.store.waitFor(t, "3 DONE", func(rows map[string]*core.Event) bool { return countStatus(rows, core.StatusDone) == 3 })
	n := 0
	for _, c := range bs.calls() {
		n += len(c.ids)
	}
	if n != 3 {
		t.Errorf("batches carried %d ids, want 3", n)
	}
}

func TestDoneBatchEventInFlightUntilWritten(t *testing.T) {
	t.Parallel()
	h, bs := newBatchHarness(t, func(context.Context, core.Event) error { return nil }, 10, time.Millisecond, nil)
	bs.entered, bs.gate = make(chan struct{}), make(chan struct{})
	h.start()
	ev := h.hot("ev-1")
	<-bs.entered // the DONE write has begun and is held
	if h.d.EnqueueHot(ev) {
		t.Error("EnqueueHot accepted an event whose DONE is being written")
	}
	// Our own poller re-claiming it: held (not released, not queued again),
	// so the DONE being written, fenced by our owner, still lands.
	if !h.d.EnqueueCold(ev) {
		t.Error("EnqueueCold refused (so the poller would release) an event whose DONE is being written")
	}
	close(bs.gate)
	h.store.waitStatus(t, "ev-1", core.StatusDone)
}

func TestDoneBatchStoreErrorIsNotListenerFailure(t *testing.T) {
	t.Parallel()
	c := newCounter()
	h, bs := newBatchHarness(t, c.handle, 3, time.Hour, nil)
	bs.setFailBatch(errors.New("database is down"))
	h.start()
	for i := range 3 {
		h.hot(fmt.Sprintf("ev-%d", i))
	}
	c.wait(t, 3)
	h.close() // waits for the batch write and the last try at shutdown
	calls := bs.calls()
	if len(calls) < 2 {
		t.Fatalf("%d DONE batch writes, want the failed one and at least the last try at shutdown", len(calls))
	}
	for _, call := range calls {
		if len(call.ids) != 3 {
			t.Fatalf("batch sizes %v, want every try with the 3 events", batchSizes(calls))
		}
	}
	if s, f, e := h.metrics.Counts().DispatchSuccess, h.metrics.Counts().DispatchFailure, h.metrics.Counts().StoreError; s != 3 || f != 0 || e != int64(len(calls)) {
		t.Errorf("success=%d failure=%d storeErrors=%d, want 3, 0, %d (one per failed write)", s, f, e, len(calls))
	}
	for i := range 3 {
		ev := h.store.get(t, fmt.Sprintf("ev-%d", i))
		// Left leased for the lease to expire; no attempt charged.
		if ev.Status != core.StatusNew || ev.Attempts != 0 || ev.LockedBy != testOwner {
			t.Errorf("%s: %v attempts=%d locked_by=%q, want NEW, 0, %q", ev.ID(), ev.Status, ev.Attempts, ev.LockedBy, testOwner)
		}
	}
	if c.total != 3 {
		t.Errorf("listener ran %d times, want 3", c.total)
	}
}

// TestDoneBatchRetriesFailedWrite: a DONE write that failed is tried again
// until it lands, and its events stay in flight meanwhile: the poller
// offering one of them again (its lease expired) does not deliver it twice.
func TestDoneBatchRetriesFailedWrite(t *testing.T) {
	t.Parallel()
	c := newCounter()
	h, bs := newBatchHarness(t, c.handle, 2, time.Hour, nil)
	bs.setFailBatch(errors.New("database is down"))
	h.start()
	a, _ := h.hot("ev-a"), h.hot("ev-b")
	c.wait(t, 2)
	h.store.waitFor(t, "a retry of the failed DONE write", func(map[string]*core.Event) bool { return len(bs.calls()) >= 2 })
	if !h.d.EnqueueCold(a) {
		t.Fatal("EnqueueCold refused an event whose DONE is being retried; want it held")
	}
	bs.setFailBatch(nil)
	h.store.waitStatus(t, "ev-a", core.StatusDone)
	h.store.waitStatus(t, "ev-b", core.StatusDone)
	h.close()
	if c.total != 2 {
		t.Errorf("listener ran %d times, want 2", c.total)
	}
	calls := bs.calls()
	if e := h.metrics.Counts().StoreError; e != int64(len(calls)-1) {
		t.Errorf("storeErrors=%d after %d writes of which the last landed", e, len(calls))
	}
}

func TestDoneBatchOnePerOwner(t *testing.T) {
	t.Parallel()
	h, bs := newBatchHarness(t, func(context.Context, core.Event) error { return nil }, 4, time.Hour, nil)
	h.start()
	h.hot("hot-1")
	h.hot("hot-2")
	for _, id := range []string{"cold-1", "cold-2"} {
		ev := h.store.insertLeased(t, "other-owner", newEnv(t, id))
		if !h.d.EnqueueCold(ev) {
			t.Fatalf("EnqueueCold(%s) refused", id)
		}
	}
	h.store.waitFor(t, "4 DONE", func(rows map[string]*core.Event) bool { return countStatus(rows, core.StatusDone) == 4 })
	got := map[string][]string{}
	for _, c := range bs.calls() {
		got[c.owner] = append(got[c.owner], c.ids...)
	}
	for owner, want := range map[string][]string{testOwner: {"hot-1", "hot-2"}, "other-owner": {"cold-1", "cold-2"}} {
		ids := slices.Sorted(slices.Values(got[owner]))
		if !slices.Equal(ids, want) {
			t.Errorf("owner %s: ids %v, want %v", owner, ids, want)
		}
	}
	if len(bs.calls()) != 2 {
		t.Errorf("%d MarkDoneBatch calls, want 2 (one per owner)", len(bs.calls()))
	}
}

func TestDoneBatchSizeOneWritesEachEvent(t *testing.T) {
	t.Parallel()
	h, bs := newBatchHarness(t, func(context.Context, core.Event) error { return nil }, 1, 0, nil)
	h.start()
	for i := range 3 {
		h.hot(fmt.Sprintf("ev-%d", i))
	}
	h.store.waitFor(t, "3 DONE", func(rows map[string]*core.Event) bool { return countStatus(rows, core.StatusDone) == 3 })
	if n := len(bs.calls()); n != 0 {
		t.Errorf("%d MarkDoneBatch calls with DoneBatchSize 1, want 0", n)
	}
}

// Many producers, hot and cold, with small batches and a short linger: every
// event is delivered once and written DONE once.
func TestDoneBatchStress(t *testing.T) {
	t.Parallel()
	const producers, perProducer = 4, 500
	c := newCounter()
	h, bs := newBatchHarness(t, c.handle, 16, 100*time.Microsecond, func(cfg *dispatch.Config) {
		cfg.Workers = 4
		cfg.HotQueueSize = producers * perProducer
		cfg.ColdQueueSize = producers * perProducer
	})
	h.start()
	var wg sync.WaitGroup
	var refused atomic.Int64
	for p := range producers {
		wg.Go(func() {
			for i := range perProducer {
				id := fmt.Sprintf("p%d-%04d", p, i)
				ev := h.store.insertLeased(t, testOwner, newEnv(t, id))
				ok := false
				if i%2 == 0 {
					ok = h.d.EnqueueHot(ev)
				} else {
					ok = h.d.EnqueueCold(ev)
				}
				if !ok {
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if refused.Load() != 0 {
		t.Fatalf("%d events refused", refused.Load())
	}
	const total = producers * perProducer
	h.store.waitFor(t, "all DONE", func(rows map[string]*core.Event) bool { return countStatus(rows, core.StatusDone) == total })
	h.close()
	seen := map[string]bool{}
	for _, call := range bs.calls() {
		for _, id := range call.ids {
			if seen[id] {
				t.Errorf("%s written DONE twice", id)
			}
			seen[id] = true
		}
	}
	if len(seen) != total {
		t.Errorf("%d ids written DONE, want %d", len(seen), total)
	}
	for id, n := range c.calls {
		if n != 1 {
			t.Errorf("%s delivered %d times", id, n)
		}
	}
}

// memDoneStore keeps the DONE of the ids in memory in memory, as delivery
// by position does (delivery.MemoryDone); every other DONE is written.
type memDoneStore struct {
	*batchStore
	memory   map[string]bool // ids whose DONE is kept in memory; read-only once started
	resolved chan string     // each id ResolveDone resolved
}

func (s *memDoneStore) ResolveDone(_ context.Context, id string) bool {
	if !s.memory[id] {
		return false
	}
	s.resolved <- id
	return true
}

// waitResolved waits for ResolveDone to resolve id.
func (s *memDoneStore) waitResolved(t *testing.T, id string) {
	t.Helper()
	select {
	case got := <-s.resolved:
		if got != id {
			t.Fatalf("ResolveDone resolved %s, want %s", got, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("ResolveDone was not called for %s", id)
	}
}

func TestDoneInMemoryIsNotWritten(t *testing.T) {
	t.Parallel()
	ms := &memDoneStore{batchStore: newBatchStore(), memory: map[string]bool{"ev-mem": true}, resolved: make(chan string, 2)}
	h := newHarness(t, func(context.Context, core.Event) error { return nil }, func(c *dispatch.Config) {
		c.Store = ms
		c.DoneBatchSize = 10
		c.DoneBatchLinger = time.Hour // a DONE that took the write-back would wait for Close
	})
	h.store = ms.memStore
	h.start()
	ev := h.hot("ev-mem")
	h.hot("ev-row")
	ms.waitResolved(t, "ev-mem")
	// Let go at once, not held until a write: the same event is taken
	// again (a redelivery, as a second read of its position would be,
	// leased anew by the dispatcher's clock).
	ev.LockedAt = t0.Add(time.Minute)
	deadline := time.Now().Add(10 * time.Second)
	for !h.d.EnqueueHot(ev) {
		if time.Now().After(deadline) {
			t.Fatal("the event whose DONE was resolved in memory is still held by the dispatcher")
		}
		time.Sleep(time.Millisecond)
	}
	ms.waitResolved(t, "ev-mem")
	h.close()
	calls := ms.calls()
	if len(calls) != 1 || !slices.Equal(calls[0].ids, []string{"ev-row"}) {
		t.Errorf("MarkDoneBatch calls %v, want one with ev-row alone", calls)
	}
	if got := h.store.get(t, "ev-mem").Status; got == core.StatusDone {
		t.Error("the row of the event resolved in memory was marked DONE")
	}
	if got := h.store.get(t, "ev-row").Status; got != core.StatusDone {
		t.Errorf("ev-row status %v, want DONE", got)
	}
}
