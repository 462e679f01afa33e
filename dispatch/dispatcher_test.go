package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/internal/testsupport/testnode"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	orders      = core.AggregateName("Order")
	orderPlaced = core.EventName("OrderPlaced")
	testOwner   = "owner-1"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func newEnv(t *testing.T, id string) core.Envelope {
	t.Helper()
	env, err := core.NewEnvelope(core.EnvelopeSpec{ID: id, Type: orderPlaced, AggregateType: orders, JSON: []byte(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

type harness struct {
	t       *testing.T
	store   *memStore
	reg     *core.Registry
	metrics *testnode.Metrics
	d       *dispatch.Dispatcher
}

// newHarness builds a dispatcher over a memStore with l registered for
// (Order, OrderPlaced) when l is not nil. It is closed at cleanup.
func newHarness(t *testing.T, l core.ListenerFunc, mod func(*dispatch.Config)) *harness {
	t.Helper()
	h := &harness{t: t, store: newMemStore(), reg: core.NewRegistry(), metrics: &testnode.Metrics{}}
	if l != nil {
		if err := h.reg.Register(orders, orderPlaced, l); err != nil {
			t.Fatal(err)
		}
	}
	cfg := dispatch.Config{
		Store: h.store, DB: nopDB{}, Registry: h.reg, Owner: testOwner,
		Workers: 2, Retry: fixedDelay{step: time.Second}, Metrics: h.metrics,
		Now: func() time.Time { return t0 },
	}
	if mod != nil {
		mod(&cfg)
	}
	d, err := dispatch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.d = d
	t.Cleanup(func() {
		if err := d.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return h
}

func (h *harness) start() {
	h.t.Helper()
	if err := h.d.Start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
}

// hot inserts a leased event and puts it on the hot queue.
func (h *harness) hot(id string) core.Event {
	h.t.Helper()
	ev := h.store.insertLeased(h.t, h.d.Owner(), newEnv(h.t, id))
	if !h.d.EnqueueHot(ev) {
		h.t.Fatalf("EnqueueHot(%s) refused", id)
	}
	return ev
}

func (h *harness) close() {
	h.t.Helper()
	if err := h.d.Close(context.Background()); err != nil {
		h.t.Fatal(err)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	good := dispatch.Config{Store: newMemStore(), DB: nopDB{}, Registry: core.NewRegistry()}
	tests := []struct {
		name string
		mod  func(*dispatch.Config)
	}{
		{"no store", func(c *dispatch.Config) { c.Store = nil }},
		{"no db", func(c *dispatch.Config) { c.DB = nil }},
		{"no registry", func(c *dispatch.Config) { c.Registry = nil }},
		{"long owner", func(c *dispatch.Config) { c.Owner = strings.Repeat("x", 129) }},
		{"negative workers", func(c *dispatch.Config) { c.Workers = -1 }},
		{"negative hot queue", func(c *dispatch.Config) { c.HotQueueSize = -1 }},
		{"negative cold queue", func(c *dispatch.Config) { c.ColdQueueSize = -1 }},
		{"negative max attempts", func(c *dispatch.Config) { c.MaxAttempts = -1 }},
		{"negative drain timeout", func(c *dispatch.Config) { c.DrainTimeout = -1 }},
		{"negative listener timeout", func(c *dispatch.Config) { c.ListenerTimeout = -1 }},
		{"negative store timeout", func(c *dispatch.Config) { c.StoreTimeout = -1 }},
		{"negative done batch size", func(c *dispatch.Config) { c.DoneBatchSize = -1 }},
		{"negative done batch linger", func(c *dispatch.Config) { c.DoneBatchLinger = -1 }},
		{"nil interceptor", func(c *dispatch.Config) { c.Interceptors = []core.Interceptor{nil} }},
		{"DeleteDelivered without core.DoneDeleter", func(c *dispatch.Config) { c.DeleteDelivered = true }},
	}
	for _, tt := range tests {
		cfg := good
		tt.mod(&cfg)
		if _, err := dispatch.New(cfg); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", tt.name, err)
		}
	}

	d, err := dispatch.New(good)
	if err != nil {
		t.Fatal(err)
	}
	if d.Owner() == "" || d.Owner() == core.NewOwner() {
		t.Errorf("default owner %q is not unique", d.Owner())
	}
	if got := d.ColdCapacity(); got != dispatch.DefaultColdQueueSize {
		t.Errorf("ColdCapacity = %d, want %d", got, dispatch.DefaultColdQueueSize)
	}
	if err := d.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestExponentialBackoffDeterministic(t *testing.T) {
	t.Parallel()
	tests := []struct {
		rand     float64
		attempts int
		want     time.Duration
	}{
		{0.5, 0, 200 * time.Millisecond}, // below 1 counts as 1
		{0.5, 1, 200 * time.Millisecond},
		{0.5, 2, 400 * time.Millisecond},
		{0.5, 5, 3200 * time.Millisecond},
		{0.0, 1, 100 * time.Millisecond}, // jitter factor 0.5
		{0.0, 3, 400 * time.Millisecond},
		{0.75, 2, 500 * time.Millisecond}, // factor 1.25
		{0.5, 10, 60 * time.Second},       // 200ms*512 > max: capped
		{0.5, 1000, 60 * time.Second},     // no overflow
		{0.0, 1000, 30 * time.Second},
	}
	for _, tt := range tests {
		b := &core.ExponentialBackoff{Rand: func() float64 { return tt.rand }}
		if got := b.Delay(tt.attempts); got != tt.want {
			t.Errorf("Delay(%d) with rand %v = %v, want %v", tt.attempts, tt.rand, got, tt.want)
		}
	}
	custom := &core.ExponentialBackoff{Base: time.Millisecond, Max: 5 * time.Millisecond, Rand: func() float64 { return 0.5 }}
	for n, want := range []time.Duration{1, 1, 2, 4, 5, 5} {
		if got := custom.Delay(n); got != want*time.Millisecond {
			t.Errorf("custom Delay(%d) = %v, want %v", n, got, want*time.Millisecond)
		}
	}
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom")
	tests := []struct {
		name        string
		listener    core.ListenerFunc // nil: unroutable
		attempts    int               // failed attempts before this delivery
		wantStatus  core.Status
		wantAvail   time.Time // checked when not zero
		wantErrPart string
	}{
		{name: "success", listener: func(context.Context, core.Event) error { return nil }, wantStatus: core.StatusDone},
		{
			name:     "failure retries with policy delay",
			listener: func(context.Context, core.Event) error { return errBoom },
			attempts: 2, wantStatus: core.StatusRetry, wantAvail: t0.Add(3 * time.Second), wantErrPart: "boom",
		},
		{
			name:       "RetryAfter delay honoured",
			listener:   func(context.Context, core.Event) error { return core.RetryAfter(errBoom, 42*time.Second) },
			wantStatus: core.StatusRetry, wantAvail: t0.Add(42 * time.Second), wantErrPart: "boom",
		},
		{
			name:       "Permanent goes dead",
			listener:   func(context.Context, core.Event) error { return core.Permanent(errBoom) },
			wantStatus: core.StatusDead, wantErrPart: "permanent: boom",
		},
		{
			name:     "last allowed attempt retries",
			listener: func(context.Context, core.Event) error { return errBoom },
			attempts: 3, wantStatus: core.StatusRetry,
		},
		{
			name:     "max attempts reached goes dead",
			listener: func(context.Context, core.Event) error { return errBoom },
			attempts: 4, wantStatus: core.StatusDead, wantErrPart: "boom",
		},
		{
			name:       "panic is a failure",
			listener:   func(context.Context, core.Event) error { panic("kaboom") },
			wantStatus: core.StatusRetry, wantErrPart: "panic: kaboom",
		},
		{
			name:       "panic with a permanent error goes dead",
			listener:   func(context.Context, core.Event) error { panic(core.Permanent(errBoom)) },
			wantStatus: core.StatusDead, wantErrPart: "boom",
		},
		{name: "unroutable goes dead", wantStatus: core.StatusDead, wantErrPart: "no listener"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int64
			var l core.ListenerFunc
			if tt.listener != nil {
				l = func(ctx context.Context, ev core.Event) error {
					calls.Add(1)
					return tt.listener(ctx, ev)
				}
			}
			h := newHarness(t, l, func(c *dispatch.Config) { c.MaxAttempts = 5 })
			ev := h.store.insertLeased(t, testOwner, newEnv(t, "ev-1"))
			h.store.rows["ev-1"].Attempts = tt.attempts
			ev.Attempts = tt.attempts
			if !h.d.EnqueueCold(ev) {
				t.Fatal("EnqueueCold refused")
			}
			h.start()
			got := h.store.waitStatus(t, "ev-1", tt.wantStatus)
			h.close()

			if tt.listener != nil && calls.Load() != 1 {
				t.Errorf("listener calls = %d, want 1", calls.Load())
			}
			wantAttempts := tt.attempts
			if tt.wantStatus != core.StatusDone {
				wantAttempts++
			}
			if got.Attempts != wantAttempts {
				t.Errorf("attempts = %d, want %d", got.Attempts, wantAttempts)
			}
			if got.LockedBy != "" {
				t.Errorf("locked_by = %q after the outcome, want empty", got.LockedBy)
			}
			if !tt.wantAvail.IsZero() && !got.AvailableAt.Equal(tt.wantAvail) {
				t.Errorf("available_at = %v, want %v", got.AvailableAt, tt.wantAvail)
			}
			if !strings.Contains(got.LastError, tt.wantErrPart) {
				t.Errorf("last_error = %q, want it to contain %q", got.LastError, tt.wantErrPart)
			}
			if h.store.retries > 0 && tt.wantStatus != core.StatusRetry {
				t.Errorf("%d retries written for a %v outcome", h.store.retries, tt.wantStatus)
			}
			m := h.metrics
			counts := map[core.Status]int64{core.StatusDone: m.Counts().DispatchSuccess, core.StatusRetry: m.Counts().DispatchFailure, core.StatusDead: m.Counts().DispatchDead}
			for st, n := range counts {
				want := int64(0)
				if st == tt.wantStatus {
					want = 1
				}
				if n != want {
					t.Errorf("metric for %v = %d, want %d", st, n, want)
				}
			}
			if m.Counts().ColdEnqueued != 1 || m.Counts().OldestLag != 1 || m.Counts().QueueDepths != 1 {
				t.Errorf("cold enqueued/lag/depth metrics = %d/%d/%d, want 1/1/1",
					m.Counts().ColdEnqueued, m.Counts().OldestLag, m.Counts().QueueDepths)
			}
		})
	}
}

// TestMaxAttemptsExactly drives one failing event through the claim/dispatch
// cycle and counts the listener calls until it is DEAD.
func TestMaxAttemptsExactly(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	h := newHarness(t, func(context.Context, core.Event) error {
		calls.Add(1)
		return errors.New("always fails")
	}, func(c *dispatch.Config) {
		c.MaxAttempts = 4
		c.Now = time.Now
		c.Retry = fixedDelay{}
	})
	h.start()
	h.hot("ev-1")
	for i := 1; ; i++ {
		h.store.waitFor(t, "an outcome", func(rows map[string]*core.Event) bool {
			r := rows["ev-1"]
			return r.LockedBy == "" && r.Status != core.StatusNew
		})
		if st := h.store.get(t, "ev-1").Status; st == core.StatusDead {
			break
		} else if i > 10 {
			t.Fatalf("still %v after %d rounds", st, i)
		}
		evs, _, err := h.store.Claim(context.Background(), nil, core.ClaimParams{
			Owner: testOwner, Now: time.Now().Add(time.Second), LeaseTimeout: time.Minute, Limit: 10,
		})
		if err != nil || len(evs) != 1 || !h.d.EnqueueCold(evs[0]) {
			t.Fatalf("claim: %v, %d events", err, len(evs))
		}
	}
	h.close()
	if got := calls.Load(); got != 4 {
		t.Errorf("listener calls = %d, want exactly MaxAttempts = 4", got)
	}
	if got := h.store.get(t, "ev-1").Attempts; got != 4 {
		t.Errorf("attempts = %d, want 4", got)
	}
}

func TestInterceptors(t *testing.T) {
	t.Parallel()
	type key struct{}
	var (
		mu  sync.Mutex
		log []string
	)
	rec := func(s string) {
		mu.Lock()
		log = append(log, s)
		mu.Unlock()
	}
	ic := func(name string, beforeErr, afterErr error) core.Interceptor {
		return core.InterceptorFuncs{
			BeforeFunc: func(ctx context.Context, ev core.Event) (context.Context, error) {
				rec("before " + name)
				return context.WithValue(ctx, key{}, name), beforeErr
			},
			AfterFunc: func(ctx context.Context, ev core.Event, outcome error) error {
				rec(fmt.Sprintf("after %s (%v)", name, outcome))
				return afterErr
			},
		}
	}
	tests := []struct {
		name       string
		ics        []core.Interceptor
		listenErr  error
		wantLog    []string
		wantStatus core.Status
	}{
		{
			name:       "order",
			ics:        []core.Interceptor{ic("a", nil, nil), ic("b", nil, nil)},
			wantLog:    []string{"before a", "before b", "listener saw b", "after b (<nil>)", "after a (<nil>)"},
			wantStatus: core.StatusDone,
		},
		{
			name:       "outcome passed to After",
			ics:        []core.Interceptor{ic("a", nil, nil)},
			listenErr:  errors.New("nope"),
			wantLog:    []string{"before a", "listener saw a", "after a (nope)"},
			wantStatus: core.StatusRetry,
		},
		{
			name:       "Before error short-circuits",
			ics:        []core.Interceptor{ic("a", nil, nil), ic("b", errors.New("veto"), nil), ic("c", nil, nil)},
			wantLog:    []string{"before a", "before b", "after a (interceptor before: veto)"},
			wantStatus: core.StatusRetry,
		},
		{
			name:       "After error only logged",
			ics:        []core.Interceptor{ic("a", nil, errors.New("after failed")), ic("b", nil, nil)},
			wantLog:    []string{"before a", "before b", "listener saw b", "after b (<nil>)", "after a (<nil>)"},
			wantStatus: core.StatusDone,
		},
		{
			name: "Before panic is a failure",
			ics: []core.Interceptor{ic("a", nil, nil), core.InterceptorFuncs{
				BeforeFunc: func(context.Context, core.Event) (context.Context, error) { panic("bad interceptor") },
			}},
			wantLog:    []string{"before a", "after a (interceptor before: panic: bad interceptor)"},
			wantStatus: core.StatusRetry,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			log = nil
			mu.Unlock()
			h := newHarness(t, func(ctx context.Context, ev core.Event) error {
				rec(fmt.Sprintf("listener saw %v", ctx.Value(key{})))
				return tt.listenErr
			}, func(c *dispatch.Config) { c.Interceptors = tt.ics })
			h.start()
			h.hot("ev-1")
			h.store.waitStatus(t, "ev-1", tt.wantStatus)
			h.close()
			mu.Lock()
			defer mu.Unlock()
			if fmt.Sprint(log) != fmt.Sprint(tt.wantLog) {
				t.Errorf("calls:\n got %q\nwant %q", log, tt.wantLog)
			}
		})
	}
}

func TestListenerTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(ctx context.Context, ev core.Event) error {
		<-ctx.Done()
		return ctx.Err()
	}, func(c *dispatch.Config) { c.ListenerTimeout = 10 * time.Millisecond })
	h.start()
	h.hot("ev-1")
	got := h.store.waitStatus(t, "ev-1", core.StatusRetry)
	if !strings.Contains(got.LastError, "deadline exceeded") {
		t.Errorf("last_error = %q", got.LastError)
	}
}

// A store failure while recording the outcome must not turn into a listener
// failure: the listener is not called again, the failure is counted, the
// write is tried again (here: once more, by shutdown's last attempt), and
// what still fails leaves the row with its lease, for a poller to reclaim
// after expiry.
func TestStoreErrorIsNotListenerFailure(t *testing.T) {
	t.Parallel()
	for _, listenerErr := range []error{nil, errors.New("listener failed")} {
		var calls atomic.Int64
		h := newHarness(t, func(context.Context, core.Event) error {
			calls.Add(1)
			return listenerErr
		}, nil)
		ev := h.store.insertLeased(t, testOwner, newEnv(t, "ev-1"))
		h.store.failMark = errors.New("database is down")
		h.d.EnqueueHot(ev)
		h.start()
		h.close() // drains: the event has been processed when Close returns

		h.store.failMark = nil
		got := h.store.get(t, "ev-1")
		if calls.Load() != 1 {
			t.Errorf("listener err %v: calls = %d, want 1", listenerErr, calls.Load())
		}
		if got.Status != core.StatusNew || got.Attempts != 0 || got.LockedBy != testOwner {
			t.Errorf("listener err %v: row = %v attempts %d locked by %q, want NEW 0 %q",
				listenerErr, got.Status, got.Attempts, got.LockedBy, testOwner)
		}
		writes := h.store.writeCall.Load()
		if writes < 2 {
			t.Errorf("listener err %v: %d write-backs, want the first and shutdown's last at least", listenerErr, writes)
		}
		if n := h.metrics.Counts().StoreError; n != writes {
			t.Errorf("listener err %v: StoreError = %d, want one per write-back, %d", listenerErr, n, writes)
		}
	}
}

// A write-back fenced by another owner's lease changes nothing and is no error.
func TestFencedWriteBack(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	h := newHarness(t, func(context.Context, core.Event) error {
		<-gate
		return nil
	}, nil)
	h.start()
	h.hot("ev-1")
	// Another instance takes over (as if the lease had expired).
	h.store.mu.Lock()
	h.store.rows["ev-1"].LockedBy = "owner-2"
	h.store.mu.Unlock()
	close(gate)
	h.close()
	got := h.store.get(t, "ev-1")
	if got.Status != core.StatusNew || got.LockedBy != "owner-2" {
		t.Errorf("row = %v locked by %q, want NEW locked by owner-2", got.Status, got.LockedBy)
	}
	if n := h.metrics.Counts().StoreError; n != 0 {
		t.Errorf("StoreError = %d, want 0", n)
	}
}

func TestNotifyDueOnRetry(t *testing.T) {
	t.Parallel()
	due := make(chan time.Time, 1)
	h := newHarness(t, func(context.Context, core.Event) error {
		return core.RetryAfter(nil, 7*time.Millisecond)
	}, nil)
	h.d.NotifyDue(func(at time.Time) { due <- at })
	from := make(chan time.Time, 1)
	h.d.NotifyDueFrom(func(_, f time.Time) { from <- f })
	h.start()
	ev := h.hot("ev-1")
	select {
	case at := <-due:
		if want := t0.Add(7 * time.Millisecond); !at.Equal(want) {
			t.Errorf("due = %v, want %v", at, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("NotifyDue not called")
	}
	// Sent by the same call as NotifyDue's.
	if f := <-from; !f.Equal(ev.CreatedAt) || f.IsZero() {
		t.Errorf("due from %v, want the event's created_at %v", f, ev.CreatedAt)
	}
}
