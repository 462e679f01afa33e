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

// process delivers one event and records its outcome.
func (d *Dispatcher) process(ctx context.Context, ev core.Event) {
	now := d.cfg.Now()
	d.cfg.Metrics.QueueDepths(len(d.hot), len(d.cold))
	if !ev.CreatedAt.IsZero() {
		d.cfg.Metrics.OldestLag(now.Sub(ev.CreatedAt))
	}
	res, err := d.deliver(ctx, ev)
	if res == delivered && d.batch != nil {
		d.cfg.Metrics.DispatchSuccess()
		d.batch.add(ev) // untracked once its DONE is written
		return
	}
	d.record(ctx, ev, res, err)
	d.inflight.untrack(ev.ID()) // after a terminal write; a no-op after RETRY or a release

}
