package dispatch

import (
	"context"
	"log/slog"
	"time"

	"github.com/outboxkit/outbox/outboxlog"
)

// Lease renewal.
//
// Every event the dispatcher holds (queued, being delivered, or with an
// outcome being written or retried) is leased by its owner until
// Config.LeaseTimeout after its claim, insert or last renewal. One goroutine
// (renewLeases) renews all of them every LeaseTimeout/3, one
// core.LeaseRenewer.RenewLeases call per owner, so that a lease never
// expires while the dispatcher holds its event, however slow the listener:
// no other instance claims it and delivers it a second time. Each renewal is
// bounded by LeaseTimeout/3 too, so that a lease is renewed at least once
// more before it expires even when one renewal fails or times out (it is
// then at most 2/3 of the lease old when the next one starts).
//
// A renewal that reports a lease lost (another owner took the row, or it is
// terminal) cancels the listener of that event, if it runs, with cause
// errLeaseLost, and drops the event from the tracker: no outcome is written
// for it, since the row is no longer this delivery's.
//
// Without the capability (a store that does not implement
// core.LeaseRenewer, even through Unwrap) there is no renewal: a delivery
// that outlives its lease may be claimed and delivered again elsewhere.

// renewLeases renews the leases of the held events every LeaseTimeout/3
// until stop is closed. ctx carries the values of Start's context.
func (d *Dispatcher) renewLeases(ctx context.Context, stop <-chan struct{}) {
	period := max(d.cfg.LeaseTimeout/3, time.Millisecond) // NewTicker needs a positive period
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			d.renewOnce(ctx, period)
		}
	}
}

// renewOnce renews every held lease once, one call per owner, each bounded by
// timeout.
func (d *Dispatcher) renewOnce(ctx context.Context, timeout time.Duration) {
	for owner, es := range d.inflight.leases() {
		ids := make([]string, len(es))
		for i, e := range es {
			ids[i] = e.id
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		now := d.cfg.Now()
		lost, err := d.renewer.RenewLeases(rctx, d.cfg.DB, owner, ids, now)
		cancel()
		if err != nil {
			d.cfg.Metrics.StoreError()
			d.log.LogAttrs(ctx, slog.LevelError, "outbox lease renewal failed; trying again at the next renewal, before the leases expire",
				outboxlog.Err(err), slog.Int("events", len(ids)), slog.String("owner", owner))
			continue
		}
		if n := d.inflight.renewed(es, lost, now); n > 0 {
			d.log.LogAttrs(ctx, slog.LevelWarn, "outbox leases lost (taken by another owner or rows terminal); deliveries cancelled, no outcome written",
				slog.Int("events", n), slog.String("first_event_id", lost[0]))
		}
	}
}
