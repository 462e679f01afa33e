package poller_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/poller"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const owner = "owner-1"

func newPoller(t *testing.T, st *fakeStore, h poller.Handler, mod func(*poller.Config)) *poller.Poller {
	t.Helper()
	cfg := poller.Config{Store: st, DB: nopDB{}, Handler: h, Owner: owner}
	if mod != nil {
		mod(&cfg)
	}
	p, err := poller.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	good := poller.Config{Store: newFakeStore(), DB: nopDB{}, Handler: &fakeHandler{}}
	tests := []struct {
		name string
		mod  func(*poller.Config)
	}{
		{"no store", func(c *poller.Config) { c.Store = nil }},
		{"no db", func(c *poller.Config) { c.DB = nil }},
		{"no handler", func(c *poller.Config) { c.Handler = nil }},
		{"long owner", func(c *poller.Config) { c.Owner = strings.Repeat("o", 129) }},
		{"negative lease", func(c *poller.Config) { c.LeaseTimeout = -time.Second }},
		{"negative skip", func(c *poller.Config) { c.SkipRecent = -time.Second }},
		{"negative batch", func(c *poller.Config) { c.BatchSize = -1 }},
		{"negative interval", func(c *poller.Config) { c.Interval = -time.Second }},
		{"negative busy interval", func(c *poller.Config) { c.BusyInterval = -time.Second }},
		{"negative busy for", func(c *poller.Config) { c.BusyFor = -time.Second }},
	}
	for _, tt := range tests {
		cfg := good
		tt.mod(&cfg)
		if _, err := poller.New(cfg); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", tt.name, err)
		}
	}
	p, err := poller.New(good)
	if err != nil {
		t.Fatal(err)
	}
	if p.Owner() == "" {
		t.Error("no default owner")
	}

	// A handler with an owner lends it, and gets the poller's WakeAt.
	oh := &ownerHandler{owner: "dispatcher-owner"}
	good.Handler = oh
	p, err = poller.New(good)
	if err != nil {
		t.Fatal(err)
	}
	if p.Owner() != "dispatcher-owner" {
		t.Errorf("Owner = %q, want the handler's", p.Owner())
	}
	if oh.wakeups.Load() == nil {
		t.Error("poller did not subscribe to the handler's due times")
	}
}

func TestPollOnceClaimsNoMoreThanCapacity(t *testing.T) {
	t.Parallel()
	now := time.Now()
	st := newFakeStore()
	st.add(t, "ev", 200, now.Add(-time.Minute))
	h := &fakeHandler{capacity: 7}
	p := newPoller(t, st, h, func(c *poller.Config) {
		c.Now = func() time.Time { return now }
		c.SkipRecent = time.Second
		c.LeaseTimeout = time.Minute
	})
	n, err := p.PollOnce(context.Background())
	if err != nil || n != 7 {
		t.Fatalf("PollOnce = %d, %v; want 7", n, err)
	}
	want := core.ClaimParams{Owner: owner, Now: now, LeaseTimeout: time.Minute, SkipRecent: time.Second, Limit: 7}
	if st.claims[0] != want {
		t.Errorf("claim params = %+v, want %+v", st.claims[0], want)
	}
	for _, ev := range h.got {
		if ev.LockedBy != owner {
			t.Errorf("%s handed over with LockedBy %q", ev.ID(), ev.LockedBy)
		}
	}
	// No capacity: no claim at all.
	if n, err := p.PollOnce(context.Background()); n != 0 || err != nil || st.claimCount() != 1 {
		t.Errorf("full handler: PollOnce = %d, %v after %d claims; want 0, nil, 1", n, err, st.claimCount())
	}
	// The first claim came back full (7 of 7): the next one asks for twice
	// the batch, and gets what is left.
	h.setCapacity(1000)
	if n, _ := p.PollOnce(context.Background()); n != 200-7 {
		t.Errorf("PollOnce = %d, want the %d rows left (a claim of %d)", n, 200-7, 2*poller.DefaultBatchSize)
	}
	if got := st.claims[len(st.claims)-1].Limit; got != 2*poller.DefaultBatchSize {
		t.Errorf("claim after a full one asked for %d rows, want %d", got, 2*poller.DefaultBatchSize)
	}
}

func TestPollOnceReleasesRefused(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	st.add(t, "ev", 5, time.Now().Add(-time.Minute))
	h := &fakeHandler{capacity: 5, refuse: map[string]bool{"ev-001": true, "ev-003": true}}
	p := newPoller(t, st, h, nil)
	n, err := p.PollOnce(context.Background())
	if err != nil || n != 3 {
		t.Fatalf("PollOnce = %d, %v; want 3", n, err)
	}
	if len(st.releases) != 1 || strings.Join(st.releases[0], ",") != "ev-001,ev-003" {
		t.Errorf("releases = %v, want one release of [ev-001 ev-003]", st.releases)
	}
	if got := st.leasedBy(owner); got != 3 {
		t.Errorf("%d rows leased, want the 3 accepted", got)
	}
}

// TestPollOnceRetriesFailedRelease: refused events whose release failed are
// released at the start of the next cycle instead of waiting for their lease
// to expire; after half the lease timeout the poller gives up.
func TestPollOnceRetriesFailedRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newFakeStore()
	clock := time.Now()
	st.add(t, "ev", 2, clock.Add(-time.Minute))
	h := &fakeHandler{capacity: 100, refuse: map[string]bool{"ev-000": true, "ev-001": true}}
	p := newPoller(t, st, h, func(c *poller.Config) {
		c.Now = func() time.Time { return clock }
		c.LeaseTimeout = time.Minute
	})
	down := errors.New("connection reset")
	st.setReleaseErr(down)
	if _, err := p.PollOnce(ctx); !errors.Is(err, down) {
		t.Fatalf("PollOnce with a failing release = %v, want %v", err, down)
	}
	if got := st.leasedBy(owner); got != 2 {
		t.Fatalf("%d rows leased after the failed release, want 2", got)
	}
	st.setReleaseErr(nil)
	clock = clock.Add(time.Second)
	if _, err := p.PollOnce(ctx); err != nil {
		t.Fatal(err)
	}
	// The failed release, the retry, then the same rows claimed again,
	// refused again and released.
	want := [][]string{{"ev-000", "ev-001"}, {"ev-000", "ev-001"}, {"ev-000", "ev-001"}}
	if got := st.releaseCalls(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("releases = %v, want %v", got, want)
	}
	if got := st.leasedBy(owner); got != 0 {
		t.Fatalf("%d rows leased after the retry, want 0", got)
	}

	// Failing until half the lease timeout has passed: given up.
	st.setReleaseErr(down)
	if _, err := p.PollOnce(ctx); !errors.Is(err, down) {
		t.Fatalf("PollOnce with a failing release = %v, want %v", err, down)
	}
	clock = clock.Add(30 * time.Second)
	st.setReleaseErr(nil)
	calls := len(st.releaseCalls())
	if _, err := p.PollOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(st.releaseCalls()); got != calls {
		t.Errorf("%d more releases after half the lease timeout, want none", got-calls)
	}
	if got := st.leasedBy(owner); got != 2 {
		t.Errorf("%d rows leased, want 2 left to their lease", got)
	}
}

func TestPollOnceUndecodableRowsGoDead(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	st.add(t, "ev", 2, time.Now().Add(-time.Minute))
	st.bad = []core.RowError{{ID: "broken", Err: errors.New("headers: invalid JSON")}}
	m := &countMetrics{}
	p := newPoller(t, st, &fakeHandler{capacity: 10}, func(c *poller.Config) { c.Metrics = m })
	n, err := p.PollOnce(context.Background())
	if err != nil || n != 2 {
		t.Fatalf("PollOnce = %d, %v; want 2", n, err)
	}
	if msg := st.dead["broken"]; !strings.Contains(msg, "headers: invalid JSON") {
		t.Errorf("dead row last_error = %q", msg)
	}
	if m.dead.Load() != 1 {
		t.Errorf("DispatchDead = %d, want 1", m.dead.Load())
	}
}

func TestPollOnceClaimError(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	st.claimErr = errors.New("connection refused")
	m := &countMetrics{}
	p := newPoller(t, st, &fakeHandler{capacity: 10}, func(c *poller.Config) { c.Metrics = m })
	_, err := p.PollOnce(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), "poller: ") || !errors.Is(err, st.claimErr) {
		t.Errorf("err = %v, want claim events: ... wrapping the store error", err)
	}
	if m.storeErrors.Load() != 1 {
		t.Errorf("StoreError = %d, want 1", m.storeErrors.Load())
	}
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	p := newPoller(t, newFakeStore(), &fakeHandler{}, nil)
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); !errors.Is(err, core.ErrAlreadyStarted) {
		t.Errorf("second Start: %v", err)
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if err := p.Close(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := p.Start(context.Background()); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Start after Close: %v", err)
	}
	if _, err := p.PollOnce(context.Background()); !errors.Is(err, core.ErrClosed) {
		t.Errorf("PollOnce after Close: %v", err)
	}
	p.Wake() // harmless after Close

	// Close without Start, and Start's ctx cancelled.
	q := newPoller(t, newFakeStore(), &fakeHandler{}, nil)
	if err := q.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := newPoller(t, newFakeStore(), &fakeHandler{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Start after cancelled start ctx: %v", err)
	}
}

// The loop's timing runs on synctest's fake clock: time advances only when
// every goroutine in the bubble is blocked, so the assertions are exact.
func TestLoopTiming(t *testing.T) {
	t.Parallel()
	t.Run("interval", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			st := newFakeStore()
			p := newPoller(t, st, &fakeHandler{capacity: 100}, func(c *poller.Config) { c.Interval = time.Second })
			if err := p.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			if n := st.claimCount(); n != 1 {
				t.Fatalf("claims at start = %d, want 1", n)
			}
			time.Sleep(999 * time.Millisecond)
			synctest.Wait()
			if n := st.claimCount(); n != 1 {
				t.Fatalf("claims before the interval = %d, want 1", n)
			}
			time.Sleep(time.Millisecond)
			synctest.Wait()
			if n := st.claimCount(); n != 2 {
				t.Fatalf("claims after one interval = %d, want 2", n)
			}
			if err := p.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("backlog drains without waiting", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			st := newFakeStore()
			st.add(t, "ev", 120, time.Now().Add(-time.Minute))
			h := &fakeHandler{capacity: 1000}
			p := newPoller(t, st, h, func(c *poller.Config) { c.Interval = time.Hour; c.BatchSize = 50 })
			if err := p.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			// 50 + 50 + 20: the short batch ends the backlog.
			if n, got := st.claimCount(), h.received(); n != 3 || got != 120 {
				t.Fatalf("claims = %d, received = %d; want 3, 120 at once", n, got)
			}
			_ = p.Close(context.Background())
		})
	})
	t.Run("backlog waits for capacity, not for the interval", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			st := newFakeStore()
			st.add(t, "ev", 100, time.Now().Add(-time.Minute))
			h := &fakeHandler{capacity: 50}
			p := newPoller(t, st, h, func(c *poller.Config) { c.Interval = time.Hour })
			if err := p.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			if got := h.received(); got != 50 {
				t.Fatalf("received %d, want 50", got)
			}
			h.setCapacity(50) // the dispatcher worked through its queue
			time.Sleep(time.Second)
			synctest.Wait()
			if got := h.received(); got != 100 {
				t.Fatalf("received %d a second after capacity freed, want 100", got)
			}
			_ = p.Close(context.Background())
		})
	})
	t.Run("a batch refused entirely is not chased", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			st := newFakeStore()
			st.add(t, "ev", 100, time.Now().Add(-time.Minute))
			refuse := map[string]bool{}
			for i := range 100 {
				refuse[fmt.Sprintf("ev-%03d", i)] = true
			}
			h := &fakeHandler{capacity: 1000, refuse: refuse}
			p := newPoller(t, st, h, func(c *poller.Config) { c.Interval = time.Hour })
			if err := p.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			if n := st.claimCount(); n != 1 {
				t.Fatalf("claims = %d, want 1 (no tight re-claim loop)", n)
			}
			if got := st.leasedBy(owner); got != 0 {
				t.Errorf("%d refused rows left leased", got)
			}
			_ = p.Close(context.Background())
		})
	})
	t.Run("Wake and WakeAt", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			st := newFakeStore()
			p := newPoller(t, st, &fakeHandler{capacity: 100}, func(c *poller.Config) { c.Interval = time.Hour })
			if err := p.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			p.Wake()
			synctest.Wait()
			if n := st.claimCount(); n != 2 {
				t.Fatalf("claims after Wake = %d, want 2", n)
			}
			// Requests made while a poll runs are served by one more poll:
			// they may be for events that poll did not see.
			release := st.holdClaims()
			p.Wake()
			synctest.Wait() // the poll is waiting in Claim
			p.Wake()
			p.Wake() // coalesces with the one before
			release()
			synctest.Wait()
			if n := st.claimCount(); n != 4 {
				t.Fatalf("claims after Wakes during a poll = %d, want 4", n)
			}
			start := time.Now()
			p.WakeAt(start.Add(300 * time.Millisecond))
			p.WakeAt(start.Add(200 * time.Millisecond)) // earlier: polled first
			p.WakeAt(start.Add(200 * time.Millisecond)) // the same time: one poll
			synctest.Wait()
			time.Sleep(199 * time.Millisecond)
			synctest.Wait()
			if n := st.claimCount(); n != 4 {
				t.Fatalf("claims before the first due time = %d, want 4", n)
			}
			time.Sleep(2 * time.Millisecond)
			synctest.Wait()
			if n := st.claimCount(); n != 5 {
				t.Fatalf("claims at the first due time = %d, want 5", n)
			}
			// The later request is still pending: a poll for the earlier
			// one must not swallow it.
			time.Sleep(101 * time.Millisecond) // past 300 ms plus the due slack
			synctest.Wait()
			if n := st.claimCount(); n != 6 {
				t.Fatalf("claims at the second due time = %d, want 6", n)
			}
			time.Sleep(time.Second)
			synctest.Wait()
			if n := st.claimCount(); n != 6 {
				t.Fatalf("claims after the due times = %d, want 6", n)
			}

			// A request made while an earlier one is pending and the poll
			// for that one runs: both are served (the dispatcher asks for
			// a retry's due time while the poll that claimed the event is
			// still running).
			now := time.Now()
			p.WakeAt(now)
			p.WakeAt(now.Add(50 * time.Millisecond))
			time.Sleep(time.Second)
			synctest.Wait()
			if n := st.claimCount(); n != 8 {
				t.Fatalf("claims after two requests = %d, want 8", n)
			}
			_ = p.Close(context.Background())
		})
	})
	t.Run("claim errors back off up to the interval", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			st := newFakeStore()
			st.claimErr = errors.New("database is down")
			p := newPoller(t, st, &fakeHandler{capacity: 100}, func(c *poller.Config) { c.Interval = time.Second })
			if err := p.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			var at []time.Duration
			for range 7 {
				synctest.Wait()
				n := st.claimCount()
				for st.claimCount() == n {
					time.Sleep(time.Millisecond)
					synctest.Wait()
				}
				at = append(at, time.Since(start))
			}
			// Failures at 0; next polls after 100, 200, 400, 800, 1000, 1000 ms.
			want := []time.Duration{100, 300, 700, 1500, 2500, 3500, 4500}
			for i := range want {
				if at[i] != want[i]*time.Millisecond {
					t.Fatalf("polls at %v, want %v ms", at, want)
				}
			}
			st.mu.Lock()
			st.claimErr = nil
			st.mu.Unlock()
			time.Sleep(time.Second)
			synctest.Wait()
			n := st.claimCount()
			time.Sleep(time.Second)
			synctest.Wait()
			if st.claimCount() != n+1 {
				t.Errorf("after recovery: %d claims in one interval, want 1", st.claimCount()-n)
			}
			_ = p.Close(context.Background())
		})
	})
}

// leaseHandler is a handler that tells its lease, as *dispatch.Dispatcher
// does.
type leaseHandler struct {
	fakeHandler
	lease time.Duration
}

func (h *leaseHandler) LeaseTimeout() time.Duration { return h.lease }

// One lease: the poller takes its handler's, and rejects a different one.
func TestLeaseFromHandler(t *testing.T) {
	t.Parallel()
	h := &leaseHandler{lease: 7 * time.Second}
	cfg := poller.Config{Store: newFakeStore(), DB: nopDB{}, Handler: h}
	p, err := poller.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.LeaseTimeout(); got != h.lease {
		t.Errorf("lease = %s, want the handler's %s", got, h.lease)
	}
	cfg.LeaseTimeout = h.lease
	if _, err := poller.New(cfg); err != nil {
		t.Errorf("the handler's lease set again: %v", err)
	}
	cfg.LeaseTimeout = time.Second
	if _, err := poller.New(cfg); !errors.Is(err, core.ErrInvalid) || !strings.Contains(err.Error(), "LeaseTimeout") {
		t.Errorf("a different lease: err = %v, want ErrInvalid naming LeaseTimeout", err)
	}
	cfg.Handler, cfg.LeaseTimeout = &fakeHandler{}, 0
	p, err = poller.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.LeaseTimeout(); got != core.DefaultLeaseTimeout {
		t.Errorf("a handler without a lease: lease %s, want the default %s", got, core.DefaultLeaseTimeout)
	}
}

// A wake-up for rows from a known creation time behind where claims start
// (a row released by the dispatcher, here) is served by a claim from there,
// not from the oldest row.
func TestWakeAtFromClaimsFromThere(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	base := time.Now().Add(-time.Hour)
	for i := range 5 {
		st.add(t, fmt.Sprintf("ev%d", i), 1, base.Add(time.Duration(i)*time.Second))
	}
	p := newPoller(t, st, &fakeHandler{capacity: 100}, nil)
	if n, err := p.PollOnce(context.Background()); err != nil || n != 5 {
		t.Fatalf("PollOnce = %d, %v; want 5", n, err)
	}
	// The dispatcher gives ev2 back.
	if _, err := st.Release(context.Background(), nil, owner, []string{"ev2-000"}); err != nil {
		t.Fatal(err)
	}
	created := base.Add(2 * time.Second)
	p.WakeAtFrom(time.Now(), created)
	if n, err := p.PollOnce(context.Background()); err != nil || n != 1 {
		t.Fatalf("PollOnce after the release = %d, %v; want 1", n, err)
	}
	st.mu.Lock()
	claims := slices.Clone(st.claims)
	st.mu.Unlock()
	if from := claims[len(claims)-1].From; from.IsZero() || from.After(created) || created.Sub(from) > time.Second {
		t.Errorf("the claim after WakeAtFrom started from %v, want just before %v", from, created)
	}
}
