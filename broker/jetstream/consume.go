package jetstream

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/broker"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/outboxlog"
)

// DefaultNakDelay is how long JetStream waits before redelivering a message
// whose handler failed.
const DefaultNakDelay = time.Second

// ConsumeConfig configures Consume.
type ConsumeConfig struct {
	// Consumer is the JetStream consumer to read; it must use explicit
	// acknowledgements (the default of a pull consumer). Required.
	Consumer jetstream.Consumer
	// Inbox records the event ids that took effect. Required.
	Inbox *inbox.Inbox
	// Handler applies one message inside the inbox's transaction; its
	// changes commit with the record of the event id. Required.
	Handler func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error
	// NakDelay is how long JetStream waits before redelivering a message
	// whose Handler failed. Default 1s.
	NakDelay time.Duration
	// Logger receives handler failures and messages without an event id. Nil:
	// outboxlog.Default(), which sends warnings and errors to slog.Default().
	// slog.New(slog.DiscardHandler) silences it; a zerolog.Logger zl is wired in
	// with slog.New(zerolog.NewSlogHandler(zl)).
	Logger *slog.Logger
}

func (c ConsumeConfig) validate() error {
	switch {
	case c.Consumer == nil:
		return core.Invalid("jetstream consume config", "Consumer is required")
	case c.Inbox == nil:
		return core.Invalid("jetstream consume config", "Inbox is required")
	case c.Handler == nil:
		return core.Invalid("jetstream consume config", "Handler is required")
	case c.NakDelay < 0:
		return core.Invalid("jetstream consume config", "NakDelay %s is negative", c.NakDelay)
	}
	return nil
}

// EventID returns the event id of msg: its Nats-Msg-Id, or its
// Outbox-Event-Id header, or "".
func EventID(msg jetstream.Msg) string {
	h := msg.Headers()
	return cmp.Or(h.Get(jetstream.MsgIDHeader), h.Get(broker.HeaderEventID))
}

// Consume reads cfg.Consumer until ctx is done and applies each message
// once per event id through cfg.Inbox: the handler runs in a transaction
// that also records the id, and the message is acknowledged after the
// commit. A message whose id took effect before is acknowledged without
// running the handler; one whose handler fails is redelivered after
// NakDelay; one without an event id can never be deduplicated and is
// terminated (logged). Repeated lines of one kind within a second are
// summed into one (outboxlog.Sum), with the event id and error of the
// first. A crash between the commit and the acknowledgement
// redelivers the message, which the inbox absorbs. Consume returns nil when
// ctx is done, or the error that stopped it.
func Consume(ctx context.Context, cfg ConsumeConfig) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	cfg.NakDelay = cmp.Or(cfg.NakDelay, DefaultNakDelay)
	logs := newConsumeLogs(cfg.Logger)
	defer logs.flush()
	it, err := cfg.Consumer.Messages()
	if err != nil {
		return fmt.Errorf("jetstream: consume: %w", err)
	}
	// The iterator's Next does not take a context: a goroutine stops it
	// when ctx is done, and Consume waits for that goroutine.
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		select {
		case <-ctx.Done():
		case <-done:
		}
		it.Stop()
	})
	defer wg.Wait()
	defer close(done)
	for {
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return fmt.Errorf("jetstream: consume: %w", err)
		}
		handle(ctx, cfg, logs, msg)
	}
}

// consumeLogs sums the lines of Consume that a bad stream repeats for
// every message: one line of each kind a second.
type consumeLogs struct{ noID, failed *outboxlog.Sum }

func newConsumeLogs(l *slog.Logger) consumeLogs {
	return consumeLogs{
		noID: outboxlog.NewSum(l, slog.LevelError, "jetstream: message without an event id terminated", "messages",
			outboxlog.SumOptions{}),
		failed: outboxlog.NewSum(l, slog.LevelWarn, "jetstream: handler failed; redelivery requested", "messages",
			outboxlog.SumOptions{}),
	}
}

func (l consumeLogs) flush() {
	l.noID.Flush()
	l.failed.Flush()
}

func handle(ctx context.Context, cfg ConsumeConfig, logs consumeLogs, msg jetstream.Msg) {
	id := EventID(msg)
	if id == "" {
		logs.noID.Add(ctx, 1, slog.String("subject", msg.Subject()))
		_ = msg.Term()
		return
	}
	_, err := cfg.Inbox.Process(ctx, id, func(ctx context.Context, tx *sql.Tx) error {
		return cfg.Handler(ctx, tx, msg)
	})
	if err != nil {
		// A run cut short by Consume's own stop is not a failure to report:
		// the message goes back for the next consumer all the same.
		if ctx.Err() == nil {
			logs.failed.Add(ctx, 1, slog.String("event_id", id), outboxlog.Err(err))
		}
		_ = msg.NakWithDelay(cfg.NakDelay)
		return
	}
	// A lost acknowledgement redelivers the message; the inbox skips it.
	_ = msg.Ack()
}
