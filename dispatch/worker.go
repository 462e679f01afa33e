package dispatch

import (
	"context"

	"github.com/outboxkit/outbox/core"
)

// work is one worker: it takes events until shutdown and processes each.
func (d *Dispatcher) work(ctx context.Context) {
	for {
		ev, ok := d.next()
		if !ok {
			return
		}
		d.process(ctx, ev)
	}
}

// process delivers one event and records its outcome. The listener runs on a
// context of its own, which the lease renewal cancels (cause errLeaseLost)
// when it finds the event's lease lost.
func (d *Dispatcher) process(ctx context.Context, ev core.Event) {
	now := d.cfg.Now()
	d.cfg.Metrics.QueueDepths(len(d.hot), len(d.cold))
	if !ev.CreatedAt.IsZero() {
		d.cfg.Metrics.OldestLag(now.Sub(ev.CreatedAt))
	}
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	e := d.inflight.begin(ev.ID(), cancel)
	if e == nil {
		d.eventLog(d.log.Warn(), ev).Msg("outbox lease lost while the event was queued; not delivered")
		return
	}
	res, err := d.deliver(lctx, ev)
	d.record(ctx, e, ev, res, err)
}
