package dispatch

import (
	"context"
	"errors"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/delivery"
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

// next returns the next event to process, or false when the worker must exit.
//
// Fairness is a weighted round-robin over a counter shared by all workers:
// two turns out of three prefer the hot queue, one prefers the cold queue, so
// while both have work hot events are taken twice as often as cold ones. A
// turn whose preferred queue is empty takes from the other one, so a worker
// never waits while either queue has work; when both are empty it blocks in a
// select on both queues and the shutdown signals, so it never spins.
func (d *Dispatcher) next() (core.Event, bool) {
	select {
	case <-d.hardStop:
		return core.Event{}, false
	default:
	}
	first, second := d.hot, d.cold
	if d.tick.Add(1)%3 == 0 {
		first, second = d.cold, d.hot
	}
	select {
	case ev := <-first:
		return ev, true
	default:
	}
	select {
	case ev := <-second:
		return ev, true
	default:
	}
	select {
	case ev := <-d.hot:
		return ev, true
	case ev := <-d.cold:
		return ev, true
	case <-d.hardStop:
		return core.Event{}, false
	case <-d.closeReq:
		// Draining: intake has stopped, so once both queues are empty they
		// stay empty and the worker can exit.
		select {
		case ev := <-d.hot:
			return ev, true
		case ev := <-d.cold:
			return ev, true
		default:
			return core.Event{}, false
		}
	}
}

// outcome classifies a delivery.
type outcome int

const (
	delivered  outcome = iota // the listener returned nil
	failed                    // the listener or a Before interceptor failed
	unroutable                // no listener for the event
)

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
	d.untrack(ev.ID())
}

// untrack forgets id: the dispatcher accepts it again.
//
// An outcome that makes the row claimable again (RETRY, a lease release)
// untracks the event before it is written: the moment it is, this
// dispatcher's own poller may claim the row, and must find the id untracked,
// or EnqueueCold would take the event for one still held here and it would
// stay leased, undelivered, until its lease expired. Until then the row is
// leased by this dispatcher, so no poller claims it. Terminal outcomes
// (DONE, DEAD) untrack after the write: a poller that re-claims the event
// meanwhile (its lease expired during a slow delivery) then sees it held.
func (d *Dispatcher) untrack(id string) {
	d.mu.Lock()
	delete(d.tracked, id)
	d.mu.Unlock()
}

// deliver runs the interceptors and the listener. After hooks run, in reverse
// order, for every interceptor whose Before hook succeeded.
func (d *Dispatcher) deliver(ctx context.Context, ev core.Event) (outcome, error) {
	if d.cfg.ListenerTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.cfg.ListenerTimeout)
		defer cancel()
	}
	var (
		res = failed
		err error
		ran int
	)
	for _, ic := range d.cfg.Interceptors {
		next, berr := callBefore(ctx, ic, ev)
		if berr != nil {
			err = fmt.Errorf("interceptor before: %w", berr)
			break
		}
		if next != nil {
			ctx = next
		}
		ran++
	}
	if err == nil {
		if l, ok := d.cfg.Registry.Lookup(ev.AggregateType(), ev.Type()); ok {
			err = callListener(ctx, l, ev)
			if err == nil {
				res = delivered
			}
		} else {
			res = unroutable
			err = fmt.Errorf("%w: aggregate type %q, event type %q", core.ErrUnroutable, ev.AggregateType(), ev.Type())
		}
	}
	for i := ran - 1; i >= 0; i-- {
		if aerr := callAfter(ctx, d.cfg.Interceptors[i], ev, err); aerr != nil {
			d.eventLog(d.log.Warn(), ev).Err(aerr).Int("interceptor", i).Msg("outbox interceptor After failed")
		}
	}
	return res, err
}

func callListener(ctx context.Context, l core.Listener, ev core.Event) (err error) {
	defer delivery.Recover(&err)
	return l.Handle(ctx, ev)
}

func callBefore(ctx context.Context, ic core.Interceptor, ev core.Event) (next context.Context, err error) {
	defer delivery.Recover(&err)
	return ic.Before(ctx, ev)
}

func callAfter(ctx context.Context, ic core.Interceptor, ev core.Event, outcome error) (err error) {
	defer delivery.Recover(&err)
	return ic.After(ctx, ev, outcome)
}

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
		d.untrack(id)
		if _, serr := st.Release(wctx, d.cfg.DB, owner, []string{id}); serr != nil {
			d.cfg.Metrics.StoreError()
			d.eventLog(d.log.Warn(), ev).Err(serr).Msg("outbox lease release failed; trying again before shutdown ends")
			d.releaseLater(owner, []string{id})
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
		d.untrack(id)
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
