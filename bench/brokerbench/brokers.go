package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	outboxjs "github.com/outboxkit/outbox/broker/jetstream"
	"github.com/outboxkit/outbox/broker/rabbitmq"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
)

// jsTarget is a file-storage stream with one replica taking prefix.>.
type jsTarget struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	stream string
	pub    *outboxjs.Publisher
}

func openJetStream(ctx context.Context, url string) (*jsTarget, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(*flagWindow))
	if err != nil {
		nc.Close()
		return nil, err
	}
	t := &jsTarget{nc: nc, js: js, stream: testdb.UniqueName("bench")}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: t.stream, Subjects: []string{t.stream + ".>"},
		Storage: jetstream.FileStorage, Replicas: 1, Duplicates: 2 * time.Minute}); err != nil {
		nc.Close()
		return nil, err
	}
	t.pub, err = outboxjs.New(outboxjs.Config{Conn: nc, SubjectPrefix: t.stream})
	if err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

func (t *jsTarget) Name() string            { return "NATS JetStream 2.9 (file, R1)" }
func (t *jsTarget) Listener() core.Listener { return t.pub }

func (t *jsTarget) ServerPID() int { return serverPID(*flagNATSPID, "nats-server") }

// Raw publishes evs asynchronously from one goroutine, at most window
// awaiting their PubAck (the client's async max pending), each with its
// event id as Nats-Msg-Id as the publisher sets it, and waits for every
// ack.
func (t *jsTarget) Raw(ctx context.Context, evs []core.Event, _ int, bare bool) error {
	subject := t.stream + ".Order.OrderPlaced"
	futures := make([]jetstream.PubAckFuture, 0, len(evs))
	for _, ev := range evs {
		var m *nats.Msg
		if bare {
			m = nats.NewMsg(subject)
			m.Data = ev.Payload()
			m.Header.Set(jetstream.MsgIDHeader, ev.ID())
		} else {
			m = t.pub.Message(ev)
		}
		// A full window waits for room (the client's default gives up
		// after 200ms, which a loaded machine exceeds).
		f, err := t.js.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute))
		if err != nil {
			return err
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (t *jsTarget) Count(ctx context.Context) (int, error) {
	s, err := t.js.Stream(ctx, t.stream)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return int(info.State.Msgs), nil
}

func (t *jsTarget) Reset(ctx context.Context) error {
	s, err := t.js.Stream(ctx, t.stream)
	if err != nil {
		return err
	}
	return s.Purge(ctx)
}

func (t *jsTarget) Close() {
	_ = t.js.DeleteStream(context.Background(), t.stream)
	t.nc.Close()
}

// rmqTarget is a durable queue bound with "#" to a topic exchange;
// messages are persistent and confirmed.
type rmqTarget struct {
	conn            *amqp.Connection
	ch              *amqp.Channel
	exchange, queue string
	pub             *rabbitmq.Publisher
}

func openRabbitMQ(_ context.Context, url string) (*rmqTarget, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	t := &rmqTarget{conn: conn, ch: ch, exchange: testdb.UniqueName("bench_x"), queue: testdb.UniqueName("bench_q")}
	if err := ch.ExchangeDeclare(t.exchange, "topic", true, false, false, false, nil); err != nil {
		t.Close()
		return nil, err
	}
	if _, err := ch.QueueDeclare(t.queue, true, false, false, false, nil); err != nil {
		t.Close()
		return nil, err
	}
	if err := ch.QueueBind(t.queue, "#", t.exchange, false, nil); err != nil {
		t.Close()
		return nil, err
	}
	t.pub, err = rabbitmq.New(rabbitmq.Config{URL: url, Exchange: t.exchange})
	if err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

func (t *rmqTarget) Name() string            { return "RabbitMQ 3 (durable queue, persistent, confirms)" }
func (t *rmqTarget) Listener() core.Listener { return t.pub }

func (t *rmqTarget) ServerPID() int { return serverPID(*flagAMQPPID, "beam.smp") }

// Raw publishes evs from one goroutine on one confirm-mode channel with
// mandatory set, at most window awaiting their confirm, and waits for every
// confirm.
func (t *rmqTarget) Raw(ctx context.Context, evs []core.Event, window int, bare bool) error {
	ch, err := t.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	pending := make([]*amqp.DeferredConfirmation, 0, window)
	wait := func(dcs []*amqp.DeferredConfirmation) error {
		for _, dc := range dcs {
			ok, err := dc.WaitContext(ctx)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("nacked")
			}
		}
		return nil
	}
	for _, ev := range evs {
		msg, key := t.pub.Message(ev)
		if bare {
			msg = amqp.Publishing{DeliveryMode: amqp.Persistent, MessageId: ev.ID(), Body: ev.Payload()}
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, t.exchange, key, true, false, msg)
		if err != nil {
			return err
		}
		pending = append(pending, dc)
		if len(pending) == window {
			// Wait for the older half, keep the window full.
			if err := wait(pending[:window/2]); err != nil {
				return err
			}
			pending = append(pending[:0], pending[window/2:]...)
		}
	}
	return wait(pending)
}

func (t *rmqTarget) Count(context.Context) (int, error) {
	q, err := t.ch.QueueDeclarePassive(t.queue, true, false, false, false, nil)
	return q.Messages, err
}

func (t *rmqTarget) Reset(context.Context) error {
	_, err := t.ch.QueuePurge(t.queue, false)
	return err
}

func (t *rmqTarget) Close() {
	if t.pub != nil {
		_ = t.pub.Close()
	}
	_, _ = t.ch.QueueDelete(t.queue, false, false, false)
	_ = t.ch.ExchangeDelete(t.exchange, false, false)
	_ = t.conn.Close()
}

// serverPID returns flag when set, -1 as none, and otherwise the only
// process named comm on this machine (0 when there is none or several).
func serverPID(flag int, comm string) int {
	switch {
	case flag > 0:
		return flag
	case flag < 0:
		return 0
	}
	return findProcess(comm)
}
