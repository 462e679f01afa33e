package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
)

func TestCloseDrainsQueues(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	h := newHarness(t, func(context.Context, core.Event) error { calls.Add(1); return nil }, nil)
	for i := range 50 {
		h.hot(fmt.Sprintf("hot-%02d", i))
		h.d.EnqueueCold(h.store.insertLeased(t, testOwner, newEnv(t, fmt.Sprintf("cold-%02d", i))))
	}
	h.start()
	h.close()
	if calls.Load() != 100 {
		t.Errorf("listener calls = %d, want 100", calls.Load())
	}
	for id, r := range h.store.rows {
		if r.Status != core.StatusDone {
			t.Errorf("%s is %v after a full drain", id, r.Status)
		}
	}
	if len(h.store.releases) != 0 {
		t.Errorf("releases %v after a full drain", h.store.releases)
	}
}

// When the drain does not finish in time, the running listener is cancelled
// and its event released without an attempt, and the queued events are
// released in one statement, so that another instance can claim them at once.
func TestCloseAfterDrainReleasesLeases(t *testing.T) {
	t.Parallel()
	for _, viaCtx := range []bool{false, true} {
		t.Run(fmt.Sprintf("close ctx cancelled %v", viaCtx), func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int64
			entered := make(chan struct{}, 1)
			h := newHarness(t, func(ctx context.Context, ev core.Event) error {
				calls.Add(1)
				entered <- struct{}{}
				<-ctx.Done()
				return ctx.Err()
			}, func(c *dispatch.Config) {
				c.Workers = 1
				if viaCtx {
					c.DrainTimeout = time.Hour // only Close's ctx can end the drain
				} else {
					c.DrainTimeout = 20 * time.Millisecond
				}
			})
			h.start()
			for i := range 10 {
				h.hot(fmt.Sprintf("ev-%d", i))
			}
			<-entered
			ctx := context.Background()
			if viaCtx {
				c, cancel := context.WithCancel(ctx)
				cancel()
				ctx = c
			}
			if err := h.d.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if calls.Load() != 1 {
				t.Errorf("listener calls = %d, want 1", calls.Load())
			}
			for i := range 10 {
				r := h.store.get(t, fmt.Sprintf("ev-%d", i))
				if r.Status != core.StatusNew || r.Attempts != 0 || r.LockedBy != "" {
					t.Errorf("ev-%d: %v attempts %d locked by %q, want NEW 0 unleased", i, r.Status, r.Attempts, r.LockedBy)
				}
			}
			if n := h.metrics.Counts().DispatchFailure + h.metrics.Counts().DispatchDead; n != 0 {
				t.Errorf("%d failures counted for a shutdown", n)
			}
			// One release for the interrupted event, one for the 9 queued.
			if len(h.store.releases) != 2 || len(h.store.releases[1]) != 9 {
				t.Errorf("releases = %v, want [[ev-0] [9 queued ids]]", h.store.releases)
			}
		})
	}
}

func TestLifecycleErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, nil)
	h.start()
	if err := h.d.Start(context.Background()); !errors.Is(err, core.ErrAlreadyStarted) {
		t.Errorf("second Start: %v, want ErrAlreadyStarted", err)
	}
	h.close()
	h.close()
	if err := h.d.Start(context.Background()); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Start after Close: %v, want ErrClosed", err)
	}
	if h.d.ColdCapacity() != 0 {
		t.Error("ColdCapacity > 0 after Close")
	}
}

func TestCloseBeforeStartReleasesQueued(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, nil)
	for i := range 3 {
		h.hot(fmt.Sprintf("ev-%d", i))
	}
	h.close()
	if err := h.d.Start(context.Background()); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Start after Close: %v, want ErrClosed", err)
	}
	for i := range 3 {
		if r := h.store.get(t, fmt.Sprintf("ev-%d", i)); r.LockedBy != "" {
			t.Errorf("ev-%d still leased by %q", i, r.LockedBy)
		}
	}
	if h.d.EnqueueHot(h.store.insertLeased(t, testOwner, newEnv(t, "late"))) {
		t.Error("EnqueueHot accepted after Close")
	}
}

// Cancelling Start's context shuts the dispatcher down like Close.
func TestStartContextCancelShutsDown(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	interrupted := make(chan struct{})
	h := newHarness(t, func(ctx context.Context, ev core.Event) error {
		close(entered)
		<-ctx.Done()
		close(interrupted)
		return ctx.Err()
	}, func(c *dispatch.Config) { c.DrainTimeout = 10 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	if err := h.d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	h.hot("ev-1")
	<-entered
	cancel()
	<-interrupted // only the shutdown cancels the listener's context
	h.close()
	if err := h.d.Start(context.Background()); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Start after cancelled start ctx: %v, want ErrClosed", err)
	}
	if r := h.store.get(t, "ev-1"); r.Status != core.StatusNew || r.LockedBy != "" {
		t.Errorf("ev-1: %v locked by %q, want NEW unleased", r.Status, r.LockedBy)
	}
}

// Start/Close stress: many cycles with concurrent Closes and enqueues racing
// the shutdown; TestMain's goleak check fails the run if anything leaks.
func TestStartCloseStress(t *testing.T) {
	t.Parallel()
	reg := core.NewRegistry()
	if err := reg.RegisterFunc(orders, orderPlaced, func(context.Context, core.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		st := newMemStore()
		d, err := dispatch.New(dispatch.Config{Store: st, DB: nopDB{}, Registry: reg, Workers: 3, HotQueueSize: 8})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		if err := d.Start(ctx); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			hook := d.WriterHook()
			for j := range 20 {
				ev := st.insertLeased(t, d.Owner(), newEnv(t, fmt.Sprintf("ev-%d-%d", i, j)))
				if err := hook.AfterCommit(context.Background(), []core.Envelope{ev.Envelope}); err != nil {
					t.Error(err)
				}
			}
		})
		for range 3 {
			wg.Go(func() {
				if err := d.Close(context.Background()); err != nil {
					t.Error(err)
				}
			})
		}
		if i%2 == 0 {
			cancel()
		}
		wg.Wait()
		cancel()
		st.mu.Lock()
		for id, r := range st.rows {
			if !r.Status.Terminal() && r.LockedBy != "" {
				t.Errorf("cycle %d: %s left leased", i, id)
			}
		}
		st.mu.Unlock()
	}
}
