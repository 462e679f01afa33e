package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
)

// fakeTx is a core.Tx whose callbacks run when the test says so.
type fakeTx struct {
	nopDB
	commit, rollback []func(context.Context)
}

func (t *fakeTx) AfterCommit(fn func(context.Context))   { t.commit = append(t.commit, fn) }
func (t *fakeTx) AfterRollback(fn func(context.Context)) { t.rollback = append(t.rollback, fn) }

func (t *fakeTx) end(committed bool) {
	fns := t.rollback
	if committed {
		fns = t.commit
	}
	for _, fn := range fns {
		fn(context.Background())
	}
}

func TestWriterHookThroughWriter(t *testing.T) {
	t.Parallel()
	delivered := make(chan string, 10)
	for _, committed := range []bool{true, false} {
		h := newHarness(t, func(_ context.Context, ev core.Event) error {
			delivered <- ev.ID()
			return nil
		}, nil)
		hook := h.d.WriterHook()
		if hook.LeaseOwner() != testOwner {
			t.Fatalf("LeaseOwner = %q, want %q", hook.LeaseOwner(), testOwner)
		}
		w, err := core.NewWriter(core.WriterConfig{Store: h.store, Hook: hook})
		if err != nil {
			t.Fatal(err)
		}
		tx := &fakeTx{}
		id := fmt.Sprintf("ev-%v", committed)
		if _, err := w.WriteTx(context.Background(), tx, newEnv(t, id)); err != nil {
			t.Fatal(err)
		}
		if r := h.store.get(t, id); r.LockedBy != testOwner {
			t.Fatalf("inserted row locked by %q, want the dispatcher's owner", r.LockedBy)
		}
		h.start()
		tx.end(committed)
		h.close()
		if committed {
			if got := <-delivered; got != id {
				t.Errorf("delivered %s, want %s", got, id)
			}
			if st := h.store.get(t, id).Status; st != core.StatusDone {
				t.Errorf("status %v, want DONE", st)
			}
		} else if n := h.metrics.Counts().HotEnqueued; n != 0 {
			t.Errorf("after rollback: %d events enqueued", n)
		}
	}
	if len(delivered) != 0 {
		t.Errorf("unexpected delivery of %s", <-delivered)
	}
}

// Events the hot queue refuses and events not yet due are released in one
// statement and reported as due, with the oldest creation time of each (to
// NotifyDueFrom's subscribers); only refusals count as drops.
func TestWriterHookReleasesWhatItCannotTake(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, func(c *dispatch.Config) { c.HotQueueSize = 1 })
	var due []time.Time
	h.d.NotifyDue(func(at time.Time) { due = append(due, at) })
	var from []time.Time
	h.d.NotifyDueFrom(func(_, f time.Time) { from = append(from, f) })
	later := t0.Add(time.Hour)
	envs := []core.Envelope{newEnv(t, "a"), newEnv(t, "b")}
	env, err := core.NewEnvelope(core.EnvelopeSpec{ID: "c", Type: orderPlaced, AggregateType: orders, JSON: []byte(`1`), NotBefore: later})
	if err != nil {
		t.Fatal(err)
	}
	envs = append(envs, env)
	if err := h.store.Insert(context.Background(), nil, envs, core.InsertOptions{LeaseOwner: testOwner, LeaseAt: t0}); err != nil {
		t.Fatal(err)
	}

	if err := h.d.WriterHook().AfterCommit(context.Background(), envs); err != nil {
		t.Fatal(err)
	}
	if len(h.store.releases) != 1 || !slices.Equal(h.store.releases[0], []string{"b", "c"}) {
		t.Errorf("releases = %v, want one release of [b c]", h.store.releases)
	}
	for id, wantOwner := range map[string]string{"a": testOwner, "b": "", "c": ""} {
		if got := h.store.get(t, id).LockedBy; got != wantOwner {
			t.Errorf("%s locked by %q, want %q", id, got, wantOwner)
		}
	}
	if !slices.EqualFunc(due, []time.Time{t0, later}, time.Time.Equal) {
		t.Errorf("due notifications = %v, want [%v %v]", due, t0, later)
	}
	if want := []time.Time{envs[1].OccurredAt(), envs[2].OccurredAt()}; !slices.EqualFunc(from, want, time.Time.Equal) {
		t.Errorf("due notifications from %v, want %v", from, want)
	}
	if e, d := h.metrics.Counts().HotEnqueued, h.metrics.Counts().HotDropped; e != 1 || d != 1 {
		t.Errorf("HotEnqueued/HotDropped = %d/%d, want 1/1", e, d)
	}

	// A failed release is reported to the Writer (which logs it), never panics.
	h.store.failMark = errors.New("database is down")
	more := newEnv(t, "d")
	if err := h.d.WriterHook().AfterCommit(context.Background(), []core.Envelope{more}); err == nil {
		t.Error("AfterCommit hid a failed release")
	}
	if n := h.metrics.Counts().StoreError; n != 1 {
		t.Errorf("StoreError = %d, want 1", n)
	}
	h.store.failMark = nil
	if err := h.d.WriterHook().AfterRollback(context.Background(), envs); err != nil {
		t.Errorf("AfterRollback: %v", err)
	}
}

// When this dispatcher's poller claimed a hot-path event before the hook ran
// (its insert-time lease expired during a slow commit), the hook must leave
// the lease alone: releasing it would let another instance deliver the
// event too, and fence off this dispatcher's DONE.
func TestWriterHookLeavesEventsThePollerHolds(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(context.Context, core.Event) error { return nil }, nil)
	env := newEnv(t, "slow-commit")
	if err := h.store.Insert(context.Background(), nil, []core.Envelope{env}, core.InsertOptions{LeaseOwner: testOwner, LeaseAt: t0}); err != nil {
		t.Fatal(err)
	}
	claimed := core.Event{Envelope: env, Status: core.StatusNew, LockedBy: testOwner, LockedAt: t0}
	if !h.d.EnqueueCold(claimed) {
		t.Fatal("EnqueueCold refused the claimed event")
	}
	if err := h.d.WriterHook().AfterCommit(context.Background(), []core.Envelope{env}); err != nil {
		t.Fatalf("AfterCommit: %v", err)
	}
	if len(h.store.releases) != 0 {
		t.Errorf("the hook released %v, an event the dispatcher holds", h.store.releases)
	}
	if got := h.store.get(t, env.ID()).LockedBy; got != testOwner {
		t.Errorf("row locked by %q, want still %q", got, testOwner)
	}
	if c := h.metrics.Counts(); c.HotEnqueued != 0 || c.HotDropped != 1 || c.ColdEnqueued != 1 {
		t.Errorf("metrics %+v, want 1 cold enqueued and the hot offer counted as dropped", c)
	}
	h.start()
	h.store.waitStatus(t, env.ID(), core.StatusDone)
}

// TestWriterHookYields: the hook yields once per transaction that put
// events on the hot queue (so that a worker starts on them at once), not
// for one whose events all wait for the poller, and never with
// NoYieldAfterCommit.
func TestWriterHookYields(t *testing.T) {
	t.Parallel()
	for _, noYield := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoYieldAfterCommit=%v", noYield), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, func(context.Context, core.Event) error { return nil }, func(c *dispatch.Config) {
				c.NoYieldAfterCommit = noYield
				c.HotQueueSize = 2
			})
			var yields atomic.Int32
			if had := dispatch.SetYield(h.d, func() { yields.Add(1) }); had == noYield {
				t.Fatalf("dispatcher yields = %v with NoYieldAfterCommit = %v", had, noYield)
			}
			w, err := core.NewWriter(core.WriterConfig{Store: h.store, Hook: h.d.WriterHook()})
			if err != nil {
				t.Fatal(err)
			}
			commit := func(ids ...string) {
				t.Helper()
				var envs []core.Envelope
				for _, id := range ids {
					envs = append(envs, newEnv(t, id))
				}
				tx := &fakeTx{}
				if _, err := w.WriteAllTx(context.Background(), tx, envs); err != nil {
					t.Fatal(err)
				}
				tx.end(true)
			}
			// Not started: the queue fills up and stays full.
			commit("a", "b")      // both queued: one yield
			commit("c")           // refused: nothing to yield for
			commit("d", "e", "f") // refused
			want := int32(1)
			if noYield {
				want = 0
			}
			if got := yields.Load(); got != want {
				t.Errorf("%d yields, want %d", got, want)
			}
		})
	}
}

// TestHotQueueRefusalsSummed: 33 refusals of the hot queue within a second
// are one warning with events=33, written when the second is over; the
// test closes the window with a clock of its own.
func TestHotQueueRefusalsSummed(t *testing.T) {
	t.Parallel()
	logs := &recordHandler{}
	h := newHarness(t, nil, func(c *dispatch.Config) {
		c.HotQueueSize = 1
		c.Logger = slog.New(logs)
	})
	clock := &fakeClock{now: t0}
	dispatch.SetLogClock(h.d, clock)
	ids := []string{"first"}
	for i := range 33 {
		ids = append(ids, fmt.Sprintf("refused-%02d", i))
	}
	for _, id := range ids {
		env := newEnv(t, id)
		if err := h.store.Insert(context.Background(), nil, []core.Envelope{env}, core.InsertOptions{LeaseOwner: testOwner, LeaseAt: t0}); err != nil {
			t.Fatal(err)
		}
		if err := h.d.WriterHook().AfterCommit(context.Background(), []core.Envelope{env}); err != nil {
			t.Fatal(err)
		}
	}
	if d := h.metrics.Counts().HotDropped; d != 33 {
		t.Fatalf("HotDropped = %d, want 33", d)
	}
	if got := logs.take(); len(got) != 0 {
		t.Fatalf("%d records before the second was over, want none", len(got))
	}
	clock.fire()
	got := logs.take()
	if len(got) != 1 {
		t.Fatalf("%d records, want 1", len(got))
	}
	want := "WARN outbox hot queue refused events; left for the poller component=outbox.dispatcher events=33 first_event_id=refused-00 summed_over=1s"
	if line := got[0]; line != want {
		t.Fatalf("record\n%s\nwant\n%s", line, want)
	}

	// Close writes what its second has summed so far.
	for i := range 3 {
		env := newEnv(t, fmt.Sprintf("late-%d", i))
		if err := h.d.WriterHook().AfterCommit(context.Background(), []core.Envelope{env}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.d.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	want = "WARN outbox hot queue refused events; left for the poller component=outbox.dispatcher events=3 first_event_id=late-0 summed_over=1s"
	var warned []string
	for _, line := range logs.take() {
		if strings.HasPrefix(line, "WARN") {
			warned = append(warned, line)
		}
	}
	if len(warned) != 1 || warned[0] != want {
		t.Fatalf("warnings at Close %q, want [%q]", warned, want)
	}
}

// recordHandler keeps each record as one line: level, message, then the
// attributes (those of WithAttrs first) as key=value.
type recordHandler struct {
	mu    *sync.Mutex
	lines *[]string
	attrs string
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message + h.attrs
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	h.init()
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.lines = append(*h.lines, line)
	return nil
}
func (h *recordHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h.init()
	d := *h
	for _, a := range as {
		d.attrs += " " + a.String()
	}
	return &d
}
func (h *recordHandler) WithGroup(string) slog.Handler { return h }

func (h *recordHandler) init() {
	if h.mu == nil {
		h.mu, h.lines = new(sync.Mutex), new([]string)
	}
}

func (h *recordHandler) take() []string {
	h.init()
	h.mu.Lock()
	defer h.mu.Unlock()
	out := *h.lines
	*h.lines = nil
	return out
}

// fakeClock is an outboxlog.Clock whose timers run when the test fires
// them.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []func()
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(_ time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timers = append(c.timers, f)
	return func() bool { return false }
}

// fire runs the timers set so far, in the caller's goroutine.
func (c *fakeClock) fire() {
	c.mu.Lock()
	fs := c.timers
	c.timers = nil
	c.mu.Unlock()
	for _, f := range fs {
		f()
	}
}
