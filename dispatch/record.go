package dispatch

import (
	"context"
	"errors"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/delivery"
)

// record writes the outcome back, fenced by the event's lease owner. A store
// error here is an infrastructure failure, not a listener failure: it is
// logged and counted, and the row is left for its lease to expire.
func (d *Dispatcher) record(ctx context.Context, ev core.Event, res outcome, err error) {
	// Outcomes must be written even while shutting down.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.StoreTimeout)
	defer cancel()
	var (
		st    = d.cfg.Store
		owner = ev.LockedBy
		id    = ev.ID()
		now   = d.cfg.Now()
		perm  *core.PermanentError
	)
	if pe := (*core.PanicError)(nil); errors.As(err, &pe) {
		d.eventLog(d.log.Error(), ev).Str("panic", fmt.Sprint(pe.Value)).Bytes("stack", pe.Stack).Msg("outbox listener panicked")
	}
	switch {
	case res == delivered:
		d.cfg.Metrics.DispatchSuccess()
		ok, serr := st.MarkDone(wctx, d.cfg.DB, owner, id, now)
		d.written(ev, "done", ok, serr)

	case res == unroutable:
		d.cfg.Metrics.DispatchDead()
		d.eventLog(d.log.Error(), ev).Err(err).Msg("outbox event is unroutable; marked DEAD")
		ok, serr := st.MarkDead(wctx, d.cfg.DB, owner, id, now, core.TruncateError(err.Error()))
		d.written(ev, "dead", ok, serr)

	case ctx.Err() != nil && !errors.As(err, &perm):
		// Shutdown cancelled the listener: the failure is ours, not the
		// event's, so give the event back without counting an attempt.
		d.eventLog(d.log.Info(), ev).Err(err).Msg("outbox delivery interrupted by shutdown; lease released")
		d.inflight.untrack(id) // before the write, which makes the row claimable
		if _, serr := st.Release(wctx, d.cfg.DB, owner, []string{id}); serr != nil {
			d.cfg.Metrics.StoreError()
			d.eventLog(d.log.Warn(), ev).Err(serr).Msg("outbox lease release failed; trying again before shutdown ends")
			d.releaseLater(owner, []string{id}, ev.LockedAt)
		}

	default:
		attempts := ev.Attempts + 1
		dead, delay := delivery.AfterFailure(err, attempts, d.cfg.MaxAttempts, d.cfg.Retry)
		if dead {
			d.cfg.Metrics.DispatchDead()
			d.eventLog(d.log.Error(), ev).Err(err).Int("attempts", attempts).Msg("outbox event failed; marked DEAD")
			ok, serr := st.MarkDead(wctx, d.cfg.DB, owner, id, now, core.TruncateError(err.Error()))
			d.written(ev, "dead", ok, serr)
			return
		}
		d.cfg.Metrics.DispatchFailure()
		next := now.Add(delay)
		d.eventLog(d.log.Warn(), ev).Err(err).Int("attempts", attempts).Dur("retry_in", delay).Msg("outbox event failed; retry scheduled")
		d.inflight.untrack(id) // before the write, which makes the row claimable
		ok, serr := st.MarkRetry(wctx, d.cfg.DB, owner, id, next, core.TruncateError(err.Error()))
		d.written(ev, "retry", ok, serr)
		if ok && serr == nil {
			d.notifyDue(next)
		}
	}
}

// written logs the result of a write-back.
func (d *Dispatcher) written(ev core.Event, what string, ok bool, err error) {
	switch {
	case err != nil:
		d.cfg.Metrics.StoreError()
		d.eventLog(d.log.Error(), ev).Err(err).Str("write", what).
			Msg("outbox write-back failed; the row stays leased until the lease expires")
	case !ok:
		d.eventLog(d.log.Warn(), ev).Str("write", what).
			Msg("outbox write-back fenced: the lease was lost to another owner or the row is terminal")
	}
}

func (d *Dispatcher) eventLog(e *zerolog.Event, ev core.Event) *zerolog.Event {
	return e.Str("event_id", ev.ID()).Str("event_type", ev.Type()).
		Str("aggregate_type", ev.AggregateType()).Int("attempts_before", ev.Attempts)
}
