package outboxbun_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/sqlitedialect"

	"github.com/outboxkit/outbox"
	outboxbun "github.com/outboxkit/outbox/contrib/bun"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/store/sqlite"
)

// Order is the business model.
type Order struct {
	bun.BaseModel `bun:"table:orders"`
	ID            string `bun:"id,pk"`
	TotalCents    int    `bun:"total_cents,notnull"`
}

// An order and its event commit together in a Bun transaction, and the
// listener gets the event right after COMMIT, through the hot path.
func ExampleManager_Do() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "outboxbun-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// One pool for Bun and the outbox. On PostgreSQL or MySQL: postgres.Open
	// or mysql.Open from the outbox's stores, with pgdialect or mysqldialect.
	db, err := sqlite.Open(filepath.Join(dir, "shop.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	bdb := bun.NewDB(db, sqlitedialect.New())
	if _, err := bdb.NewCreateTable().Model((*Order)(nil)).Exec(ctx); err != nil {
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
			var o Order // committed before delivery: visible to everyone
			if err := bdb.NewSelect().Model(&o).Where("id = ?", ev.AggregateID()).Scan(ctx); err != nil {
				return err
			}
			delivered <- fmt.Sprintf("delivered %s (%d cents)", o.ID, o.TotalCents)
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

	txm, err := outboxbun.New(bdb, outboxbun.Config{})
	if err != nil {
		log.Fatal(err)
	}
	err = txm.Do(ctx, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(&Order{ID: "o-1", TotalCents: 1250}).Exec(ctx); err != nil {
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
	// Output: delivered o-1 (1250 cents)
}

// In a transaction of Bun's own, WriteTx takes the *sql.Tx under the
// bun.Tx; the bun.Tx itself is refused, since Bun would drop the outbox's
// SQL arguments. Bun runs nothing after COMMIT: the poller delivers.
func Example_runInTx() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "outboxbun-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "shop.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	bdb := bun.NewDB(db, sqlitedialect.New())
	store, err := sqlite.New(sqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.CreateSchema(ctx, db); err != nil {
		log.Fatal(err)
	}
	w, err := core.NewWriter(core.WriterConfig{Store: store})
	if err != nil {
		log.Fatal(err)
	}
	env, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("OrderPlaced"), JSON: []byte(`{}`)})
	if err != nil {
		log.Fatal(err)
	}

	err = bdb.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := w.WriteTx(ctx, tx, env); err != nil {
			fmt.Println("bun.Tx refused:", errors.Is(err, core.ErrInvalid))
		}
		_, err := w.WriteTx(ctx, tx.Tx, env) // the *sql.Tx
		return err
	})
	fmt.Println("tx.Tx:", err)
	// Output:
	// bun.Tx refused: true
	// tx.Tx: <nil>
}
