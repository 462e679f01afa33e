// Command natsinbox shows both ends of an outbox behind a broker: an order
// service writes OrderPlaced events in its transactions and publishes them
// to NATS JetStream; a billing service consumes them into its own database
// through an inbox, so that each order is billed once however often the
// message arrives. Both use SQLite in a temporary directory.
//
//	go run ./samples/natsinbox -nats nats://127.0.0.1:4222
//
// It is a module of its own so that the root module needs no NATS client.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/broker/jetstream"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/store/sqlite"
	"github.com/outboxkit/outbox/txctx"
)

func main() {
	url := flag.String("nats", cmpOr(os.Getenv("OUTBOX_NATS_URL"), nats.DefaultURL), "NATS server URL (JetStream enabled)")
	orders := flag.Int("orders", 5, "orders to place")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, *url, *orders, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func run(ctx context.Context, url string, orders int, out *os.File) error {
	dir, err := os.MkdirTemp("", "natsinbox")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	nc, err := nats.Connect(url)
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return err
	}
	// A stream of this run's own takes the publisher's subjects.
	stream := fmt.Sprintf("natsinbox_%d", time.Now().UnixNano())
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: stream, Subjects: []string{stream + ".>"}}); err != nil {
		return err
	}
	defer js.DeleteStream(context.WithoutCancel(ctx), stream)

	// Order service: the order row and its event commit together.
	orderDB, err := sqlite.Open(filepath.Join(dir, "orders.db"))
	if err != nil {
		return err
	}
	defer orderDB.Close()
	st, err := sqlite.New(sqlite.Config{})
	if err != nil {
		return err
	}
	if err := st.CreateSchema(ctx, orderDB); err != nil {
		return err
	}
	if _, err := orderDB.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, cents INTEGER)`); err != nil {
		return err
	}
	pub, err := jetstream.New(jetstream.Config{Conn: nc, SubjectPrefix: stream})
	if err != nil {
		return err
	}
	reg := core.NewRegistry()
	if err := reg.RegisterFallback(pub); err != nil { // every event goes to JetStream
		return err
	}
	ob, err := outbox.New(outbox.Config{DB: orderDB, Store: st, Registry: reg, Dispatch: dispatch.Config{Workers: 64}})
	if err != nil {
		return err
	}
	if err := ob.Start(ctx); err != nil {
		return err
	}
	defer ob.Close(context.WithoutCancel(ctx))
	for i := range orders {
		id := fmt.Sprintf("o-%d", i+1)
		err := ob.Do(ctx, func(ctx context.Context) error {
			tx, _ := txctx.From(ctx)
			if _, err := tx.ExecContext(ctx, `INSERT INTO orders VALUES (?, ?)`, id, 1000*(i+1)); err != nil {
				return err
			}
			env, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("OrderPlaced"),
				AggregateType: core.AggregateName("Order"), AggregateID: id,
				JSON: fmt.Appendf(nil, `{"cents":%d}`, 1000*(i+1))})
			if err != nil {
				return err
			}
			_, err = ob.Writer().Write(ctx, env)
			return err
		})
		if err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "order service: %d orders placed, events published to stream %s\n", orders, stream)

	// Billing service: its own database, an inbox, and the consume loop.
	billDB, err := sqlite.Open(filepath.Join(dir, "billing.db"))
	if err != nil {
		return err
	}
	defer billDB.Close()
	if _, err := billDB.ExecContext(ctx, `CREATE TABLE invoices (order_id TEXT, payload TEXT)`); err != nil {
		return err
	}
	ib, err := inbox.New(inbox.Config{DB: billDB, Consumer: "billing"})
	if err != nil {
		return err
	}
	if err := ib.CreateSchema(ctx); err != nil {
		return err
	}
	cons, err := js.CreateConsumer(ctx, stream, natsjs.ConsumerConfig{Durable: "billing", AckPolicy: natsjs.AckExplicitPolicy})
	if err != nil {
		return err
	}
	billed := make(chan string, orders)
	consumeCtx, stopConsume := context.WithCancel(ctx)
	consumeErr := make(chan error, 1)
	go func() {
		consumeErr <- jetstream.Consume(consumeCtx, jetstream.ConsumeConfig{Consumer: cons, Inbox: ib,
			Handler: func(ctx context.Context, tx *sql.Tx, msg natsjs.Msg) error {
				orderID := msg.Headers().Get("Outbox-Aggregate-Id")
				if _, err := tx.ExecContext(ctx, `INSERT INTO invoices VALUES (?, ?)`, orderID, string(msg.Data())); err != nil {
					return err
				}
				billed <- orderID
				return nil
			}})
	}()
	// The handler reports each order before its transaction commits; wait
	// for the commits too before stopping the consumer.
	var invoices int
	for invoices < orders {
		select {
		case <-billed:
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			stopConsume()
			return errors.Join(ctx.Err(), <-consumeErr)
		}
		if err := billDB.QueryRowContext(ctx, `SELECT COUNT(*) FROM invoices`).Scan(&invoices); err != nil {
			stopConsume()
			return errors.Join(err, <-consumeErr)
		}
	}
	stopConsume()
	if err := <-consumeErr; err != nil {
		return err
	}

	// A redelivery of the first order's message (as after a crash before
	// the acknowledgement) is absorbed by the inbox.
	first, err := js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	raw, err := first.GetMsg(ctx, 1)
	if err != nil {
		return err
	}
	applied, err := ib.Process(ctx, raw.Header.Get(natsjs.MsgIDHeader), func(context.Context, *sql.Tx) error {
		return errors.New("billed twice")
	})
	if err != nil {
		return err
	}
	if err := billDB.QueryRowContext(ctx, `SELECT COUNT(*) FROM invoices`).Scan(&invoices); err != nil {
		return err
	}
	fmt.Fprintf(out, "billing service: %d invoices; a redelivered message applied again: %v\n", invoices, applied)
	if invoices != orders || applied {
		return fmt.Errorf("%d invoices for %d orders (redelivery applied: %v)", invoices, orders, applied)
	}
	return nil
}
