package rabbitmq

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/broker"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/outboxlog"
)

// ConsumeConfig configures Consume.
type ConsumeConfig struct {
	// Channel is the channel to consume on. Required. Set its prefetch
	// (Channel.Qos) beforehand to bound the unacknowledged deliveries.
	Channel *amqp.Channel
	// Queue is the queue to consume. Required.
	Queue string
	// ConsumerTag names the subscription. Default: one the broker makes up.
	ConsumerTag string
	// Inbox records the event ids that took effect. Required.
	Inbox *inbox.Inbox
	// Handler applies one delivery inside the inbox's transaction; its
	// changes commit with the record of the event id. Required.
	Handler func(ctx context.Context, tx *sql.Tx, d amqp.Delivery) error
	// Logger receives handler failures and deliveries without an event id. Nil:
	// outboxlog.Default(), which sends warnings and errors to slog.Default().
	// slog.New(slog.DiscardHandler) silences it; a zerolog.Logger zl is wired in
	// with slog.New(zerolog.NewSlogHandler(zl)).
	Logger *slog.Logger
}

func (c ConsumeConfig) validate() error {
	switch {
	case c.Channel == nil:
		return core.Invalid("rabbitmq consume config", "Channel is required")
	case c.Queue == "":
		return core.Invalid("rabbitmq consume config", "Queue is required")
	case c.Inbox == nil:
		return core.Invalid("rabbitmq consume config", "Inbox is required")
	case c.Handler == nil:
		return core.Invalid("rabbitmq consume config", "Handler is required")
	}
	return nil
}

// EventID returns the event id of d: its message-id, or its Outbox-Event-Id
// header, or "".
func EventID(d amqp.Delivery) string {
	h, _ := d.Headers[broker.HeaderEventID].(string)
	return cmp.Or(d.MessageId, h)
}

// ErrDeliveriesClosed is returned by Consume when the broker closed the
// channel or cancelled the subscription before ctx was done.
var ErrDeliveriesClosed = errors.New("rabbitmq: deliveries closed")

// Consume reads cfg.Queue until ctx is done and applies each delivery once
// per event id through cfg.Inbox: the handler runs in a transaction that
// also records the id, and the delivery is acknowledged after the commit.
// A delivery whose id took effect before is acknowledged without running
// the handler; one whose handler fails is rejected with requeue, so the
// broker delivers it again; one without an event id can never be
// deduplicated and is rejected without requeue (logged; a dead-letter
// exchange on the queue keeps it). Repeated lines of one kind within a
// second are summed into one (outboxlog.Sum), with the event id and error
// of the first. Consume returns nil when ctx is done,
// an error wrapping ErrDeliveriesClosed when the channel closes first, or
// the error that kept it from starting.
func Consume(ctx context.Context, cfg ConsumeConfig) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	logs := newConsumeLogs(cfg.Logger)
	defer logs.flush()
	deliveries, err := cfg.Channel.ConsumeWithContext(ctx, cfg.Queue, cfg.ConsumerTag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("rabbitmq: consume %s: %w", cfg.Queue, err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-deliveries:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("consume %s: %w", cfg.Queue, ErrDeliveriesClosed)
			}
			handle(ctx, cfg, logs, d)
		}
	}
}

// consumeLogs sums the lines of Consume that a bad queue repeats for
// every delivery: one line of each kind a second.
type consumeLogs struct{ noID, failed *outboxlog.Sum }

func newConsumeLogs(l *slog.Logger) consumeLogs {
	return consumeLogs{
		noID: outboxlog.NewSum(l, slog.LevelError, "rabbitmq: delivery without an event id rejected", "deliveries",
			outboxlog.SumOptions{}),
		failed: outboxlog.NewSum(l, slog.LevelWarn, "rabbitmq: handler failed; delivery requeued", "deliveries",
			outboxlog.SumOptions{}),
	}
}

func (l consumeLogs) flush() {
	l.noID.Flush()
	l.failed.Flush()
}

func handle(ctx context.Context, cfg ConsumeConfig, logs consumeLogs, d amqp.Delivery) {
	id := EventID(d)
	if id == "" {
		logs.noID.Add(ctx, 1, slog.String("routing_key", d.RoutingKey))
		_ = d.Reject(false)
		return
	}
	_, err := cfg.Inbox.Process(ctx, id, func(ctx context.Context, tx *sql.Tx) error {
		return cfg.Handler(ctx, tx, d)
	})
	if err != nil {
		// A run cut short by Consume's own stop is not a failure to report:
		// the message goes back for the next consumer all the same.
		if ctx.Err() == nil {
			logs.failed.Add(ctx, 1, slog.String("event_id", id), outboxlog.Err(err))
		}
		_ = d.Reject(true)
		return
	}
	// A lost acknowledgement redelivers the message; the inbox skips it.
	_ = d.Ack(false)
}
