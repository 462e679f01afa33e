// Package kafka publishes outbox events to Kafka with franz-go.
//
// A Publisher is a core.Listener: register it for chosen (aggregate type,
// event type) pairs, or as the registry's fallback for every pair without a
// listener of its own. Each event becomes one record on the topic of
// Config.Topic (default outbox.<aggregate type>.<event type>), keyed by the
// aggregate id, so that every event of one aggregate goes to one partition
// and stays in order there; the event id travels in the Outbox-Event-Id
// header (package broker), the key a consumer deduplicates on.
//
// Handle returns only after the record was acknowledged by every in-sync
// replica (acks=all, the franz-go default, which New checks). The client
// buffers and batches records across calls, so that many deliveries share
// each produce request. The publisher is also a core.BatchListener: a
// dispatcher worker hands it the events queued for it together (up to 256),
// which it produces at once before waiting for their acknowledgements; its
// InFlight (core.AsyncListener) sizes a dispatcher whose Workers is left
// zero.
//
// The tests run against franz-go's in-process kfake cluster: no Kafka
// server can be installed on the project's machines.
package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/broker"
	"github.com/outboxkit/outbox/core"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultTopicPrefix = "outbox"
	DefaultAckTimeout  = 30 * time.Second
)

// Config configures a Publisher.
type Config struct {
	// Client is the franz-go client records are produced with. Required.
	// It must require acknowledgements from all in-sync replicas
	// (kgo.RequiredAcks(kgo.AllISRAcks()), the default); New refuses one
	// that does not. The publisher does not close it.
	Client *kgo.Client
	// Topic returns the topic of an event's record. Default:
	// broker.Name(TopicPrefix, ev), that is
	// prefix.<aggregate type>.<event type> with each type made one token
	// (broker.Token). An empty topic makes the event DEAD.
	Topic func(ev core.Event) string
	// TopicPrefix is the first part of the default topic. Default
	// "outbox". Ignored when Topic is set.
	TopicPrefix string
	// AckTimeout bounds the wait for a record's acknowledgement. The client
	// retries a produce for as long as it may, and an idempotent producer
	// never gives up a record already sent, so without this bound a
	// delivery would wait through a whole outage; after it the event is
	// retried by the dispatcher (a duplicate record is then possible, which
	// the consumer's inbox absorbs). Default 30s.
	AckTimeout time.Duration
}

func (c Config) validate() error {
	if c.Client == nil {
		return core.Invalid("kafka config", "Client is required")
	}
	if acks, ok := c.Client.OptValue(kgo.RequiredAcks).(kgo.Acks); !ok || acks != kgo.AllISRAcks() {
		return core.Invalid("kafka config", "Client must require acks from all in-sync replicas (kgo.RequiredAcks(kgo.AllISRAcks()))")
	}
	if c.AckTimeout < 0 {
		return core.Invalid("kafka config", "AckTimeout %s is negative", c.AckTimeout)
	}
	if c.Topic == nil && c.TopicPrefix != "" && broker.Token(c.TopicPrefix) != c.TopicPrefix {
		return core.Invalid("kafka config", "TopicPrefix %q is not one token (letters, digits, '-', '_')", c.TopicPrefix)
	}
	return nil
}

func (c Config) withDefaults() (Config, error) {
	if err := c.validate(); err != nil {
		return c, err
	}
	c.AckTimeout = cmp.Or(c.AckTimeout, DefaultAckTimeout)
	if c.TopicPrefix == "" {
		c.TopicPrefix = DefaultTopicPrefix
	}
	if c.Topic == nil {
		prefix := c.TopicPrefix
		c.Topic = func(ev core.Event) string { return broker.Name(prefix, ev) }
	}
	return c, nil
}

// Publisher produces events to Kafka. It is safe for concurrent use.
type Publisher struct {
	cfg Config
}

var _ core.AsyncListener = (*Publisher)(nil)

// InFlight implements core.AsyncListener: broker.DefaultInFlight, so that a
// dispatcher left at its default Workers runs that many publishes at once.
func (p *Publisher) InFlight() int { return broker.DefaultInFlight }

// New returns a publisher on cfg.Client. It returns an error matching
// core.ErrInvalid for a bad Config.
func New(cfg Config) (*Publisher, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Publisher{cfg: cfg}, nil
}

// Record returns the record Handle produces for ev: its topic, the
// aggregate id as key (none when the event has no aggregate id), the
// payload as value, the occurred-at time as timestamp, and the Outbox-*
// headers with the event's own.
func (p *Publisher) Record(ev core.Event) *kgo.Record {
	h := broker.Headers(ev)
	r := &kgo.Record{
		Topic:     p.cfg.Topic(ev),
		Value:     ev.RawPayload(), // not copied: franz-go only reads it
		Timestamp: ev.OccurredAt(),
		Headers:   make([]kgo.RecordHeader, 0, len(h)),
	}
	if id := ev.AggregateID(); id != "" {
		r.Key = []byte(id)
	}
	for k, v := range h {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return r
}

// Handle produces ev and waits for the acknowledgement of all in-sync
// replicas. It returns nil once the record is acknowledged, a
// core.Permanent error for a record Kafka can never take (too large, an
// invalid or empty topic), and an error for the dispatcher to retry
// otherwise (brokers unreachable, a timeout, a cancelled delivery).
func (p *Publisher) Handle(ctx context.Context, ev core.Event) error {
	r := p.Record(ev)
	if r.Topic == "" {
		return core.Permanent(errors.New("kafka: empty topic"))
	}
	ctx, cancel := context.WithTimeoutCause(ctx, p.cfg.AckTimeout,
		fmt.Errorf("no acknowledgement within %s", p.cfg.AckTimeout))
	defer cancel()
	done := make(chan error, 1)
	p.cfg.Client.Produce(ctx, r, func(_ *kgo.Record, err error) { done <- err })
	select {
	case err := <-done:
		if err == nil {
			return nil
		}
		return classify(r.Topic, err)
	case <-ctx.Done():
		// The client fails the record on this context unless it is
		// already in flight; the callback then goes to the buffered
		// channel nobody reads.
		return fmt.Errorf("kafka: produce to %s: %w", r.Topic, context.Cause(ctx))
	}
}

// maxBatch caps the events of one HandleBatch call.
const maxBatch = 256

var _ core.BatchListener = (*Publisher)(nil)

// MaxBatch implements core.BatchListener: 256 events.
func (p *Publisher) MaxBatch() int { return maxBatch }

// HandleBatch produces evs and waits for their acknowledgements, all within
// one AckTimeout: errs[i] is what Handle would have returned for evs[i]. It
// implements core.BatchListener, so that a dispatcher hands the publisher
// the events queued for it together, in one worker. With ctx already done
// it produces nothing.
func (p *Publisher) HandleBatch(ctx context.Context, evs []core.Event) []error {
	errs := make([]error, len(evs))
	if ctx.Err() != nil {
		for i := range errs {
			errs[i] = fmt.Errorf("kafka: not produced: %w", context.Cause(ctx))
		}
		return errs
	}
	ctx, cancel := context.WithTimeoutCause(ctx, p.cfg.AckTimeout,
		fmt.Errorf("no acknowledgement within %s", p.cfg.AckTimeout))
	defer cancel()
	type result struct {
		i   int
		err error
	}
	// Buffered for every record: a callback that comes after a timeout
	// below does not block the client.
	done := make(chan result, len(evs))
	topics := make([]string, len(evs))
	waiting := make([]bool, len(evs))
	n := 0
	for i, ev := range evs {
		r := p.Record(ev)
		topics[i] = r.Topic
		if r.Topic == "" {
			errs[i] = core.Permanent(errors.New("kafka: empty topic"))
			continue
		}
		waiting[i] = true
		n++
		p.cfg.Client.Produce(ctx, r, func(_ *kgo.Record, err error) { done <- result{i, err} })
	}
	for ; n > 0; n-- {
		select {
		case r := <-done:
			waiting[r.i] = false
			if r.err != nil {
				errs[r.i] = classify(topics[r.i], r.err)
			}
		case <-ctx.Done():
			for i, w := range waiting {
				if w {
					errs[i] = fmt.Errorf("kafka: produce to %s: %w", topics[i], context.Cause(ctx))
				}
			}
			return errs
		}
	}
	return errs
}

func classify(topic string, err error) error {
	err = fmt.Errorf("kafka: produce to %s: %w", topic, err)
	for _, perm := range []error{kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidTopicException, kerr.InvalidRecord, kerr.CorruptMessage} {
		if errors.Is(err, perm) {
			return core.Permanent(err)
		}
	}
	return err
}
