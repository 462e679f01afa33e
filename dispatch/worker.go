package dispatch

import (
	"context"
	"log/slog"
	"time"

	"github.com/outboxkit/outbox/core"
)

// work is one worker: it takes events until shutdown and processes each.
func (d *Dispatcher) work(ctx context.Context) {
	for {
		it, hot, ok := d.next()
		if !ok {
			return
		}
		d.process(ctx, it.ev, it.e, hot)
	}
}

// process delivers one event and records its outcome. The listener runs on a
// context of its own, which the lease renewal cancels (cause errLeaseLost)
// when it finds the event's lease lost.
func (d *Dispatcher) process(ctx context.Context, ev core.Event, e *entry, hot bool) {
	now := d.cfg.Now()
	d.cfg.Metrics.QueueDepths(len(d.hot), len(d.cold))
	if !ev.CreatedAt.IsZero() {
		d.cfg.Metrics.OldestLag(now.Sub(ev.CreatedAt))
	}
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if !d.inflight.begin(e, cancel) {
		d.logEvent(ctx, slog.LevelWarn, ev, "outbox lease lost while the event was queued; not delivered")
		return
	}
	if d.latency == nil {
		res, err := d.deliver(lctx, ev)
		d.record(ctx, e, ev, res, err)
		return
	}
	start := time.Now()
	d.latency.DeliveryLatency(deliveryLatency(ev, hot, now))
	res, err := d.deliver(lctx, ev)
	d.latency.ListenerDuration(time.Since(start))
	d.record(ctx, e, ev, res, err)
}

// deliveryLatency returns the queue ev came from and how long after its
// commit its delivery starts at now: a hot event from the after-commit
// hand-off (its LockedAt, set by the writer hook), a cold one from the later
// of its created_at and available_at (a retry waits for available_at by
// design).
func deliveryLatency(ev core.Event, hot bool, now time.Time) (string, time.Duration) {
	if hot {
		return "hot", max(now.Sub(ev.LockedAt), 0)
	}
	since := ev.CreatedAt
	if ev.AvailableAt.After(since) {
		since = ev.AvailableAt
	}
	return "cold", max(now.Sub(since), 0)
}
