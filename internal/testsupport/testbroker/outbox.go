package testbroker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/poller"
)

// Outbox is an outbox on a fresh SQLite table whose registry sends every
// event to one listener (a publisher under test).
type Outbox struct {
	*outbox.Outbox
	Target testdb.Target
}

// OutboxConfig shapes NewOutbox's outbox; zero fields take small test values.
type OutboxConfig struct {
	Workers     int           // default 16
	MaxAttempts int           // default 10
	RetryBase   time.Duration // default 20ms (backoff max 500ms)
	// Ordered runs the outbox on the table's ordered store, which orders
	// the aggregate types of storetest.Ordering ("Order", "Ledger").
	Ordered bool
}

// NewOutbox starts an outbox whose fallback listener is l; it is closed
// when the test ends.
func NewOutbox(t testing.TB, l core.Listener, cfg OutboxConfig) *Outbox {
	t.Helper()
	tg := testdb.SQLite(t)
	reg := core.NewRegistry()
	if err := reg.RegisterFallback(l); err != nil {
		t.Fatal(err)
	}
	if cfg.Workers == 0 {
		cfg.Workers = 16
	}
	if cfg.RetryBase == 0 {
		cfg.RetryBase = 20 * time.Millisecond
	}
	st := tg.Store
	if cfg.Ordered {
		st = tg.Ordered
	}
	ob, err := outbox.New(outbox.Config{
		DB: tg.DB, Store: st, Registry: reg,
		Dispatch: dispatch.Config{
			Workers: cfg.Workers, MaxAttempts: cfg.MaxAttempts,
			Retry: &core.ExponentialBackoff{Base: cfg.RetryBase, Max: 500 * time.Millisecond},
		},
		Poller: poller.Config{Interval: 100 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ob.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ob.Close(context.Background()); err != nil {
			t.Errorf("close outbox: %v", err)
		}
	})
	return &Outbox{Outbox: ob, Target: tg}
}

// Write commits n events of type typ on aggregate agg, one transaction each,
// with aggregate ids key-0 .. key-(keys-1) in turn, and returns their ids.
func (o *Outbox) Write(t testing.TB, n, keys int, agg, typ string) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for i := range n {
		env, err := core.NewEnvelope(core.EnvelopeSpec{
			Type: core.EventName(typ), AggregateType: core.AggregateName(agg),
			AggregateID: fmt.Sprintf("key-%d", i%max(keys, 1)), TenantID: "tenant-1",
			Headers: map[string]string{"seq": fmt.Sprint(i)},
			JSON:    []byte(fmt.Sprintf(`{"n":%d}`, i)),
		})
		if err != nil {
			t.Fatal(err)
		}
		err = o.Do(context.Background(), func(ctx context.Context) error {
			_, err := o.Writer().Write(ctx, env)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, env.ID())
	}
	return ids
}

// Stats returns the table's counts by state.
func (o *Outbox) Stats(t testing.TB) core.Stats {
	t.Helper()
	in, ok := core.StoreAs[core.Inspector](o.Target.Store)
	if !ok {
		t.Fatal("store has no Stats")
	}
	st, err := in.Stats(context.Background(), o.Target.DB)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// WaitSettled waits until no row is pending (every one DONE or DEAD) and
// returns the counts; it fails the test after limit.
func (o *Outbox) WaitSettled(t testing.TB, limit time.Duration) core.Stats {
	t.Helper()
	return o.WaitFor(t, limit, "every event settled", func(st core.Stats) bool { return st.New == 0 && st.Retry == 0 })
}

// WaitFor polls the table's counts until cond holds; it fails the test
// after limit. Polling a database table has no channel to wait on.
func (o *Outbox) WaitFor(t testing.TB, limit time.Duration, what string, cond func(core.Stats) bool) core.Stats {
	t.Helper()
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		st := o.Stats(t)
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("not %s after %s: %+v", what, limit, st)
		}
		<-tick.C
	}
}
