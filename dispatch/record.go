package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/delivery"
	"github.com/outboxkit/outbox/outboxlog"
)

// record turns the result of a delivery into its outcome and hands it to the
// write-back path (writeback.go), fenced by the event's lease owner. When the
// lease was lost during the delivery (a renewal found another owner, or a
// terminal row), nothing is written: the row is not this delivery's any
// more. ctx is the worker's context, cancelled by the hard stop.
func (d *Dispatcher) record(ctx context.Context, e *entry, ev core.Event, res outcome, err error) {
	var perm *core.PermanentError
	if pe := (*core.PanicError)(nil); errors.As(err, &pe) {
		d.logEvent(ctx, slog.LevelError, ev, "outbox listener panicked",
			slog.String("panic", fmt.Sprint(pe.Value)), slog.String("stack", string(pe.Stack)))
	}
	now := d.cfg.Now()
	switch {
	case res == delivered:
		if !d.writable(ctx, e, ev, finishing) {
			return
		}
		d.cfg.Metrics.DispatchSuccess()
		if d.doneInMemory(ctx, e) {
			return
		}
		op := writeOp{e: e, kind: writeDone}
		if d.batch != nil {
			d.batch.add(op) // untracked once its DONE is written
			return
		}
		d.write(ctx, op)

	case res == unroutable:
		if !d.writable(ctx, e, ev, finishing) {
			return
		}
		d.cfg.Metrics.DispatchDead()
		d.logDead(ctx, ev, "outbox event is unroutable; marked DEAD"+d.deadKeyNote(ev), outboxlog.Err(err))
		d.write(ctx, writeOp{e: e, kind: writeDead, at: now, lastErr: core.TruncateError(err.Error())})

	case ctx.Err() != nil && !errors.As(err, &perm):
		// Shutdown cancelled the listener: the failure is ours, not the
		// event's, so give the event back without counting an attempt.
		if !d.writable(ctx, e, ev, reopening) {
			return
		}
		d.logEvent(ctx, slog.LevelInfo, ev, "outbox delivery interrupted by shutdown; lease released",
			outboxlog.Err(err))
		// Untracked before the release: intake has stopped, so no claim of
		// it is taken any more, and the release's retry (release.go) skips
		// only ids this dispatcher holds.
		d.inflight.done(e)
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.StoreTimeout)
		defer cancel()
		if _, serr := d.cfg.Store.Release(wctx, d.cfg.DB, e.owner, []string{e.id}); serr != nil {
			d.cfg.Metrics.StoreError()
			d.logEvent(ctx, slog.LevelWarn, ev, "outbox lease release failed; trying again before shutdown ends",
				outboxlog.Err(serr))
			d.releaseLater(e.owner, []string{e.id}, ev.LockedAt)
		}

	default:
		attempts := ev.Attempts + 1
		dead, delay := delivery.AfterFailure(err, attempts, d.cfg.MaxAttempts, d.cfg.Retry)
		if dead {
			if !d.writable(ctx, e, ev, finishing) {
				return
			}
			d.cfg.Metrics.DispatchDead()
			d.logDead(ctx, ev, "outbox event failed; marked DEAD"+d.deadKeyNote(ev),
				outboxlog.Err(err), slog.Int("attempts", attempts))
			d.write(ctx, writeOp{e: e, kind: writeDead, at: now, lastErr: core.TruncateError(err.Error())})
			return
		}
		if !d.writable(ctx, e, ev, reopening) {
			return
		}
		d.cfg.Metrics.DispatchFailure()
		next := now.Add(delay)
		d.logEvent(ctx, slog.LevelWarn, ev, "outbox event failed; retry scheduled",
			outboxlog.Err(err), slog.Int("attempts", attempts), slog.Int64("retry_in_ms", delay.Milliseconds()))
		d.write(ctx, writeOp{e: e, kind: writeRetry, at: next, created: ev.CreatedAt, lastErr: core.TruncateError(err.Error())})
	}
}

// doneInMemory lets e go at once when the store keeps its DONE in memory
// (delivery by position): there is nothing to write, so nothing for the
// write-back to wait for. An ordered event's DONE (core.OrderedStore) takes
// the write-back, which moves its key on.
func (d *Dispatcher) doneInMemory(ctx context.Context, e *entry) bool {
	if d.memDone == nil || e.seq != 0 || !d.memDone.ResolveDone(ctx, e.id) {
		return false
	}
	d.inflight.done(e)
	return true
}

// writable moves e to state s for the write of its outcome, or reports
// false, having logged it, when its lease was lost during the delivery.
func (d *Dispatcher) writable(ctx context.Context, e *entry, ev core.Event, s entryState) bool {
	if d.inflight.writing(e, s) {
		return true
	}
	d.logEvent(ctx, slog.LevelWarn, ev, "outbox lease lost during delivery (renewal found another owner or a terminal row); no outcome written")
	return false
}

// logDead writes the ERROR line of an event marked DEAD; an ordered
// event's line names its key.
func (d *Dispatcher) logDead(ctx context.Context, ev core.Event, msg string, attrs ...slog.Attr) {
	if ev.Seq == 0 || !d.log.Enabled(ctx, slog.LevelError) {
		d.logEvent(ctx, slog.LevelError, ev, msg, attrs...)
		return
	}
	key := make([]slog.Attr, 0, 2+len(attrs))
	key = append(key, slog.String("aggregate_id", ev.AggregateID()), slog.Int64("seq", ev.Seq))
	d.logEvent(ctx, slog.LevelError, ev, msg, append(key, attrs...)...)
}

// deadKeyNote is what the DEAD of ev does to its key, for the end of its
// log line: "" for an unordered event.
func (d *Dispatcher) deadKeyNote(ev core.Event) string {
	if ev.Seq == 0 || d.ordered == nil {
		return ""
	}
	key := ev.AggregateType() + "/" + ev.AggregateID()
	if p, _ := d.ordered.Ordering().Ordered(ev.AggregateType()); p == core.DeadContinues {
		return "; its key " + key + " moves on to its next event (DeadContinues)"
	}
	return "; its key " + key + " is now blocked: the key's later events wait until this one is replayed " +
		"or skipped (outboxctl dead blocked, dead replay ID, dead skip ID)"
}

// logEvent writes a line about ev at level: the event's id, type,
// aggregate type and attempts so far, then attrs. Nothing is built when the
// logger drops level.
func (d *Dispatcher) logEvent(ctx context.Context, level slog.Level, ev core.Event, msg string, attrs ...slog.Attr) {
	if !d.log.Enabled(ctx, level) {
		return
	}
	all := make([]slog.Attr, 0, 4+len(attrs))
	all = append(all, slog.String("event_id", ev.ID()), slog.String("event_type", ev.Type()),
		slog.String("aggregate_type", ev.AggregateType()), slog.Int("attempts_before", ev.Attempts))
	d.log.LogAttrs(ctx, level, msg, append(all, attrs...)...)
}
