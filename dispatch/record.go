package dispatch

import (
	"context"
	"errors"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/delivery"
)

// record turns the result of a delivery into its outcome and hands it to the
// write-back path (writeback.go), fenced by the event's lease owner. When the
// lease was lost during the delivery (a renewal found another owner, or a
// terminal row), nothing is written: the row is not this delivery's any
// more. ctx is the worker's context, cancelled by the hard stop.
func (d *Dispatcher) record(ctx context.Context, e *entry, ev core.Event, res outcome, err error) {
	var perm *core.PermanentError
	if pe := (*core.PanicError)(nil); errors.As(err, &pe) {
		d.eventLog(d.log.Error(), ev).Str("panic", fmt.Sprint(pe.Value)).Bytes("stack", pe.Stack).Msg("outbox listener panicked")
	}
	now := d.cfg.Now()
	switch {
	case res == delivered:
		if !d.writable(e, ev, finishing) {
			return
		}
		d.cfg.Metrics.DispatchSuccess()
		op := writeOp{e: e, kind: writeDone}
		if d.batch != nil {
			d.batch.add(op) // untracked once its DONE is written
			return
		}
		d.write(ctx, op)

	case res == unroutable:
		if !d.writable(e, ev, finishing) {
			return
		}
		d.cfg.Metrics.DispatchDead()
		d.deadLog(ev).Err(err).Msg("outbox event is unroutable; marked DEAD" + d.deadKeyNote(ev))
		d.write(ctx, writeOp{e: e, kind: writeDead, at: now, lastErr: core.TruncateError(err.Error())})

	case ctx.Err() != nil && !errors.As(err, &perm):
		// Shutdown cancelled the listener: the failure is ours, not the
		// event's, so give the event back without counting an attempt.
		if !d.writable(e, ev, reopening) {
			return
		}
		d.eventLog(d.log.Info(), ev).Err(err).Msg("outbox delivery interrupted by shutdown; lease released")
		// Untracked before the release: intake has stopped, so no claim of
		// it is taken any more, and the release's retry (release.go) skips
		// only ids this dispatcher holds.
		d.inflight.done(e)
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.StoreTimeout)
		defer cancel()
		if _, serr := d.cfg.Store.Release(wctx, d.cfg.DB, e.owner, []string{e.id}); serr != nil {
			d.cfg.Metrics.StoreError()
			d.eventLog(d.log.Warn(), ev).Err(serr).Msg("outbox lease release failed; trying again before shutdown ends")
			d.releaseLater(e.owner, []string{e.id}, ev.LockedAt)
		}

	default:
		attempts := ev.Attempts + 1
		dead, delay := delivery.AfterFailure(err, attempts, d.cfg.MaxAttempts, d.cfg.Retry)
		if dead {
			if !d.writable(e, ev, finishing) {
				return
			}
			d.cfg.Metrics.DispatchDead()
			d.deadLog(ev).Err(err).Int("attempts", attempts).Msg("outbox event failed; marked DEAD" + d.deadKeyNote(ev))
			d.write(ctx, writeOp{e: e, kind: writeDead, at: now, lastErr: core.TruncateError(err.Error())})
			return
		}
		if !d.writable(e, ev, reopening) {
			return
		}
		d.cfg.Metrics.DispatchFailure()
		next := now.Add(delay)
		d.eventLog(d.log.Warn(), ev).Err(err).Int("attempts", attempts).Int64("retry_in_ms", delay.Milliseconds()).Msg("outbox event failed; retry scheduled")
		d.write(ctx, writeOp{e: e, kind: writeRetry, at: next, created: ev.CreatedAt, lastErr: core.TruncateError(err.Error())})
	}
}

// writable moves e to state s for the write of its outcome, or reports
// false, having logged it, when its lease was lost during the delivery.
func (d *Dispatcher) writable(e *entry, ev core.Event, s entryState) bool {
	if d.inflight.writing(e, s) {
		return true
	}
	d.eventLog(d.log.Warn(), ev).Msg("outbox lease lost during delivery (renewal found another owner or a terminal row); no outcome written")
	return false
}

// deadLog starts the ERROR line of an event marked DEAD; an ordered
// event's line names its key.
func (d *Dispatcher) deadLog(ev core.Event) *zerolog.Event {
	e := d.eventLog(d.log.Error(), ev)
	if ev.Seq != 0 {
		e = e.Str("aggregate_id", ev.AggregateID()).Int64("seq", ev.Seq)
	}
	return e
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

func (d *Dispatcher) eventLog(e *zerolog.Event, ev core.Event) *zerolog.Event {
	return e.Str("event_id", ev.ID()).Str("event_type", ev.Type()).
		Str("aggregate_type", ev.AggregateType()).Int("attempts_before", ev.Attempts)
}
