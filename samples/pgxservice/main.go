// Command pgxservice is a service built on pgxpool alone: its orders and
// their OrderPlaced events commit together in a pgx transaction, and the
// events reach their listener through the hot path right after COMMIT. The
// outbox's background side (write-backs, the poller for leftovers) runs on
// the same pool through pgx's database/sql adapter; the service itself never
// touches database/sql.
//
//	go run ./samples/pgxservice -dsn postgres://postgres@127.0.0.1:5432/test
//
// It is a module of its own, as a new service would be.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/pgxtx"
	"github.com/outboxkit/outbox/store/postgres"
)

func main() {
	dsn := flag.String("dsn", cmpOr(os.Getenv("OUTBOX_POSTGRES_DSN"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL")
	orders := flag.Int("orders", 3, "orders to place")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := run(ctx, config{dsn: *dsn, orders: *orders, outboxTable: "pgxservice_outbox", ordersTable: "pgxservice_orders"}, os.Stdout)
	if err != nil {
		log.Fatal(err)
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

type config struct {
	dsn                      string
	orders                   int
	outboxTable, ordersTable string
	metrics                  core.Metrics // nil: none
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	pool, err := pgxpool.New(ctx, cfg.dsn)
	if err != nil {
		return err
	}
	defer pool.Close()

	// The outbox: its store, its table, and the pool it runs on.
	store, err := postgres.New(postgres.Config{Table: cfg.outboxTable})
	if err != nil {
		return err
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	if err := store.CreateSchema(ctx, db); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+cfg.ordersTable+" (id TEXT PRIMARY KEY, total_cents BIGINT NOT NULL)"); err != nil {
		return err
	}

	delivered := make(chan core.Event)
	reg := core.NewRegistry()
	err = reg.RegisterFunc(core.AggregateName("Order"), core.EventName("OrderPlaced"), func(ctx context.Context, ev core.Event) error {
		select {
		case delivered <- ev:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	if err != nil {
		return err
	}
	ob, err := outbox.New(outbox.Config{DB: db, Store: store, Registry: reg, Metrics: cfg.metrics})
	if err != nil {
		return err
	}
	if err := ob.Start(ctx); err != nil {
		return err
	}
	defer ob.Close(context.WithoutCancel(ctx))

	// The business transactions: pgx's, carried in the context.
	txm, err := pgxtx.New(pool, pgxtx.Config{})
	if err != nil {
		return err
	}
	for i := 1; i <= cfg.orders; i++ {
		id := fmt.Sprintf("o-%d", i)
		err := txm.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
			return placeOrder(ctx, tx, ob.Writer(), cfg.ordersTable, id, int64(i)*1250)
		})
		if err != nil {
			return err
		}
		select {
		case ev := <-delivered:
			fmt.Fprintf(out, "delivered %s %s %s\n", ev.Type(), ev.AggregateID(), ev.Payload())
		case <-ctx.Done():
			return fmt.Errorf("order %s not delivered: %w", id, ctx.Err())
		}
	}
	return nil
}

// placeOrder is business code: it writes the order with pgx and its event
// with the outbox writer, which finds the transaction in ctx.
func placeOrder(ctx context.Context, tx pgx.Tx, w *core.Writer, table, id string, totalCents int64) error {
	if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (id, total_cents) VALUES ($1, $2)", id, totalCents); err != nil {
		return fmt.Errorf("place order %s: %w", id, err)
	}
	env, err := core.NewEnvelope(core.EnvelopeSpec{
		Type:          core.EventName("OrderPlaced"),
		AggregateType: core.AggregateName("Order"),
		AggregateID:   id,
		JSON:          fmt.Appendf(nil, `{"total_cents":%d}`, totalCents),
	})
	if err != nil {
		return err
	}
	_, err = w.Write(ctx, env)
	return err
}
