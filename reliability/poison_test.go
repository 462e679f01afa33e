package reliability

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/internal/testsupport/testnode"
	"github.com/outboxkit/outbox/reliability/internal/chaos"
)

// Poison kinds, chosen by event index modulo 100: 1% each.
const (
	poisonFail  = 13 // the listener always returns an error
	poisonPanic = 47 // the listener always panics
	poisonHang  = 81 // the listener blocks until its timeout, every time
)

const (
	poisonMaxAttempts     = 5
	poisonListenerTimeout = 100 * time.Millisecond
)

func poisonKind(i int) string {
	switch i % 100 {
	case poisonFail:
		return "fail"
	case poisonPanic:
		return "panic"
	case poisonHang:
		return "hang"
	}
	return ""
}

// poisonResult is what one run measured.
type poisonResult struct {
	healthy, poison  int
	p50, p99, maxLat time.Duration // first-delivery latency of healthy events
	dupEvents        int           // healthy events delivered more than once
	elapsed          time.Duration
}

// TestPoison: 1% of events always fail, 1% panic and 1% hang past the
// listener timeout. Every healthy event is delivered once, at a latency
// close to the run without poison (no head-of-line blocking), and every
// poison event ends DEAD after exactly MaxAttempts deliveries. In position
// delivery a poison event's first failure moves its row from STREAM to
// RETRY (the reader reads on past it), and the claim path makes the other
// attempts; the healthy rows stay STREAM.
func TestPoison(t *testing.T) {
	t.Parallel()
	forEachDialectDelivery(t, testdb.Dialects, func(t *testing.T, tg testdb.Target, dv delivery) {
		rate := cfg.poisonRate
		if tg.Name == "sqlite" {
			rate /= 2 // one connection for writes and deliveries
		}
		clean := runPoison(t, tg, dv, cfg.poisonEvents, rate, false)
		// A fresh table for the second run, so that its counts are its own.
		poisoned := runPoison(t, testdb.Open(t, tg.Name), dv, cfg.poisonEvents, rate, true)
		t.Logf("poison %s %s (%s): %d events at %.0f/s; healthy first-delivery latency without poison p50 %s p99 %s max %s; "+
			"with %d poison events (fail/panic/hang, MaxAttempts %d, listener timeout %s) p50 %s p99 %s max %s; "+
			"every poison event DEAD after exactly %d attempts; healthy events delivered twice: %d/%d",
			tg.Name, dv.name, cfg.name, cfg.poisonEvents, rate, ms(clean.p50), ms(clean.p99), ms(clean.maxLat),
			poisoned.poison, poisonMaxAttempts, poisonListenerTimeout, ms(poisoned.p50), ms(poisoned.p99), ms(poisoned.maxLat),
			poisonMaxAttempts, clean.dupEvents, poisoned.dupEvents)
	})
}

func runPoison(t *testing.T, tg testdb.Target, dv delivery, count int, rate float64, withPoison bool) poisonResult {
	t.Helper()
	kindOf := func(i int) string {
		if !withPoison {
			return ""
		}
		return poisonKind(i)
	}
	envs, ids := chaosEnvs(t, count, func(i int) map[string]string {
		if k := kindOf(i); k != "" {
			return map[string]string{"kind": k}
		}
		return nil
	})
	writeStart := make([]atomic.Int64, count) // unix nanos before each event's transaction began
	latency := make([]time.Duration, count)
	log := testnode.NewDeliveryLog()
	reg := core.NewRegistry()
	err := reg.RegisterFunc(chaos.Aggregate, chaos.EventType, func(ctx context.Context, ev core.Event) error {
		if log.Record(ev.ID()) == 1 {
			if i, err := strconv.Atoi(ev.AggregateID()); err == nil {
				latency[i] = time.Since(time.Unix(0, writeStart[i].Load()))
			}
		}
		switch k, _ := ev.Header("kind"); k {
		case "fail":
			return errors.New("poison: always fails")
		case "panic":
			panic("poison: always panics")
		case "hang":
			<-ctx.Done()
			return fmt.Errorf("poison: hung past the listener timeout: %w", ctx.Err())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	n := startDeliveryNode(t, dv, tg.Store, tg.DB, reg, testnode.Options{Dispatch: func(c *dispatch.Config) {
		c.Workers = 8
		c.MaxAttempts = poisonMaxAttempts
		c.ListenerTimeout = poisonListenerTimeout
		c.Retry = &core.ExponentialBackoff{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond}
	}})

	start := time.Now()
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 4 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= count {
					return
				}
				if d := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); d > 0 {
					time.Sleep(d) // pacing: event i is due at start + i/rate
				}
				writeStart[i].Store(time.Now().UnixNano())
				if err := n.Write(context.Background(), envs[i]); err != nil {
					t.Errorf("write %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()

	var healthyIDs, poisonIDs []string
	var healthyIdx []int
	for i, id := range ids {
		if kindOf(i) == "" {
			healthyIDs, healthyIdx = append(healthyIDs, id), append(healthyIdx, i)
		} else {
			poisonIDs = append(poisonIDs, id)
		}
	}
	log.WaitFor(t, 2*time.Minute, "every event's deliveries", func(calls map[string]int) bool {
		for _, id := range healthyIDs {
			if calls[id] == 0 {
				return false
			}
		}
		for _, id := range poisonIDs {
			if calls[id] < poisonMaxAttempts {
				return false
			}
		}
		return true
	})
	n.Close(t) // every outcome is written when Close returns
	res := poisonResult{healthy: len(healthyIDs), poison: len(poisonIDs), elapsed: time.Since(start)}

	if c := testnode.StatusCounts(t, tg.DB, tg.Table); c[dv.delivered()] != len(healthyIDs) || c[core.StatusDead] != len(poisonIDs) {
		t.Errorf("rows by status %v, want %d %v and %d DEAD", c, len(healthyIDs), dv.delivered(), len(poisonIDs))
	}
	for i, id := range ids {
		k := kindOf(i)
		if k == "" {
			if c := log.Count(id); c > 1 {
				res.dupEvents++
			}
			continue
		}
		ev, err := tg.Store.Get(context.Background(), tg.DB, id)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"fail": "always fails", "panic": "panic: poison", "hang": "deadline exceeded"}[k]
		if ev.Status != core.StatusDead || ev.Attempts != poisonMaxAttempts || !strings.Contains(ev.LastError, want) {
			t.Errorf("%s poison %s: %v after %d attempts, last error %q; want DEAD after %d, error containing %q",
				k, id, ev.Status, ev.Attempts, ev.LastError, poisonMaxAttempts, want)
		}
		if c := log.Count(id); c != poisonMaxAttempts {
			t.Errorf("%s poison %s: %d deliveries, want exactly %d", k, id, c, poisonMaxAttempts)
		}
	}
	lat := make([]time.Duration, 0, len(healthyIdx))
	for _, i := range healthyIdx {
		lat = append(lat, latency[i])
	}
	res.p50, res.p99, res.maxLat = percentile(lat, 50), percentile(lat, 99), percentile(lat, 100)
	if res.dupEvents > 0 {
		t.Errorf("%d healthy events delivered more than once by a single instance", res.dupEvents)
	}
	return res
}
