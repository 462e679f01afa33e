package outbox_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jmoiron/sqlx"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/txctx"
)

// Order is a row of the examples' orders table, mapped by sqlx.
type Order struct {
	ID string `db:"id"`
}

// With sqlx: the Outbox runs on a *sqlx.DB, so the transaction Do carries
// gives sqlx's API (Tx.Sqlx) on the same transaction the Writer writes in,
// and the event is delivered through the hot path right after COMMIT.
func ExampleOutbox_Do_sqlx() {
	ctx := context.Background()
	db, store, cleanup := openExample()
	defer cleanup()
	xdb := sqlx.NewDb(db, "sqlite") // the driver name tells sqlx the placeholders

	delivered := make(chan string, 1)
	reg := core.NewRegistry()
	err := reg.RegisterFunc(core.AggregateName("Order"), core.EventName("OrderPlaced"),
		func(ctx context.Context, ev core.Event) error {
			// Delivered after COMMIT: the order is visible to everyone.
			var o Order
			if err := xdb.GetContext(ctx, &o, xdb.Rebind(`SELECT id FROM orders WHERE id = ?`), ev.AggregateID()); err != nil {
				return err
			}
			delivered <- "delivered " + o.ID
			return nil
		})
	if err != nil {
		log.Fatal(err)
	}
	ob, err := outbox.New(outbox.Config{DB: xdb, Store: store, Registry: reg})
	if err != nil {
		log.Fatal(err)
	}
	if err := ob.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer ob.Close(ctx)

	err = ob.Do(ctx, func(ctx context.Context) error {
		tx, _ := txctx.From(ctx) // tx.Sqlx() is an *sqlx.Tx because DB is an *sqlx.DB
		if _, err := tx.Sqlx().NamedExecContext(ctx, `INSERT INTO orders (id) VALUES (:id)`, Order{ID: "o-1"}); err != nil {
			return err
		}
		env, err := core.NewEnvelope(core.EnvelopeSpec{
			Type: core.EventName("OrderPlaced"), AggregateType: core.AggregateName("Order"),
			AggregateID: "o-1", JSON: []byte(`{"total_cents":1250}`),
		})
		if err != nil {
			return err
		}
		_, err = ob.Writer().Write(ctx, env) // same transaction
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-delivered)

	// In a transaction of sqlx's own, pass the *sqlx.Tx to WriteTx; sqlx has
	// no hook after COMMIT, so the poller delivers that event.
	tx, err := xdb.BeginTxx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.NamedExecContext(ctx, `INSERT INTO orders (id) VALUES (:id)`, Order{ID: "o-2"}); err != nil {
		log.Fatal(err)
	}
	env, err := core.NewEnvelope(core.EnvelopeSpec{
		Type: core.EventName("OrderPlaced"), AggregateType: core.AggregateName("Order"),
		AggregateID: "o-2", JSON: []byte(`{"total_cents":990}`),
	})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := ob.Writer().WriteTx(ctx, tx, env); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	if _, err := ob.Poller().PollOnce(ctx); err != nil { // or wait for the poller's interval
		log.Fatal(err)
	}
	fmt.Println(<-delivered)
	// Output:
	// delivered o-1
	// delivered o-2
}
