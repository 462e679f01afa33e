package dispatch

import (
	"context"
	"log/slog"
	"slices"
	"strings"
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
// and returns the ops that failed. Unless wait, and while the dispatcher
// has a held-key writer (d.held), it writes them with
// MarkDoneOrderedNoWait and hands the ops whose key rows were held to that
// writer, which writes them with wait.
func (d *Dispatcher) writeDoneOrdered(ctx context.Context, owner string, ops []writeOp, now time.Time, wait bool) []writeOp {
	ids := make([]string, len(ops))
	for i, op := range ops {
		ids[i] = op.e.id
	}
	var (
		n        int64
		promoted []core.Event
		held     []string
		err      error
	)
	if !wait && d.held != nil {
		n, promoted, held, err = d.held.nw.MarkDoneOrderedNoWait(ctx, d.cfg.DB, owner, ids, now)
	} else {
		n, promoted, err = d.ordered.MarkDoneOrdered(ctx, d.cfg.DB, owner, ids, now)
	}
	if err != nil {
		d.cfg.Metrics.StoreError()
		d.log.LogAttrs(ctx, slog.LevelError, "outbox write-back of delivered ordered events failed; trying again while the events stay leased",
			outboxlog.Err(err), slog.Int("events", len(ids)), slog.String("first_event_id", ids[0]), slog.String("write", "DONE"))
		return ops
	}
	if n < int64(len(ids)-len(held)) {
		d.log.LogAttrs(ctx, slog.LevelWarn, "outbox write-back fenced for part of a batch of delivered ordered events: leases lost to another owner or rows terminal",
			slog.Int("events", len(ids)-len(held)), slog.Int64("written", n), slog.String("first_event_id", ids[0]))
	}
	var isHeld map[string]bool // the store does not promise held in any order
	if len(held) > 0 {
		isHeld = make(map[string]bool, len(held))
		for _, id := range held {
			isHeld[id] = true
		}
	}
	for _, op := range ops {
		if isHeld[op.e.id] {
			d.held.in <- op // tracked until the held-key writer writes it
			continue
		}
		d.inflight.done(op.e)
	}
	d.takePromoted(ctx, promoted)
	return nil
}

// heldDone writes, on a goroutine of its own (run), the DONE outcomes of the
// ordered events whose key rows another transaction held (a writer of the
// key, until it commits) when MarkDoneOrderedNoWait wrote their batch: with
// MarkDoneOrdered, which waits for those rows. The batches behind go on
// meanwhile, so that the writer of a key holds up only that key's DONE,
// which the key's next delivery waits for anyway. A failed write is kept
// for the write-back retry, whose attempt passes the held keys again.
//
// Its channel is bounded like the batcher's. It is closed at shutdown once
// no other write-back runs (see New's AfterHardStop).
type heldDone struct {
	d    *Dispatcher
	nw   core.OrderedNoWaitMarker
	in   chan writeOp
	done chan struct{} // closed when run has written everything and exited
}

func newHeldDone(d *Dispatcher, nw core.OrderedNoWaitMarker) *heldDone {
	return &heldDone{d: d, nw: nw, in: make(chan writeOp, max(2*d.cfg.DoneBatchSize, 1024)), done: make(chan struct{})}
}

// run writes what has arrived, without waiting for more, until in is closed
// and drained. ctx carries the values of Start's context; its cancellation
// is ignored.
func (h *heldDone) run(ctx context.Context) {
	defer close(h.done)
	ctx = context.WithoutCancel(ctx)
	var batch []writeOp
	for {
		op, ok := <-h.in
		if !ok {
			return
		}
		batch = append(batch[:0], op)
		closed := false
	collect:
		for len(batch) < h.d.cfg.DoneBatchSize {
			select {
			case op, ok := <-h.in:
				if !ok {
					closed = true
					break collect
				}
				batch = append(batch, op)
			default:
				break collect
			}
		}
		if failed := h.write(ctx, batch); len(failed) > 0 {
			h.d.pending.keep(h.d, failed)
		}
		if closed {
			return
		}
	}
}

// write writes the DONE outcomes of ops, each owner's in one
// MarkDoneOrdered call bounded by StoreTimeout, and returns the ops that
// failed. ops is not used again: it is filtered and sorted in place.
func (h *heldDone) write(ctx context.Context, ops []writeOp) (failed []writeOp) {
	d := h.d
	wctx, cancel := context.WithTimeout(ctx, d.cfg.StoreTimeout)
	defer cancel()
	if d.latency != nil {
		defer func(start time.Time) { d.latency.WriteBackDuration(time.Since(start)) }(time.Now())
	}
	now := d.cfg.Now()
	ops = d.inflight.currentOf(ops)
	slices.SortStableFunc(ops, func(a, b writeOp) int { return strings.Compare(a.e.owner, b.e.owner) })
	for len(ops) > 0 {
		n := 1
		for n < len(ops) && ops[n].e.owner == ops[0].e.owner {
			n++
		}
		failed = append(failed, d.writeDoneOrdered(wctx, ops[0].e.owner, ops[:n], now, true)...)
		ops = ops[n:]
	}
	return failed
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
