package dispatch

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/delivery"
	"github.com/outboxkit/outbox/outboxlog"
)

// outcome classifies a delivery.
type outcome int

const (
	delivered  outcome = iota // the listener returned nil
	failed                    // the listener or a Before interceptor failed
	unroutable                // no listener for the event
)

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
			d.logEvent(ctx, slog.LevelWarn, ev, "outbox interceptor After failed",
				outboxlog.Err(aerr), slog.Int("interceptor", i))
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
