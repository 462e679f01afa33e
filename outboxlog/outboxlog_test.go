package outboxlog_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox/outboxlog"
)

// capture is a slog.Handler that keeps every record it is given, with the
// attributes of WithAttrs first and the context's trace value.
type capture struct {
	mu      *sync.Mutex
	level   slog.Level
	records *[]slog.Record
	traces  *[]string
	attrs   []slog.Attr
}

func newCapture(level slog.Level) *capture {
	return &capture{mu: new(sync.Mutex), level: level, records: new([]slog.Record), traces: new([]string)}
}

type traceKey struct{}

func (c *capture) Enabled(_ context.Context, l slog.Level) bool { return l >= c.level }
func (c *capture) Handle(ctx context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.attrs) > 0 {
		own := r
		r = slog.NewRecord(own.Time, own.Level, own.Message, 0)
		r.AddAttrs(c.attrs...)
		own.Attrs(func(a slog.Attr) bool { r.AddAttrs(a); return true })
	}
	*c.records = append(*c.records, r.Clone())
	trace, _ := ctx.Value(traceKey{}).(string)
	*c.traces = append(*c.traces, trace)
	return nil
}
func (c *capture) WithAttrs(as []slog.Attr) slog.Handler {
	d := *c
	d.attrs = append(slices.Clip(c.attrs), as...)
	return &d
}
func (c *capture) WithGroup(string) slog.Handler { return c }

func (c *capture) take() ([]slog.Record, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, t := *c.records, *c.traces
	*c.records, *c.traces = nil, nil
	return r, t
}

func messages(rs []slog.Record) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Message)
	}
	return out
}

// attrs returns a record's attributes as key=value strings, in order.
func attrs(r slog.Record) []string {
	var out []string
	r.Attrs(func(a slog.Attr) bool {
		out = append(out, a.Key+"="+a.Value.String())
		return true
	})
	return out
}

// withDefault makes h slog's default logger until the test ends. Tests that
// call it do not run in parallel.
func withDefault(t *testing.T, h slog.Handler) {
	old := slog.Default()
	slog.SetDefault(slog.New(h))
	t.Cleanup(func() { slog.SetDefault(old) })
}

// TestDefault: a nil logger sends warnings and errors to slog.Default(),
// looked up at each record, and nothing below; the context reaches the
// handler; attributes given with With stay.
func TestDefault(t *testing.T) {
	first := newCapture(slog.LevelDebug)
	withDefault(t, first)
	log := outboxlog.Or(nil).With("component", "x")
	ctx := context.WithValue(context.Background(), traceKey{}, "trace-1")
	log.LogAttrs(ctx, slog.LevelError, "dead", slog.String("event_id", "e-1"))
	log.WarnContext(ctx, "overflow")
	log.InfoContext(ctx, "not by default")
	log.DebugContext(ctx, "not by default")
	got, traces := first.take()
	if want := []string{"dead", "overflow"}; !slices.Equal(messages(got), want) {
		t.Fatalf("default logger got %v, want %v", messages(got), want)
	}
	if !slices.Equal(traces, []string{"trace-1", "trace-1"}) {
		t.Fatalf("contexts reached the handler with traces %q", traces)
	}
	if a := attrs(got[0]); !slices.Equal(a, []string{"component=x", "event_id=e-1"}) {
		t.Fatalf("first record's attributes %v", a)
	}

	second := newCapture(slog.LevelError)
	slog.SetDefault(slog.New(second))
	log.Warn("below the new default's level")
	log.Error("two")
	if got, _ := first.take(); len(got) != 0 {
		t.Fatalf("the replaced default got %v", messages(got))
	}
	if got, _ := second.take(); !slices.Equal(messages(got), []string{"two"}) {
		t.Fatalf("the new default got %v", messages(got))
	}
}

func TestOr(t *testing.T) {
	own := slog.New(newCapture(slog.LevelDebug))
	if outboxlog.Or(own) != own {
		t.Fatal("Or replaced a logger")
	}
	if outboxlog.Or(nil) != outboxlog.Default() {
		t.Fatal("Or(nil) is not Default()")
	}
	if a := outboxlog.Err(errors.New("boom")); a.Key != "error" || a.Value.String() != "boom" {
		t.Fatalf("Err = %v", a)
	}
}

// fakeClock is a Clock whose timers the test fires.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Time
	f       func()
	stopped bool
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// advance moves the clock by d and runs the timers due, in the caller's
// goroutine; it returns how many ran.
func (c *fakeClock) advance(d time.Duration) int {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []func()
	keep := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.stopped:
		case !t.at.After(c.now):
			t.stopped = true
			due = append(due, t.f)
		default:
			keep = append(keep, t)
		}
	}
	c.timers = keep
	c.mu.Unlock()
	for _, f := range due {
		f()
	}
	return len(due)
}

// TestSum: 33 refusals within a second are one line with events=33; a
// lone one is a line of its own without summed_over; Flush writes what is
// pending at once and its timer does nothing.
func TestSum(t *testing.T) {
	h := newCapture(slog.LevelDebug)
	clock := &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	s := outboxlog.NewSum(slog.New(h), slog.LevelWarn, "outbox hot queue refused events; left for the poller", "events",
		outboxlog.SumOptions{Clock: clock})
	ctx := context.WithValue(context.Background(), traceKey{}, "trace-1")
	for i := range 33 {
		s.Add(ctx, 1, slog.Int("first", i))
		clock.advance(10 * time.Millisecond)
	}
	if got, _ := h.take(); len(got) != 0 {
		t.Fatalf("records before the window closed: %v", messages(got))
	}
	if n := clock.advance(time.Second); n != 1 {
		t.Fatalf("%d timers ran, want 1", n)
	}
	got, traces := h.take()
	if len(got) != 1 {
		t.Fatalf("%d records, want 1", len(got))
	}
	want := []string{"events=33", "first=0", "summed_over=1s"}
	if a := attrs(got[0]); !slices.Equal(a, want) || got[0].Level != slog.LevelWarn || traces[0] != "trace-1" {
		t.Fatalf("record %q at %v with %v (trace %q), want %v", got[0].Message, got[0].Level, a, traces[0], want)
	}
	if !got[0].Time.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("record time %v, want the first Add's", got[0].Time)
	}

	s.Add(ctx, 4, slog.String("first_event_id", "e-9"))
	clock.advance(time.Second)
	got, _ = h.take()
	if len(got) != 1 || !slices.Equal(attrs(got[0]), []string{"events=4", "first_event_id=e-9"}) {
		t.Fatalf("lone record: %v", got)
	}

	s.Add(ctx, 2)
	s.Add(ctx, 3)
	s.Flush()
	got, _ = h.take()
	if len(got) != 1 || !slices.Equal(attrs(got[0]), []string{"events=5", "summed_over=1s"}) {
		t.Fatalf("flushed record: %v", got)
	}
	s.Flush()
	if n := clock.advance(time.Second); n != 0 {
		t.Fatalf("%d stopped timers ran", n)
	}
	if got, _ := h.take(); len(got) != 0 {
		t.Fatalf("records after Flush: %v", messages(got))
	}
}

// TestSumDisabled: a Sum whose logger drops its level opens no window.
func TestSumDisabled(t *testing.T) {
	h := newCapture(slog.LevelError)
	clock := &fakeClock{}
	s := outboxlog.NewSum(slog.New(h), slog.LevelWarn, "m", "events", outboxlog.SumOptions{Clock: clock})
	s.Add(context.Background(), 1)
	if len(clock.timers) != 0 {
		t.Fatal("a window was opened for a dropped level")
	}
}
