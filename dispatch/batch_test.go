package dispatch_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
)

// batchListener records the batches it is handed. Its first HandleBatch
// call waits for gate, so that the test can queue events behind it; fail
// lists the ids it fails.
type batchListener struct {
	max     int
	gate    chan struct{}
	fail    map[string]bool
	handle  func(ev core.Event) error // Handle, which a batch listener must have too
	results func(ctx context.Context, evs []core.Event) []error

	mu      sync.Mutex
	batches [][]string
	singles []string
	calls   chan []string
}

func newBatchListener(n int) *batchListener {
	return &batchListener{max: n, gate: make(chan struct{}), fail: map[string]bool{}, calls: make(chan []string, 64)}
}

func (l *batchListener) MaxBatch() int { return l.max }

func (l *batchListener) Handle(_ context.Context, ev core.Event) error {
	l.mu.Lock()
	l.singles = append(l.singles, ev.ID())
	l.mu.Unlock()
	l.calls <- []string{"single:" + ev.ID()}
	if l.fail[ev.ID()] {
		return errors.New("refused")
	}
	return nil
}

func (l *batchListener) HandleBatch(ctx context.Context, evs []core.Event) []error {
	ids := make([]string, len(evs))
	for i, ev := range evs {
		ids[i] = ev.ID()
	}
	l.mu.Lock()
	l.batches = append(l.batches, ids)
	first := len(l.batches) == 1
	l.mu.Unlock()
	l.calls <- ids
	if first {
		<-l.gate
	}
	if l.results != nil {
		return l.results(ctx, evs)
	}
	errs := make([]error, len(evs))
	for i, ev := range evs {
		if l.fail[ev.ID()] {
			errs[i] = errors.New("refused")
		}
	}
	return errs
}

var _ core.BatchListener = (*batchListener)(nil)

// waitCall returns the next call the listener saw: a batch's ids, or
// "single:<id>" for a Handle call.
func (l *batchListener) waitCall(t *testing.T) []string {
	t.Helper()
	select {
	case ids := <-l.calls:
		return ids
	case <-time.After(30 * time.Second):
		t.Fatal("no call of the listener within 30s")
		return nil
	}
}

// queue puts events on the hot queue, whichever listener they route to.
func (h *harness) queue(envs ...core.Envelope) {
	h.t.Helper()
	for _, env := range envs {
		ev := h.store.insertLeased(h.t, h.d.Owner(), env)
		if !h.d.EnqueueHot(ev) {
			h.t.Fatalf("EnqueueHot(%s) refused", ev.ID())
		}
	}
}

func otherEnv(t *testing.T, id string) core.Envelope {
	t.Helper()
	env, err := core.NewEnvelope(core.EnvelopeSpec{ID: id, Type: core.EventName("Other"), AggregateType: orders, JSON: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// TestBatchListener: a worker hands a core.BatchListener the events queued
// behind the one it took, up to MaxBatch, in one call; each event's outcome
// is its own (DONE, or RETRY for the one that failed); an event of another
// listener met on the way is delivered by its own listener after the batch.
func TestBatchListener(t *testing.T) {
	t.Parallel()
	bl := newBatchListener(4)
	bl.fail["ev-04"] = true
	var others []string
	var mu sync.Mutex
	h := newHarness(t, nil, func(c *dispatch.Config) { c.Workers = 1 })
	if err := h.reg.Register(orders, orderPlaced, bl); err != nil {
		t.Fatal(err)
	}
	if err := h.reg.RegisterFunc(orders, core.EventName("Other"), func(_ context.Context, ev core.Event) error {
		mu.Lock()
		others = append(others, ev.ID())
		mu.Unlock()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	h.start()
	h.queue(newEnv(t, "ev-00"))
	if got := bl.waitCall(t); !slices.Equal(got, []string{"ev-00"}) {
		t.Fatalf("first call = %v, want [ev-00]", got)
	}
	// The one worker is in the first call: these queue behind it.
	h.queue(newEnv(t, "ev-01"), otherEnv(t, "other-1"), newEnv(t, "ev-03"), newEnv(t, "ev-04"),
		newEnv(t, "ev-05"), newEnv(t, "ev-06"))
	close(bl.gate)
	if got, want := bl.waitCall(t), []string{"ev-01", "ev-03", "ev-04", "ev-05"}; !slices.Equal(got, want) {
		t.Fatalf("second call = %v, want %v (MaxBatch 4, other-1 left to its listener)", got, want)
	}
	if got, want := bl.waitCall(t), []string{"ev-06"}; !slices.Equal(got, want) {
		t.Fatalf("third call = %v, want %v", got, want)
	}
	for _, id := range []string{"ev-00", "ev-01", "ev-03", "ev-05", "ev-06", "other-1"} {
		h.store.waitStatus(t, id, core.StatusDone)
	}
	if ev := h.store.waitStatus(t, "ev-04", core.StatusRetry); !strings.Contains(ev.LastError, "refused") {
		t.Errorf("ev-04's last error = %q, want the listener's", ev.LastError)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(others, []string{"other-1"}) {
		t.Errorf("the other listener got %v, want [other-1]", others)
	}
	if len(bl.singles) != 0 {
		t.Errorf("Handle called for %v: a batch listener gets HandleBatch", bl.singles)
	}
}

// TestBatchListenerBadResults: a HandleBatch that panics, or returns as
// many results as events it was not given, fails every event of its batch:
// each is retried with the reason in its row.
func TestBatchListenerBadResults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		results func(context.Context, []core.Event) []error
		want    string
	}{
		{"panic", func(context.Context, []core.Event) []error { panic("boom") }, "boom"},
		{"short results", func(context.Context, []core.Event) []error { return nil }, "returned 0 results for 3 events"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bl := newBatchListener(8)
			close(bl.gate)
			bl.results = tc.results
			h := newHarness(t, nil, func(c *dispatch.Config) { c.Workers = 1 })
			if err := h.reg.Register(orders, orderPlaced, bl); err != nil {
				t.Fatal(err)
			}
			// Queued before the worker starts: one batch of three.
			h.queue(newEnv(t, "ev-1"), newEnv(t, "ev-2"), newEnv(t, "ev-3"))
			h.start()
			if got := bl.waitCall(t); len(got) != 3 {
				t.Fatalf("first call = %v, want the three queued events", got)
			}
			for _, id := range []string{"ev-1", "ev-2", "ev-3"} {
				if ev := h.store.waitStatus(t, id, core.StatusRetry); !strings.Contains(ev.LastError, tc.want) {
					t.Errorf("%s's last error = %q, want it to hold %q", id, ev.LastError, tc.want)
				}
			}
		})
	}
}

// TestBatchListenerWithInterceptors: interceptors wrap one event each, so a
// dispatcher that runs them calls Handle, never HandleBatch.
func TestBatchListenerWithInterceptors(t *testing.T) {
	t.Parallel()
	bl := newBatchListener(8)
	close(bl.gate)
	var before sync.Map
	ic := core.InterceptorFuncs{BeforeFunc: func(ctx context.Context, ev core.Event) (context.Context, error) {
		before.Store(ev.ID(), true)
		return ctx, nil
	}}
	h := newHarness(t, nil, func(c *dispatch.Config) { c.Workers = 1; c.Interceptors = []core.Interceptor{ic} })
	if err := h.reg.Register(orders, orderPlaced, bl); err != nil {
		t.Fatal(err)
	}
	h.queue(newEnv(t, "ev-1"), newEnv(t, "ev-2"))
	h.start()
	for _, id := range []string{"ev-1", "ev-2"} {
		h.store.waitStatus(t, id, core.StatusDone)
		if _, ok := before.Load(id); !ok {
			t.Errorf("the interceptor did not see %s", id)
		}
	}
	bl.mu.Lock()
	defer bl.mu.Unlock()
	if len(bl.batches) != 0 || len(bl.singles) != 2 {
		t.Errorf("batches %v, singles %v: want two Handle calls and no batch", bl.batches, bl.singles)
	}
}

// TestBatchListenerHardStop: Close's hard stop cancels a batch in flight,
// and the dispatcher returns; the batch's events are left to be delivered
// again (retried in their rows).
func TestBatchListenerHardStop(t *testing.T) {
	t.Parallel()
	bl := newBatchListener(8)
	close(bl.gate)
	bl.results = func(ctx context.Context, evs []core.Event) []error {
		<-ctx.Done() // only the hard stop ends it
		errs := make([]error, len(evs))
		for i := range errs {
			errs[i] = context.Cause(ctx)
		}
		return errs
	}
	h := newHarness(t, nil, func(c *dispatch.Config) { c.Workers = 1; c.DrainTimeout = 20 * time.Millisecond })
	if err := h.reg.Register(orders, orderPlaced, bl); err != nil {
		t.Fatal(err)
	}
	h.queue(newEnv(t, "ev-1"), newEnv(t, "ev-2"))
	h.start()
	if got := bl.waitCall(t); len(got) != 2 {
		t.Fatalf("first call = %v, want both events", got)
	}
	done := make(chan error, 1)
	go func() { done <- h.d.Close(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return within 30s: the batch in flight was not cancelled")
	}
	for _, id := range []string{"ev-1", "ev-2"} {
		if ev := h.store.get(t, id); ev.Status == core.StatusDone || ev.Status == core.StatusDead {
			t.Errorf("%s is %s after a cancelled delivery, want it left to be delivered again", id, ev.Status)
		}
	}
}
