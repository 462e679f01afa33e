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
// many deliveries share the connection at once. The publisher is also a
// core.BatchListener: a dispatcher worker hands it the events queued for it
// together (up to 256), which it publishes back to back before waiting for
// their acknowledgements, so that a backlog drains at the broker's pace
// with few workers parked. Its InFlight (core.AsyncListener) sizes a
// dispatcher whose Workers is left zero.
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
	"runtime"
	"sync"
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
	cfg  Config
	js   jetstream.JetStream
	opts []jetstream.PublishOpt

	// Concurrent Handle calls publish in turns (see publish): one caller,
	// the sender, publishes the messages of all those queued meanwhile.
	mu      sync.Mutex
	queue   []*pubReq // waiting for the sender
	spare   []*pubReq // the sender's last batch, reused as the next queue
	sending bool      // a caller is the sender
}

// pubReq is one message handed to the sender, and what its publish returned.
type pubReq struct {
	m     *nats.Msg
	f     jetstream.PubAckFuture
	err   error
	ready chan struct{} // closed once f or err is set
}

var _ core.AsyncListener = (*Publisher)(nil)

// InFlight implements core.AsyncListener: broker.DefaultInFlight, or one
// less than Config.MaxPending when that is smaller, so that a dispatcher
// left at its default Workers runs that many publishes at once.
func (p *Publisher) InFlight() int { return max(1, min(broker.DefaultInFlight, p.cfg.MaxPending-1)) }

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
	// With MaxPending publishes awaiting their ack, a publish waits for room
	// for as long as for an ack (the client's default gives up after 200ms).
	opts := []jetstream.PublishOpt{jetstream.WithStallWait(cfg.AckTimeout)}
	return &Publisher{cfg: cfg, js: js, opts: opts}, nil
}

// Message returns the message Handle publishes for ev: its subject, payload,
// the Outbox-* headers and the event's own, and Nats-Msg-Id set to the
// event id.
func (p *Publisher) Message(ev core.Event) *nats.Msg {
	own := ev.RawHeaders() // read only; copied into the message's header
	n := len(own) + 8
	h := make(nats.Header, n)
	// One backing array for every value: a message costs two allocations
	// for its headers, not one per header.
	vals := make([]string, 0, n)
	set := func(k, v string) {
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	for k, v := range own {
		set(k, v)
	}
	// The Outbox-* headers win over an event header of the same name, as in
	// broker.Headers, which this must match.
	set(broker.HeaderEventID, ev.ID())
	set(broker.HeaderEventType, ev.Type())
	set(broker.HeaderAggregateType, ev.AggregateType())
	if id := ev.AggregateID(); id != "" {
		set(broker.HeaderAggregateID, id)
	}
	if id := ev.TenantID(); id != "" {
		set(broker.HeaderTenantID, id)
	}
	set(broker.HeaderOccurredAt, ev.OccurredAt().UTC().Format(time.RFC3339Nano))
	set(jetstream.MsgIDHeader, ev.ID())
	if p.cfg.Stream != "" {
		set(jetstream.ExpectedStreamHeader, p.cfg.Stream)
	}
	// Data is not copied: nats.go only reads it.
	return &nats.Msg{Subject: p.cfg.Subject(ev), Header: h, Data: ev.RawPayload()}
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
	f, err := p.publish(ctx, m)
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

// maxBatch caps the events of one HandleBatch call.
const maxBatch = 256

var _ core.BatchListener = (*Publisher)(nil)

// MaxBatch implements core.BatchListener: 256 events, or fewer when
// MaxPending is smaller.
func (p *Publisher) MaxBatch() int { return max(1, min(maxBatch, p.cfg.MaxPending-1)) }

// HandleBatch publishes evs back to back and waits for their
// acknowledgements: errs[i] is what Handle would have returned for evs[i].
// It implements core.BatchListener, so that a dispatcher hands the
// publisher the events queued for it together, in one worker. With ctx
// already done it publishes nothing.
func (p *Publisher) HandleBatch(ctx context.Context, evs []core.Event) []error {
	errs := make([]error, len(evs))
	if ctx.Err() != nil {
		for i := range errs {
			errs[i] = fmt.Errorf("jetstream: not published: %w", context.Cause(ctx))
		}
		return errs
	}
	futs := make([]jetstream.PubAckFuture, len(evs))
	subjects := make([]string, len(evs))
	for i, ev := range evs {
		m := p.Message(ev)
		subjects[i] = m.Subject
		if m.Subject == "" {
			errs[i] = core.Permanent(errors.New("jetstream: empty subject"))
			continue
		}
		f, err := p.publishOne(m)
		if err != nil {
			errs[i] = classify(m.Subject, err)
			continue
		}
		futs[i] = f
	}
	for i, f := range futs {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = classify(subjects[i], err)
		case <-ctx.Done():
			errs[i] = fmt.Errorf("jetstream: publish to %s: waiting for ack: %w", subjects[i], context.Cause(ctx))
		}
	}
	return errs
}

// publish publishes m asynchronously and returns its ack future.
//
// Concurrent calls take turns: the first becomes the sender and, after
// yielding its processor once, publishes its message and those of every call
// that queued one meanwhile, back to back; the others wait until it has
// published theirs. nats.go writes what is buffered when its flusher
// goroutine runs, and a caller that publishes and at once waits for its ack
// lets the flusher run right away, so that without turns a drain, whose
// workers publish one after the other as their acks come in, makes one
// socket write per message, and nats-server one read and one ack write per
// message: measured, twice the server's CPU per message of a loop publishing
// the same messages back to back (docs/benchmarks.md#outbox-to-broker). The yield lets the
// workers already runnable queue their messages first. Messages are
// published in the order their calls queued them.
func (p *Publisher) publish(ctx context.Context, m *nats.Msg) (jetstream.PubAckFuture, error) {
	p.mu.Lock()
	if p.sending {
		r := &pubReq{m: m, ready: make(chan struct{})}
		p.queue = append(p.queue, r)
		p.mu.Unlock()
		select {
		case <-r.ready:
			return r.f, r.err
		case <-ctx.Done():
			// The sender still publishes it: the event is retried, and
			// the stream drops the copy by its Nats-Msg-Id.
			return nil, fmt.Errorf("waiting to publish: %w", context.Cause(ctx))
		}
	}
	p.sending = true
	p.mu.Unlock()
	runtime.Gosched()
	f, err := p.publishOne(m)
	for {
		p.mu.Lock()
		batch := p.queue
		if len(batch) == 0 {
			p.sending = false
			p.mu.Unlock()
			return f, err
		}
		p.queue, p.spare = p.spare[:0], nil
		p.mu.Unlock()
		for i, r := range batch {
			r.f, r.err = p.publishOne(r.m)
			close(r.ready)
			batch[i] = nil
		}
		p.mu.Lock()
		if p.spare == nil {
			p.spare = batch[:0]
		}
		p.mu.Unlock()
	}
}

func (p *Publisher) publishOne(m *nats.Msg) (jetstream.PubAckFuture, error) {
	return p.js.PublishMsgAsync(m, p.opts...)
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
