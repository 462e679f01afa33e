package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/broker/jetstream"
)

// streamName is the JetStream stream of the outbox table's events: the
// table's name in upper case (a schema's dot made an underscore) and
// _EVENTS.
func streamName(table string) string {
	return strings.ToUpper(strings.ReplaceAll(table, ".", "_")) + "_EVENTS"
}

// natsPublisher connects to url, creates the stream of table's events if it
// is missing, and returns a publisher whose messages must be stored in it;
// closeNATS closes the connection.
func natsPublisher(ctx context.Context, url, table string) (pub *jetstream.Publisher, stream string, closeNATS func(), err error) {
	nc, err := nats.Connect(url, nats.Name("httpservice"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, "", nil, fmt.Errorf("connect to NATS: %w", err)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		nc.Close()
		return nil, "", nil, err
	}
	stream = streamName(table)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = js.CreateOrUpdateStream(sctx, natsjs.StreamConfig{Name: stream, Subjects: []string{stream + ".>"}})
	if err != nil {
		nc.Close()
		return nil, "", nil, fmt.Errorf("create stream %s: %w", stream, err)
	}
	pub, err = jetstream.New(jetstream.Config{Conn: nc, SubjectPrefix: stream, Stream: stream})
	if err != nil {
		nc.Close()
		return nil, "", nil, err
	}
	return pub, stream, nc.Close, nil
}
