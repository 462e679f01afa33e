package dispatch

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/delivery"
)

// work is one worker: it takes events until shutdown and processes each,
// several at once for a core.BatchListener.
func (d *Dispatcher) work(ctx context.Context) {
	var b batch
	for {
		it, hot, ok := d.next()
		if !ok {
			return
		}
		if bl := d.batchListenerOf(it.ev); bl != nil {
			d.processBatch(ctx, bl, it, hot, &b)
			continue
		}
		d.process(ctx, it.ev, it.e, hot)
	}
}

// batchListenerOf returns ev's listener if the dispatcher hands it batches
// (see batching), nil otherwise.
func (d *Dispatcher) batchListenerOf(ev core.Event) core.BatchListener {
	l, ok := d.cfg.Registry.Lookup(ev.AggregateType(), ev.Type())
	if !ok {
		return nil
	}
	return d.batching(l)
}

// batching returns l as a core.BatchListener if the dispatcher hands it
// batches: it takes more than one event at once, and the dispatcher runs
// no interceptors (they wrap one event each). Otherwise nil.
func (d *Dispatcher) batching(l core.Listener) core.BatchListener {
	if len(d.cfg.Interceptors) > 0 {
		return nil
	}
	bl, ok := l.(core.BatchListener)
	if !ok || bl.MaxBatch() < 2 {
		return nil
	}
	return bl
}

// batch is a worker's buffers for processBatch, reused from one batch to
// the next.
type batch struct {
	items  []item
	evs    []core.Event
	others []item // taken from the queue for another listener
}

// processBatch delivers first and the events queued behind it for the same
// listener (up to its MaxBatch, taken without waiting from first's queue)
// in one HandleBatch call, and records each outcome. Events taken for other
// listeners are processed one by one after it. The batch shares one
// listener context: a lease found lost cancels the whole call, and the
// events whose lease is still held are retried.
func (d *Dispatcher) processBatch(ctx context.Context, bl core.BatchListener, first item, hot bool, b *batch) {
	q := d.cold
	if hot {
		q = d.hot
	}
	b.items = append(b.items[:0], first)
	for limit := bl.MaxBatch(); len(b.items) < limit; {
		var it item
		select {
		case it = <-q:
		default:
		}
		if it.e == nil {
			break
		}
		if l, ok := d.cfg.Registry.Lookup(it.ev.AggregateType(), it.ev.Type()); ok && sameListener(l, bl) {
			b.items = append(b.items, it)
		} else {
			b.others = append(b.others, it)
		}
	}
	now := d.cfg.Now()
	d.cfg.Metrics.QueueDepths(len(d.hot), len(d.cold))
	lctx, cancel := d.listenerContext()
	if d.cfg.ListenerTimeout > 0 {
		var cancelT context.CancelFunc
		lctx, cancelT = context.WithTimeout(lctx, d.cfg.ListenerTimeout)
		defer cancelT()
	}
	defer cancel(nil)
	live := b.items[:0]
	b.evs = b.evs[:0]
	for _, it := range b.items {
		if d.begin(ctx, it.ev, it.e, hot, now, cancel) {
			live = append(live, it)
			b.evs = append(b.evs, it.ev)
		}
	}
	if len(live) > 0 {
		start := time.Now()
		errs := callBatch(lctx, bl, b.evs)
		if d.latency != nil {
			took := time.Since(start)
			for range live {
				d.latency.ListenerDuration(took)
			}
		}
		for i, it := range live {
			res := delivered
			if errs[i] != nil {
				res = failed
			}
			d.record(ctx, it.e, it.ev, res, errs[i])
		}
	}
	clear(b.items)
	clear(b.evs)
	for _, it := range b.others {
		d.process(ctx, it.ev, it.e, hot)
	}
	clear(b.others)
	b.others = b.others[:0]
}

// sameListener reports whether l is bl: the same value of the same type.
// Values of a type that cannot be compared are never the same, so that
// comparing them cannot panic.
func sameListener(l core.Listener, bl core.BatchListener) bool {
	t := reflect.TypeOf(l)
	return t == reflect.TypeOf(bl) && t.Comparable() && isSame(l, bl)
}

// isSame compares a and b, false where the comparison panics (a comparable
// struct holding an interface whose value is not).
func isSame(a core.Listener, b core.BatchListener) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == core.Listener(b)
}

// callBatch calls l.HandleBatch, and turns a panic, or a result of the wrong
// length, into an error for every event.
func callBatch(ctx context.Context, l core.BatchListener, evs []core.Event) (errs []error) {
	var err error
	func() {
		defer delivery.Recover(&err)
		errs = l.HandleBatch(ctx, evs)
	}()
	if err == nil && len(errs) != len(evs) {
		err = fmt.Errorf("outbox: %T.HandleBatch returned %d results for %d events", l, len(errs), len(evs))
	}
	if err != nil {
		errs = make([]error, len(evs))
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
}

// process delivers one event and records its outcome. The listener runs on a
// context of its own, which the lease renewal cancels (cause errLeaseLost)
// when it finds the event's lease lost.
func (d *Dispatcher) process(ctx context.Context, ev core.Event, e *entry, hot bool) {
	now := d.cfg.Now()
	d.cfg.Metrics.QueueDepths(len(d.hot), len(d.cold))
	lctx, cancel := d.listenerContext()
	defer cancel(nil)
	if !d.begin(ctx, ev, e, hot, now, cancel) {
		return
	}
	if d.latency == nil {
		res, err := d.deliver(lctx, ev)
		d.record(ctx, e, ev, res, err)
		return
	}
	start := time.Now()
	res, err := d.deliver(lctx, ev)
	d.latency.ListenerDuration(time.Since(start))
	d.record(ctx, e, ev, res, err)
}

// begin starts the delivery of ev, taken from a queue at now: it notes the
// event's lag and hands cancel to the tracker, and reports false, logged,
// when the event's lease was lost while it was queued (nothing to deliver).
func (d *Dispatcher) begin(ctx context.Context, ev core.Event, e *entry, hot bool, now time.Time, cancel context.CancelCauseFunc) bool {
	if !ev.CreatedAt.IsZero() {
		d.cfg.Metrics.OldestLag(now.Sub(ev.CreatedAt))
	}
	if !d.inflight.begin(e, cancel) {
		d.logEvent(ctx, slog.LevelWarn, ev, "outbox lease lost while the event was queued; not delivered")
		return false
	}
	if d.latency != nil {
		d.latency.DeliveryLatency(deliveryLatency(ev, hot, now))
	}
	return true
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
