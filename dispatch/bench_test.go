package dispatch_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
)

// countingMarker is a store whose DONE batches only count their ids: the
// dispatcher's own cost per event, without a database.
type countingMarker struct {
	*memStore
	done atomic.Int64
}

func (s *countingMarker) MarkDoneBatch(_ context.Context, _ core.DBTX, _ string, ids []string, _ time.Time) (int64, error) {
	s.done.Add(int64(len(ids)))
	return int64(len(ids)), nil
}

// BenchmarkColdDrain feeds claimed events to the cold queue as a poller
// does, in batches of 500 while there is room, to 512 workers with a no-op
// listener, and waits for every DONE: the dispatcher's cost per event of a
// backlog drain. cpu-ns/op is the process's CPU time per event (user and
// system), which a loaded machine inflates far less than the wall time.
func BenchmarkColdDrain(b *testing.B) {
	for _, workers := range []int{4, 512} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			st := &countingMarker{memStore: newMemStore()}
			reg := core.NewRegistry()
			if err := reg.RegisterFallback(core.ListenerFunc(func(context.Context, core.Event) error { return nil })); err != nil {
				b.Fatal(err)
			}
			d, err := dispatch.New(dispatch.Config{Store: st, DB: nopDB{}, Registry: reg, Workers: workers, ColdQueueSize: 2000})
			if err != nil {
				b.Fatal(err)
			}
			now := time.Now()
			evs := make([]core.Event, b.N)
			for i := range evs {
				env, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("OrderPlaced"),
					AggregateType: core.AggregateName("Order"), AggregateID: fmt.Sprint(i % 1000), JSON: []byte(`{"a":1}`)})
				if err != nil {
					b.Fatal(err)
				}
				evs[i] = core.Event{Envelope: env, CreatedAt: now, AvailableAt: now, LockedBy: d.Owner(), LockedAt: now}
			}
			if err := d.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			defer d.Close(context.Background())
			b.ResetTimer()
			cpu0 := cpuTime()
			for sent := 0; sent < b.N; {
				if d.ColdCapacity() < min(500, b.N-sent) {
					time.Sleep(100 * time.Microsecond) // as the poller's backlog pause, shorter
					continue
				}
				for i := 0; i < 500 && sent < b.N; i++ {
					if !d.EnqueueCold(evs[sent]) {
						b.Fatal("refused")
					}
					sent++
				}
			}
			for st.done.Load() < int64(b.N) {
				time.Sleep(time.Millisecond)
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHandoff hands committed events to the dispatcher as the writer
// hook does after a commit, one event per transaction, to 4 workers with a
// no-op listener whose DONE outcomes only count: the hot path's cost per
// event, allocations included, without a database. At most half the hot
// queue is outstanding, so that no event is refused.
func BenchmarkHandoff(b *testing.B) {
	st := &countingMarker{memStore: newMemStore()}
	reg := core.NewRegistry()
	if err := reg.RegisterFallback(core.ListenerFunc(func(context.Context, core.Event) error { return nil })); err != nil {
		b.Fatal(err)
	}
	const queue = 1024
	d, err := dispatch.New(dispatch.Config{Store: st, DB: nopDB{}, Registry: reg, Workers: 4, HotQueueSize: queue})
	if err != nil {
		b.Fatal(err)
	}
	envs := make([][]core.Envelope, b.N)
	for i := range envs {
		env, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("OrderPlaced"),
			AggregateType: core.AggregateName("Order"), AggregateID: fmt.Sprint(i % 1000), JSON: []byte(`{"a":1}`)})
		if err != nil {
			b.Fatal(err)
		}
		envs[i] = []core.Envelope{env}
	}
	if err := d.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer d.Close(context.Background())
	hook := d.WriterHook()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range envs {
		for int64(i)-st.done.Load() >= queue/2 {
			runtime.Gosched()
		}
		if err := hook.AfterCommit(ctx, envs[i]); err != nil {
			b.Fatal(err)
		}
	}
	for st.done.Load() < int64(b.N) {
		time.Sleep(100 * time.Microsecond)
	}
	b.StopTimer()
	if n := st.done.Load(); n != int64(b.N) {
		b.Fatalf("%d DONE, want %d", n, b.N)
	}
}

// BenchmarkHandoffRefused hands committed events to a dispatcher whose hot
// queue is full, one event per transaction: each is refused, released and
// warned about, on slog.Default() (a text handler that discards): the cost
// of an overflow's logging on the committing goroutine.
func BenchmarkHandoffRefused(b *testing.B) {
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer slog.SetDefault(old)
	st := newMemStore()
	d, err := dispatch.New(dispatch.Config{Store: st, DB: nopDB{}, Registry: core.NewRegistry(), Workers: 1, HotQueueSize: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close(context.Background())
	envs := make([][]core.Envelope, b.N+1)
	for i := range envs {
		env, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("OrderPlaced"),
			AggregateType: core.AggregateName("Order"), AggregateID: fmt.Sprint(i % 1000), JSON: []byte(`{"a":1}`)})
		if err != nil {
			b.Fatal(err)
		}
		envs[i] = []core.Envelope{env}
	}
	hook := d.WriterHook()
	ctx := context.Background()
	if err := hook.AfterCommit(ctx, envs[0]); err != nil { // fills the hot queue: not started, nothing drains it
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for _, e := range envs[1:] {
		if err := hook.AfterCommit(ctx, e); err != nil {
			b.Fatal(err)
		}
	}
}
