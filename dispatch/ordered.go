package dispatch

import (
	"context"
	"log/slog"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/outboxlog"
)

// Ordered delivery (core.OrderedStore): the outcome of an ordered event that
// finishes its key's head (DONE, or DEAD under core.DeadContinues) is
// written together with the promotion of the key's next event, which the
// store leases to this dispatcher's owner and returns. The dispatcher puts
// it straight on its hot queue, so that the events of one key follow each
// other on one instance without waiting for a poll; an event the queue
// refuses, or one not yet due, has its lease released for a poller.

// writeDoneOrdered writes the DONE outcomes of ops, ordered events leased by
// owner, in one transaction with the promotion of their keys' next events,
// and returns the ops that failed.
func (d *Dispatcher) writeDoneOrdered(ctx context.Context, owner string, ops []writeOp, now time.Time) []writeOp {
	ids := make([]string, len(ops))
	for i, op := range ops {
		ids[i] = op.e.id
	}
	n, promoted, err := d.ordered.MarkDoneOrdered(ctx, d.cfg.DB, owner, ids, now)
	if err != nil {
		d.cfg.Metrics.StoreError()
		d.log.LogAttrs(ctx, slog.LevelError, "outbox write-back of delivered ordered events failed; trying again while the events stay leased",
			outboxlog.Err(err), slog.Int("events", len(ids)), slog.String("first_event_id", ids[0]), slog.String("write", "DONE"))
		return ops
	}
	if n < int64(len(ids)) {
		d.log.LogAttrs(ctx, slog.LevelWarn, "outbox write-back fenced for part of a batch of delivered ordered events: leases lost to another owner or rows terminal",
			slog.Int("events", len(ids)), slog.Int64("written", n), slog.String("first_event_id", ids[0]))
	}
	for _, op := range ops {
		d.inflight.done(op.e)
	}
	d.takePromoted(ctx, promoted)
	return nil
}

// writeDeadOrdered writes op's DEAD outcome, an ordered event, and takes the
// event its key's policy promotes, if any. It reports false if the write
// failed.
func (d *Dispatcher) writeDeadOrdered(ctx context.Context, op writeOp) bool {
	ok, promoted, err := d.ordered.MarkDeadOrdered(ctx, d.cfg.DB, op.e.owner, op.e.id, op.at, op.lastErr)
	if err != nil {
		d.cfg.Metrics.StoreError()
		d.log.LogAttrs(ctx, slog.LevelError, "outbox write-back failed; trying again while the event stays leased",
			outboxlog.Err(err), slog.String("event_id", op.e.id), slog.String("write", op.kind.String()))
		return false
	}
	d.landed(ctx, op, ok)
	d.takePromoted(ctx, promoted)
	return true
}

// takePromoted queues the promoted events, leased by this dispatcher, on the
// hot queue, and releases the leases of those it cannot take now.
func (d *Dispatcher) takePromoted(ctx context.Context, evs []core.Event) {
	if len(evs) == 0 {
		return
	}
	now := d.cfg.Now()
	var (
		release []string
		dueAt   time.Time
		from    time.Time // the oldest created_at released (zero: not known)
	)
	for _, ev := range evs {
		if ev.AvailableAt.After(now) {
			release = append(release, ev.ID())
			if len(release) == 1 || ev.CreatedAt.Before(from) {
				from = ev.CreatedAt
			}
			if dueAt.IsZero() || ev.AvailableAt.Before(dueAt) {
				dueAt = ev.AvailableAt
			}
			continue
		}
		switch d.enqueueHot(ev) {
		case queued, held:
		default:
			release = append(release, ev.ID())
			if len(release) == 1 || ev.CreatedAt.Before(from) {
				from = ev.CreatedAt
			}
			dueAt = now
		}
	}
	if len(release) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.StoreTimeout)
	defer cancel()
	if _, err := d.cfg.Store.Release(rctx, d.cfg.DB, d.owner, release); err != nil {
		d.cfg.Metrics.StoreError()
		d.releaseLater(d.owner, release, now)
		d.log.LogAttrs(ctx, slog.LevelWarn, "outbox release of promoted events failed; retrying in the background",
			outboxlog.Err(err), slog.Int("events", len(release)))
		return
	}
	d.notifyDue(dueAt, from)
}
