package rabbitmq

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/outboxkit/outbox/broker"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/inbox"
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
	// Logger receives handler failures and deliveries without an event id.
	// Default: the zero (silent) logger.
	Logger zerolog.Logger
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
// exchange on the queue keeps it). Consume returns nil when ctx is done,
// an error wrapping ErrDeliveriesClosed when the channel closes first, or
// the error that kept it from starting.
func Consume(ctx context.Context, cfg ConsumeConfig) error {
	if err := cfg.validate(); err != nil {
		return err
	}
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
			handle(ctx, cfg, d)
		}
	}
}

func handle(ctx context.Context, cfg ConsumeConfig, d amqp.Delivery) {
	id := EventID(d)
	if id == "" {
		cfg.Logger.Error().Str("routing_key", d.RoutingKey).Msg("rabbitmq: delivery without an event id rejected")
		_ = d.Reject(false)
		return
	}
	_, err := cfg.Inbox.Process(ctx, id, func(ctx context.Context, tx *sql.Tx) error {
		return cfg.Handler(ctx, tx, d)
	})
	if err != nil {
		cfg.Logger.Warn().Err(err).Str("event_id", id).Msg("rabbitmq: handler failed; delivery requeued")
		_ = d.Reject(true)
		return
	}
	// A lost acknowledgement redelivers the message; the inbox skips it.
	_ = d.Ack(false)
}
