// Package jetstream publishes outbox events to NATS JetStream and consumes
// them into an inbox.
//
// A Publisher is a core.Listener: register it for chosen (aggregate type,
// event type) pairs, or as the registry's fallback for every pair without a
// listener of its own. Each event becomes one message on the subject of
// Config.Subject (default outbox.<aggregate type>.<event type>), with the
// event id as its Nats-Msg-Id, so that JetStream drops a message it already
// stored within the stream's duplicate window, and the Outbox-* headers of
// package broker. Handle returns only after JetStream's PubAck: the event is
// DONE only once the stream stored it.
//
// Handle publishes asynchronously and waits for its own acknowledgement, so
// many deliveries share the connection at once: the number of publishes in
// flight is the dispatcher's number of workers. Raise dispatch.Config.Workers
// (64 to 256) for a backlog to drain at the broker's pace rather than at one
// round trip per worker.
//
// The subject of an event depends on its aggregate type and event type only
// by default; a Subject function that includes the aggregate id gives each
// key a subject of its own, so that the events of one key stay in order in
// the stream when they are delivered in order.
package jetstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/broker"
	"github.com/outboxkit/outbox/core"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultSubjectPrefix = "outbox"
	DefaultAckTimeout    = 10 * time.Second
	DefaultMaxPending    = 4096
)

// Config configures a Publisher.
type Config struct {
	// Conn is the NATS connection to publish on. Required. The publisher
	// does not close it; nats.go reconnects it after an outage.
	Conn *nats.Conn
	// Subject returns the subject of an event's message. Default:
	// broker.Name(SubjectPrefix, ev), that is
	// prefix.<aggregate type>.<event type> with each type made one subject
	// token (broker.Token). An empty subject makes the event DEAD.
	Subject func(ev core.Event) string
	// SubjectPrefix is the first token of the default subject. Default
	// "outbox". Ignored when Subject is set.
	SubjectPrefix string
	// Stream, when set, is the stream every message must be stored in
	// (Nats-Expected-Stream): a message captured by another stream is
	// refused, and the event retried. Default: any stream.
	Stream string
	// AckTimeout bounds the wait for a PubAck; a publish not acknowledged
	// by then fails and the event is retried. Default 10s.
	AckTimeout time.Duration
	// MaxPending caps the publishes awaiting their PubAck on this
	// publisher; a publish beyond it waits for room, up to AckTimeout,
	// and then fails to be retried. nats.go counts the waiting publishes
	// as pending too and lets them go only when fewer than MaxPending
	// remain, so keep it above the dispatcher's Workers (and above 1).
	// Default 4096.
	MaxPending int
}

func (c Config) validate() error {
	if c.Conn == nil {
		return core.Invalid("jetstream config", "Conn is required")
	}
	if c.AckTimeout < 0 {
		return core.Invalid("jetstream config", "AckTimeout %s is negative", c.AckTimeout)
	}
	if c.MaxPending < 0 {
		return core.Invalid("jetstream config", "MaxPending %d is negative", c.MaxPending)
	}
	if c.Subject == nil && c.SubjectPrefix != "" && broker.Token(c.SubjectPrefix) != c.SubjectPrefix {
		return core.Invalid("jetstream config", "SubjectPrefix %q is not one subject token (letters, digits, '-', '_')", c.SubjectPrefix)
	}
	return nil
}

func (c Config) withDefaults() (Config, error) {
	if err := c.validate(); err != nil {
		return c, err
	}
	c.SubjectPrefix = cmp.Or(c.SubjectPrefix, DefaultSubjectPrefix)
	c.AckTimeout = cmp.Or(c.AckTimeout, DefaultAckTimeout)
	c.MaxPending = cmp.Or(c.MaxPending, DefaultMaxPending)
	if c.Subject == nil {
		prefix := c.SubjectPrefix
		c.Subject = func(ev core.Event) string { return broker.Name(prefix, ev) }
	}
	return c, nil
}

// Publisher publishes events to JetStream. It is safe for concurrent use.
type Publisher struct {
	cfg Config
	js  jetstream.JetStream
}

var _ core.Listener = (*Publisher)(nil)

// New returns a publisher on cfg.Conn. It returns an error matching
// core.ErrInvalid for a bad Config.
func New(cfg Config) (*Publisher, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(cfg.Conn,
		jetstream.WithPublishAsyncMaxPending(cfg.MaxPending),
		// Without a timeout, an abandoned publish (its delivery cancelled)
		// would hold its slot until the connection closed.
		jetstream.WithPublishAsyncTimeout(cfg.AckTimeout),
	)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return &Publisher{cfg: cfg, js: js}, nil
}

// Message returns the message Handle publishes for ev: its subject, payload,
// the Outbox-* headers and the event's own, and Nats-Msg-Id set to the
// event id.
func (p *Publisher) Message(ev core.Event) *nats.Msg {
	m := nats.NewMsg(p.cfg.Subject(ev))
	m.Data = ev.RawPayload() // not copied: nats.go only reads it
	for k, v := range broker.Headers(ev) {
		m.Header[k] = []string{v}
	}
	m.Header[jetstream.MsgIDHeader] = []string{ev.ID()}
	if p.cfg.Stream != "" {
		m.Header[jetstream.ExpectedStreamHeader] = []string{p.cfg.Stream}
	}
	return m
}

// Handle publishes ev and waits for JetStream's acknowledgement. It returns
// nil once the stream stored the message (or had stored it already: a
// duplicate within the stream's window is acknowledged too), an error for
// the dispatcher to retry when the server is unreachable, no stream takes
// the subject or the acknowledgement does not come within AckTimeout, and a
// core.Permanent error for a message NATS can never accept (an invalid
// subject, a payload over the server's limit).
func (p *Publisher) Handle(ctx context.Context, ev core.Event) error {
	m := p.Message(ev)
	if m.Subject == "" {
		return core.Permanent(errors.New("jetstream: empty subject"))
	}
	// With MaxPending publishes awaiting their ack, wait for room for as
	// long as for an ack (the client's default gives up after 200ms).
	f, err := p.js.PublishMsgAsync(m, jetstream.WithStallWait(p.cfg.AckTimeout))
	if err != nil {
		return classify(m.Subject, err)
	}
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return classify(m.Subject, err)
	case <-ctx.Done():
		return fmt.Errorf("jetstream: publish to %s: waiting for ack: %w", m.Subject, context.Cause(ctx))
	}
}

// errCodeMessageTooLarge is the server's JSStreamMessageExceedsMaximumErr:
// the message is larger than the stream's max_msg_size.
const errCodeMessageTooLarge jetstream.ErrorCode = 10054

// classify wraps a publish error, as permanent when no retry can succeed.
func classify(subject string, err error) error {
	err = fmt.Errorf("jetstream: publish to %s: %w", subject, err)
	if errors.Is(err, nats.ErrBadSubject) || errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrHeadersNotSupported) {
		return core.Permanent(err)
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeMessageTooLarge {
		return core.Permanent(err)
	}
	return err
}
