package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/store/sqlite"
	"github.com/outboxkit/outbox/txctx"
)

// openExample opens a SQLite database with an outbox table and an orders
// table in a temporary directory; cleanup removes it.
func openExample() (*sql.DB, *sqlite.Store, func()) {
	dir, err := os.MkdirTemp("", "outbox-example")
	if err != nil {
		log.Fatal(err)
	}
	db, err := sqlite.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		log.Fatal(err)
	}
	store, err := sqlite.New(sqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := store.CreateSchema(ctx, db); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY)`); err != nil {
		log.Fatal(err)
	}
	return db, store, func() { _ = db.Close(); _ = os.RemoveAll(dir) }
}

// The whole outbox in one call: an order and its event commit together, and
// the listener gets the event right after COMMIT.
func Example() {
	ctx := context.Background()
	db, store, cleanup := openExample()
	defer cleanup()

	delivered := make(chan string, 1)
	reg := core.NewRegistry()
	err := reg.RegisterFunc(core.AggregateName("Order"), core.EventName("OrderPlaced"),
		func(ctx context.Context, ev core.Event) error {
			delivered <- ev.AggregateID() + " " + string(ev.Payload())
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

	err = ob.Do(ctx, func(ctx context.Context) error {
		tx, _ := txctx.From(ctx)
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (?)`, "o-1"); err != nil {
			return err
		}
		env, err := core.NewEnvelope(core.EnvelopeSpec{
			Type:          core.EventName("OrderPlaced"),
			AggregateType: core.AggregateName("Order"),
			AggregateID:   "o-1",
			JSON:          []byte(`{"total_cents":1250}`),
		})
		if err != nil {
			return err
		}
		_, err = ob.Writer().Write(ctx, env)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("delivered:", <-delivered)
	// Output: delivered: o-1 {"total_cents":1250}
}

// A business error rolls back the order and its event together: nothing is
// delivered.
func ExampleOutbox_Do() {
	ctx := context.Background()
	db, store, cleanup := openExample()
	defer cleanup()
	ob, err := outbox.New(outbox.Config{DB: db, Store: store, Registry: core.NewRegistry()})
	if err != nil {
		log.Fatal(err)
	}
	defer ob.Close(ctx)

	errDeclined := errors.New("card declined")
	err = ob.Do(ctx, func(ctx context.Context) error {
		tx, _ := txctx.From(ctx)
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (?)`, "o-2"); err != nil {
			return err
		}
		env, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("OrderPlaced"), JSON: []byte(`{}`)})
		if err != nil {
			return err
		}
		if _, err := ob.Writer().Write(ctx, env); err != nil {
			return err
		}
		return errDeclined
	})
	fmt.Println("Do:", err)

	var orders, events int
	_ = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM orders`).Scan(&orders)
	_ = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM outbox_event`).Scan(&events)
	fmt.Println("orders:", orders, "events:", events)
	// Output:
	// Do: card declined
	// orders: 0 events: 0
}

// A WriterOnly outbox writes events for another process (or CDC) to
// deliver: no dispatcher, no poller, and the rows are left unleased.
func ExampleConfig_writerOnly() {
	ctx := context.Background()
	db, store, cleanup := openExample()
	defer cleanup()
	ob, err := outbox.New(outbox.Config{DB: db, Store: store, Mode: outbox.WriterOnly})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ob.Mode(), "dispatcher:", ob.Dispatcher() != nil, "poller:", ob.Poller() != nil)

	var id string
	err = ob.Do(ctx, func(ctx context.Context) error {
		env, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("OrderPlaced"), JSON: []byte(`{}`)})
		if err != nil {
			return err
		}
		id, err = ob.Writer().Write(ctx, env)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	ev, err := store.Get(ctx, db, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("status: %s, leased by: %q\n", ev.Status, ev.LockedBy)
	// Output:
	// WriterOnly dispatcher: false poller: false
	// status: NEW, leased by: ""
}
