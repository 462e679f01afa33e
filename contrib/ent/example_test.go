package outboxent_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/outboxkit/outbox"
	outboxent "github.com/outboxkit/outbox/contrib/ent"
	"github.com/outboxkit/outbox/contrib/ent/internal/ent"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/store/sqlite"
)

// An order and its event commit together in an ent transaction, and the
// listener gets the event right after COMMIT, through the hot path. The
// package ent here is the client ent generated for an Order schema.
func ExampleDo() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "outboxent-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// One pool for ent and the outbox. On PostgreSQL or MySQL:
	// postgres.Open or mysql.Open from the outbox's stores, and
	// dialect.Postgres or dialect.MySQL.
	db, err := sqlite.Open(filepath.Join(dir, "shop.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	drv, err := outboxent.NewDriver(entsql.OpenDB(dialect.SQLite, db), outboxent.Config{})
	if err != nil {
		log.Fatal(err)
	}
	client := ent.NewClient(ent.Driver(drv))
	if err := client.Schema.Create(ctx); err != nil {
		log.Fatal(err)
	}
	store, err := sqlite.New(sqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.CreateSchema(ctx, db); err != nil {
		log.Fatal(err)
	}

	delivered := make(chan string, 1)
	reg := core.NewRegistry()
	err = reg.RegisterFunc(core.AggregateName("Order"), core.EventName("OrderPlaced"),
		func(ctx context.Context, ev core.Event) error {
			o, err := client.Order.Get(ctx, ev.AggregateID()) // committed: visible
			if err != nil {
				return err
			}
			delivered <- "delivered " + o.ID
			return nil
		})
	if err != nil {
		log.Fatal(err)
	}
	ob, err := outbox.New(outbox.Config{DB: db, Store: store, Registry: reg})
	if err != nil {
		log.Fatal(err)
	}
	if err := ob.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer ob.Close(ctx)

	err = outboxent.Do(ctx, client.Tx, func(ctx context.Context, tx *ent.Tx) error {
		if err := tx.Order.Create().SetID("o-1").Exec(ctx); err != nil {
			return err
		}
		env, err := core.NewEnvelope(core.EnvelopeSpec{
			Type: core.EventName("OrderPlaced"), AggregateType: core.AggregateName("Order"),
			AggregateID: "o-1", JSON: []byte(`{"total_cents":1250}`),
		})
		if err != nil {
			return err
		}
		_, err = ob.Writer().Write(ctx, env) // in tx's transaction, found in ctx
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-delivered)
	// Output: delivered o-1
}
