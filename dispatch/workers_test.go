package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
)

// asyncListener declares itself asynchronous with InFlight n.
type asyncListener struct {
	core.ListenerFunc
	n int
}

func (a asyncListener) InFlight() int { return a.n }

var _ core.AsyncListener = asyncListener{}

// asyncBatch is an asyncListener that takes batches of up to max events.
type asyncBatch struct {
	asyncListener
	max int
}

func (a asyncBatch) MaxBatch() int { return a.max }

func (a asyncBatch) HandleBatch(context.Context, []core.Event) []error { return nil }

var _ core.BatchListener = asyncBatch{}

func TestWorkersSizedByAsyncListener(t *testing.T) {
	t.Parallel()
	noop := func(context.Context, core.Event) error { return nil }
	auto := func(c *dispatch.Config) { c.Workers = 0 }
	for _, tc := range []struct {
		name     string
		mod      func(*dispatch.Config)
		register func(*core.Registry) error
		want     int
	}{
		{"in-process listener keeps the default", auto, nil, dispatch.DefaultWorkers},
		{"async route", auto, func(r *core.Registry) error {
			return r.Register(core.AggregateName("Pay"), orderPlaced, asyncListener{noop, 256})
		}, 256},
		{"async fallback, largest InFlight wins", auto, func(r *core.Registry) error {
			if err := r.Register(core.AggregateName("Pay"), orderPlaced, asyncListener{noop, 64}); err != nil {
				return err
			}
			return r.RegisterFallback(asyncListener{noop, 300})
		}, 300},
		{"InFlight below the default", auto, func(r *core.Registry) error { return r.RegisterFallback(asyncListener{noop, 2}) }, dispatch.DefaultWorkers},
		{"InFlight capped", auto, func(r *core.Registry) error { return r.RegisterFallback(asyncListener{noop, 1 << 20}) }, 4096},
		{"batches of 256: an eighth of InFlight", auto, func(r *core.Registry) error {
			return r.RegisterFallback(asyncBatch{asyncListener{noop, 256}, 256})
		}, 32},
		{"batches of 2: enough to carry InFlight", auto, func(r *core.Registry) error {
			return r.RegisterFallback(asyncBatch{asyncListener{noop, 256}, 2})
		}, 128},
		{"batches of 1: none", auto, func(r *core.Registry) error {
			return r.RegisterFallback(asyncBatch{asyncListener{noop, 256}, 1})
		}, 256},
		{"batches, with interceptors: none", func(c *dispatch.Config) {
			c.Workers = 0
			c.Interceptors = []core.Interceptor{core.InterceptorFuncs{}}
		}, func(r *core.Registry) error {
			return r.RegisterFallback(asyncBatch{asyncListener{noop, 256}, 256})
		}, 256},
		{"explicit Workers win", func(c *dispatch.Config) { c.Workers = 8 }, func(r *core.Registry) error {
			return r.RegisterFallback(asyncListener{noop, 256})
		}, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, noop, tc.mod)
			// Registered after New: Start decides.
			if tc.register != nil {
				if err := tc.register(h.reg); err != nil {
					t.Fatal(err)
				}
			}
			h.start()
			if got := h.d.Workers(); got != tc.want {
				t.Errorf("Workers() = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestAsyncListenerCallsInFlight: the workers Start chose for an async
// listener are real: InFlight calls of the listener run at once (each waits
// until all of them have started).
func TestAsyncListenerCallsInFlight(t *testing.T) {
	t.Parallel()
	const n = 50
	var running atomic.Int64
	all := make(chan struct{})
	l := asyncListener{n: n, ListenerFunc: func(ctx context.Context, _ core.Event) error {
		if running.Add(1) == n {
			close(all)
		}
		select {
		case <-all:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	h := newHarness(t, nil, func(c *dispatch.Config) { c.Workers = 0 })
	if err := h.reg.RegisterFallback(l); err != nil {
		t.Fatal(err)
	}
	h.start()
	for i := range n {
		h.hot(fmt.Sprintf("ev-%02d", i))
	}
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		t.Fatalf("%d of %d calls running at once after 30 s (Workers() = %d)", running.Load(), n, h.d.Workers())
	}
}

// blockedRetries is a store whose MarkRetry waits for release, counting
// the calls inside it.
type blockedRetries struct {
	*memStore
	inside  atomic.Int64
	release chan struct{}
}

func (s *blockedRetries) MarkRetry(ctx context.Context, db core.DBTX, owner, id string, next time.Time, lastErr string) (bool, error) {
	s.inside.Add(1)
	defer s.inside.Add(-1)
	<-s.release
	return s.memStore.MarkRetry(ctx, db, owner, id, next, lastErr)
}

// TestWorkerWritesBounded: however many workers fail at once, at most 32
// write their outcome at once, so that the pool opens no more connections
// than that for them.
func TestWorkerWritesBounded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := &blockedRetries{release: make(chan struct{})}
		fail := core.ListenerFunc(func(context.Context, core.Event) error { return errors.New("broker down") })
		h := newHarness(t, fail, func(c *dispatch.Config) {
			st.memStore = c.Store.(*memStore)
			c.Store = st
			c.Workers = 100
			c.Logger = slog.New(slog.DiscardHandler)
		})
		h.start()
		for i := range 100 {
			h.hot(fmt.Sprintf("ev-%03d", i))
		}
		synctest.Wait() // every worker is in MarkRetry or waiting for a slot
		if n := st.inside.Load(); n != 32 {
			t.Errorf("%d write-backs at once, want 32", n)
		}
		close(st.release)
		synctest.Wait()
		if n := st.inside.Load(); n != 0 {
			t.Errorf("%d write-backs still running after the release", n)
		}
	})
}
