// Package rabbitmq publishes outbox events to RabbitMQ with publisher
// confirms, and consumes them into an inbox.
//
// A Publisher is a core.Listener: register it for chosen (aggregate type,
// event type) pairs, or as the registry's fallback for every pair without a
// listener of its own. Each event becomes one persistent message on
// Config.Exchange with the routing key of Config.RoutingKey (default
// <aggregate type>.<event type>, for a topic exchange), the event id as its
// message-id (the key a consumer deduplicates on, see package inbox), the
// event type as its type, and the Outbox-* headers of package broker.
//
// Handle returns only after the broker confirmed the message (publisher
// confirms). Messages are published with the mandatory flag: one no queue
// takes comes back (basic.return) before its confirm, and Handle reports it
// as a core.Permanent error naming the exchange and routing key, so the
// event ends DEAD with that reason instead of DONE and lost. A broker that
// is down, or a nack, is an error the dispatcher retries with backoff; the
// publisher dials again on the next delivery.
//
// Handle publishes and waits for its own confirm, so that many deliveries
// are in flight at once on one channel: the number in flight is the
// dispatcher's number of workers. Raise dispatch.Config.Workers (64 to 256)
// for a backlog to drain at the broker's pace.
package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/broker"
	"github.com/outboxkit/outbox/core"
)

// DefaultDialTimeout bounds connecting to the broker.
const DefaultDialTimeout = 10 * time.Second

// Config configures a Publisher.
type Config struct {
	// URL is the broker's AMQP URL, e.g. amqp://guest:guest@127.0.0.1:5672/.
	// Required.
	URL string
	// Exchange is the exchange messages are published to. Default "": the
	// default exchange, where the routing key names the queue.
	Exchange string
	// RoutingKey returns the routing key of an event's message. Default:
	// broker.Name("", ev), that is <aggregate type>.<event type> with each
	// type made one token (broker.Token), for a topic exchange.
	RoutingKey func(ev core.Event) string
	// Transient publishes messages with the transient delivery mode.
	// Default false: persistent, so that a durable queue keeps them across
	// a broker restart.
	Transient bool
	// DialTimeout bounds connecting to the broker. Default 10s.
	DialTimeout time.Duration
}

func (c Config) validate() error {
	if c.URL == "" {
		return core.Invalid("rabbitmq config", "URL is required")
	}
	if _, err := amqp.ParseURI(c.URL); err != nil {
		return core.Invalid("rabbitmq config", "URL: %v", err)
	}
	if c.DialTimeout < 0 {
		return core.Invalid("rabbitmq config", "DialTimeout %s is negative", c.DialTimeout)
	}
	return nil
}

func (c Config) withDefaults() (Config, error) {
	if err := c.validate(); err != nil {
		return c, err
	}
	if c.RoutingKey == nil {
		c.RoutingKey = func(ev core.Event) string { return broker.Name("", ev) }
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	return c, nil
}

// Publisher publishes events to RabbitMQ on one connection and one channel
// in confirm mode, opened on first use and again after a failure. It is
// safe for concurrent use; Close closes the connection.
type Publisher struct {
	cfg Config

	mu     sync.Mutex
	sess   *session
	closed bool
}

var _ core.AsyncListener = (*Publisher)(nil)

// InFlight implements core.AsyncListener: broker.DefaultInFlight, so that a
// dispatcher left at its default Workers runs that many publishes at once.
func (p *Publisher) InFlight() int { return broker.DefaultInFlight }

// New returns a publisher; it connects on the first Handle. It returns an
// error matching core.ErrInvalid for a bad Config.
func New(cfg Config) (*Publisher, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Publisher{cfg: cfg}, nil
}

// Message returns the message Handle publishes for ev, and its routing key.
func (p *Publisher) Message(ev core.Event) (amqp.Publishing, string) {
	h := broker.Headers(ev)
	headers := make(amqp.Table, len(h))
	for k, v := range h {
		headers[k] = v
	}
	mode := amqp.Persistent
	if p.cfg.Transient {
		mode = amqp.Transient
	}
	return amqp.Publishing{
		Headers:      headers,
		ContentType:  "application/octet-stream",
		DeliveryMode: mode,
		MessageId:    ev.ID(),
		Timestamp:    ev.OccurredAt(),
		Type:         ev.Type(),
		Body:         ev.RawPayload(), // not copied: amqp091-go only reads it
	}, p.cfg.RoutingKey(ev)
}

// ErrNoRoute is wrapped (inside a core.Permanent error) by Handle when the
// broker returned the message because no queue is bound for its routing key
// (AMQP's NO_ROUTE). It is not core.ErrUnroutable, which means that no
// listener is registered for an event.
var ErrNoRoute = errors.New("rabbitmq: message returned unroutable")

// Handle publishes ev and waits for the broker's confirm. It returns nil once
// the broker confirmed the message, a core.Permanent error wrapping
// ErrNoRoute when the broker returned it (no queue takes its routing
// key), and an error for the dispatcher to retry when the broker is
// unreachable, the channel closes or the broker nacks the message.
func (p *Publisher) Handle(ctx context.Context, ev core.Event) error {
	msg, key := p.Message(ev)
	s, err := p.session(ctx)
	if err != nil {
		return err
	}
	s.expect(msg.MessageId)
	defer s.forget(msg.MessageId)
	dc, err := s.ch.PublishWithDeferredConfirmWithContext(ctx, p.cfg.Exchange, key, true, false, msg)
	if err != nil {
		p.drop(s)
		return fmt.Errorf("rabbitmq: publish to %q key %q: %w", p.cfg.Exchange, key, err)
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("rabbitmq: publish to %q key %q: waiting for confirm: %w", p.cfg.Exchange, key, context.Cause(ctx))
	}
	if !acked {
		if s.ch.IsClosed() {
			p.drop(s)
			return fmt.Errorf("rabbitmq: publish to %q key %q: channel closed before the confirm", p.cfg.Exchange, key)
		}
		return fmt.Errorf("rabbitmq: publish to %q key %q: broker nacked the message", p.cfg.Exchange, key)
	}
	ret, returned, err := s.returned(ctx, msg.MessageId)
	if err != nil {
		p.drop(s)
		return fmt.Errorf("rabbitmq: publish to %q key %q: %w", p.cfg.Exchange, key, err)
	}
	if returned {
		return core.Permanent(fmt.Errorf("%w: exchange %q routing key %q: %d %s",
			ErrNoRoute, ret.Exchange, ret.RoutingKey, ret.ReplyCode, ret.ReplyText))
	}
	return nil
}

// Close closes the publisher's connection; a later Handle fails with
// core.ErrClosed.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.sess == nil {
		return nil
	}
	s := p.sess
	p.sess = nil
	return s.close()
}

// session returns the open session, dialling a new one if there is none or
// the last one failed.
func (p *Publisher) session(ctx context.Context) (*session, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("rabbitmq: %w", core.ErrClosed)
	}
	if p.sess != nil && !p.sess.conn.IsClosed() && !p.sess.ch.IsClosed() {
		return p.sess, nil
	}
	if p.sess != nil {
		_ = p.sess.close()
		p.sess = nil
	}
	s, err := dial(ctx, p.cfg)
	if err != nil {
		return nil, err
	}
	p.sess = s
	return s, nil
}

// drop forgets s if it is still the current session, so that the next
// Handle dials again.
func (p *Publisher) drop(s *session) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sess == s {
		_ = s.close()
		p.sess = nil
	}
}

// session is one connection and its confirm-mode channel. Its loop records
// the messages the broker returns, for the publishes that expect them.
type session struct {
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return
	sync    chan chan struct{}
	stop    chan struct{}
	done    chan struct{}

	mu       sync.Mutex
	expected map[string]*amqp.Return // message id -> its return, nil until returned
}

func dial(ctx context.Context, cfg Config) (*session, error) {
	timeout := cfg.DialTimeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	conn, err := amqp.DialConfig(cfg.URL, amqp.Config{
		Dial: func(network, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: timeout}
			return d.DialContext(ctx, network, addr)
		},
		Properties: amqp.Table{"connection_name": "outbox publisher"},
	})
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: dial: %w", err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("rabbitmq: open confirm channel: %w", err)
	}
	s := &session{
		conn: conn, ch: ch,
		// Unbuffered on purpose: the client hands a return to the loop
		// before it resolves the confirm that follows it, so a publish that
		// saw its confirm and then synchronises with the loop sees its
		// return, if there was one.
		returns:  make(chan amqp.Return),
		sync:     make(chan chan struct{}),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		expected: make(map[string]*amqp.Return),
	}
	ch.NotifyReturn(s.returns)
	go s.loop()
	return s, nil
}

func (s *session) loop() {
	defer close(s.done)
	for {
		select {
		case r, ok := <-s.returns:
			if !ok {
				// The channel closed. Keep answering syncs until
				// close: a return can no longer arrive.
				s.drain()
				return
			}
			s.mu.Lock()
			if _, want := s.expected[r.MessageId]; want {
				s.expected[r.MessageId] = &r
			}
			s.mu.Unlock()
		case reply := <-s.sync:
			close(reply)
		case <-s.stop:
			return
		}
	}
}

func (s *session) drain() {
	for {
		select {
		case reply := <-s.sync:
			close(reply)
		case <-s.stop:
			return
		}
	}
}

func (s *session) expect(id string) {
	s.mu.Lock()
	s.expected[id] = nil
	s.mu.Unlock()
}

func (s *session) forget(id string) {
	s.mu.Lock()
	delete(s.expected, id)
	s.mu.Unlock()
}

// returned waits until the loop handled every return the client received
// so far, then reports whether id was returned.
func (s *session) returned(ctx context.Context, id string) (amqp.Return, bool, error) {
	reply := make(chan struct{})
	select {
	case s.sync <- reply:
	case <-s.done:
		return amqp.Return{}, false, errors.New("session closed before the return check")
	case <-ctx.Done():
		return amqp.Return{}, false, context.Cause(ctx)
	}
	<-reply
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.expected[id]; r != nil {
		return *r, true, nil
	}
	return amqp.Return{}, false, nil
}

func (s *session) close() error {
	// The connection first: closing it closes the returns channel, so the
	// client never waits on a loop that has stopped.
	err := s.conn.Close()
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	if errors.Is(err, amqp.ErrClosed) {
		return nil
	}
	return err
}
