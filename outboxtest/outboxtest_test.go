package outboxtest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/outboxtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func write(t *testing.T, h *outboxtest.Harness, typ core.EventType, aggID string) string {
	t.Helper()
	var id string
	err := h.Do(context.Background(), func(ctx context.Context) error {
		env, err := core.NewEnvelope(core.EnvelopeSpec{Type: typ, AggregateType: Order, AggregateID: aggID, JSON: []byte(`{}`)})
		if err != nil {
			return err
		}
		id, err = h.Writer.Write(ctx, env)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// recT records what a Harness reports; Fatalf stops the calling function.
type recT struct {
	*testing.T
	errors, fatals []string
}

type fatal struct{}

func (r *recT) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *recT) Fatalf(format string, args ...any) {
	r.fatals = append(r.fatals, fmt.Sprintf(format, args...))
	panic(fatal{})
}

func expectFatal(t *testing.T, r *recT, want string, fn func()) {
	t.Helper()
	func() {
		defer func() {
			if v := recover(); v != nil {
				if _, ok := v.(fatal); !ok {
					panic(v)
				}
			}
		}()
		fn()
	}()
	if len(r.fatals) == 0 || !strings.Contains(r.fatals[len(r.fatals)-1], want) {
		t.Fatalf("fatals %q, want one containing %q", r.fatals, want)
	}
}

func TestWrittenShowsCommittedOnly(t *testing.T) {
	t.Parallel()
	h := outboxtest.New(t, outboxtest.Config{Table: "my_outbox"})
	a := write(t, h, OrderPlaced, "o-1")
	errBusiness := errors.New("declined")
	err := h.Do(context.Background(), func(ctx context.Context) error {
		env, err := core.NewEnvelope(core.EnvelopeSpec{Type: OrderShipped, JSON: []byte(`{}`)})
		if err != nil {
			return err
		}
		if _, err := h.Writer.Write(ctx, env); err != nil {
			return err
		}
		return errBusiness
	})
	if !errors.Is(err, errBusiness) {
		t.Fatal(err)
	}
	b := write(t, h, OrderShipped, "o-1")
	got := h.Written()
	if len(got) != 2 || got[0].ID() != a || got[1].ID() != b || got[0].Status != core.StatusNew {
		t.Fatalf("Written = %v", got)
	}
	if !h.AssertWritten(t, OrderPlaced, OrderShipped) {
		t.Fatal("AssertWritten failed")
	}
	if h.Store.Table() != "my_outbox" {
		t.Errorf("table %q", h.Store.Table())
	}

	r := &recT{T: t}
	if h.AssertWritten(r, OrderShipped) || len(r.errors) != 1 ||
		r.errors[0] != "outboxtest: events written: [OrderPlaced OrderShipped], want [OrderShipped]" {
		t.Errorf("AssertWritten mismatch reported %q", r.errors)
	}
	h.Clear()
	if !h.AssertWritten(t) {
		t.Error("events left after Clear")
	}
}

func TestDeliverAllOutcomes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := outboxtest.New(t, outboxtest.Config{MaxAttempts: 3,
		Retry: core.ExponentialBackoff{Base: time.Second, Max: time.Second}})
	reg := h.Registry
	var calls []string
	listen := func(typ string, fn func(ev core.Event) error) {
		t.Helper()
		if err := reg.RegisterFunc(Order, core.EventName(typ), func(ctx context.Context, ev core.Event) error {
			calls = append(calls, typ)
			return fn(ev)
		}); err != nil {
			t.Fatal(err)
		}
	}
	listen("Ok", func(core.Event) error { return nil })
	listen("Permanent", func(core.Event) error { return core.Permanent(errors.New("bad payload")) })
	listen("Panics", func(core.Event) error { panic("boom") })
	listen("FailsOnce", func(ev core.Event) error {
		if ev.Attempts == 0 {
			return errors.New("timeout")
		}
		return nil
	})
	listen("RetryNow", func(core.Event) error { return core.RetryAfter(errors.New("again"), 0) })
	listen("Writes", func(ev core.Event) error {
		// A listener that writes a follow-up event in its own transaction.
		return h.Do(ctx, func(ctx context.Context) error {
			env, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("Ok"), AggregateType: Order,
				AggregateID: "follow-up", JSON: []byte(`{}`)})
			if err != nil {
				return err
			}
			_, err = h.Writer.Write(ctx, env)
			return err
		})
	})

	ids := map[string]string{}
	for _, typ := range []string{"Ok", "Permanent", "Panics", "FailsOnce", "RetryNow", "Writes", "NoListener"} {
		ids[typ] = write(t, h, core.EventName(typ), typ)
	}

	delivered, failed, err := h.DeliverAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Ok, Writes and its follow-up succeed; Permanent, Panics, FailsOnce,
	// NoListener fail once, RetryNow three times (due again at once).
	if delivered != 3 || failed != 7 {
		t.Errorf("DeliverAll = %d delivered, %d failed; want 3, 7", delivered, failed)
	}
	want := map[string]struct {
		status   core.Status
		attempts int
		lastErr  string
	}{
		"Ok":         {core.StatusDone, 0, ""},
		"Permanent":  {core.StatusDead, 1, "permanent: bad payload"},
		"Panics":     {core.StatusRetry, 1, "panic: boom"},
		"FailsOnce":  {core.StatusRetry, 1, "timeout"},
		"RetryNow":   {core.StatusDead, 3, "retry after 0s: again"},
		"Writes":     {core.StatusDone, 0, ""},
		"NoListener": {core.StatusDead, 1, "outbox: no listener for event"},
	}
	for typ, w := range want {
		ev := h.Event(ids[typ])
		if ev.Status != w.status || ev.Attempts != w.attempts || !strings.HasPrefix(ev.LastError, w.lastErr) {
			t.Errorf("%s: %s, %d attempts, %q; want %s, %d, %q", typ, ev.Status, ev.Attempts, ev.LastError,
				w.status, w.attempts, w.lastErr)
		}
		if ev.LockedBy != "" {
			t.Errorf("%s: still leased by %q", typ, ev.LockedBy)
		}
		if w.status == core.StatusRetry && !ev.AvailableAt.After(h.Now()) {
			t.Errorf("%s: retry at %v, not after now %v", typ, ev.AvailableAt, h.Now())
		}
	}

	// Nothing is due until the clock moves past the retries.
	if d, f, err := h.DeliverAll(ctx); d != 0 || f != 0 || err != nil {
		t.Errorf("second DeliverAll = %d, %d, %v; want nothing due", d, f, err)
	}
	h.Advance(2 * time.Second)
	if d, f, err := h.DeliverAll(ctx); d != 1 || f != 1 || err != nil {
		t.Errorf("DeliverAll after Advance = %d, %d, %v; want FailsOnce done, Panics failed", d, f, err)
	}
	if ev := h.Event(ids["FailsOnce"]); ev.Status != core.StatusDone {
		t.Errorf("FailsOnce: %s", ev.Status)
	}
	if ev := h.Event(ids["Panics"]); ev.Status != core.StatusRetry || ev.Attempts != 2 {
		t.Errorf("Panics: %s after %d attempts", ev.Status, ev.Attempts)
	}
}

// A listener that writes an event each time it runs never settles;
// DeliverAll gives up with an error instead of spinning.
func TestDeliverAllBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := outboxtest.New(t, outboxtest.Config{})
	n := 0
	_ = h.Registry.RegisterFunc(Order, OrderPlaced, func(ctx context.Context, ev core.Event) error {
		n++
		if n > 1500 {
			return nil
		}
		write(t, h, OrderPlaced, "again")
		return nil
	})
	write(t, h, OrderPlaced, "first")
	if _, _, err := h.DeliverAll(ctx); err == nil || !strings.Contains(err.Error(), "still due after 1000 claims") {
		t.Fatalf("DeliverAll: %v", err)
	}
}

func TestDeliverAllCancelled(t *testing.T) {
	t.Parallel()
	h := outboxtest.New(t, outboxtest.Config{})
	write(t, h, OrderPlaced, "o-1")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := h.DeliverAll(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("DeliverAll: %v, want context.Canceled", err)
	}
}

func TestMisuseFails(t *testing.T) {
	t.Parallel()
	r := &recT{T: t}
	expectFatal(t, r, "MaxAttempts is negative", func() { outboxtest.New(r, outboxtest.Config{MaxAttempts: -1}) })
	expectFatal(t, r, "invalid table name", func() { outboxtest.New(r, outboxtest.Config{Table: "no;drop"}) })
	h := outboxtest.New(r, outboxtest.Config{})
	expectFatal(t, r, "only moves forward", func() { h.Advance(-time.Second) })
	expectFatal(t, r, "event not found", func() { h.Event("missing") })
}
