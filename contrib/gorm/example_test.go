package outboxgorm_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/outboxkit/outbox"
	outboxgorm "github.com/outboxkit/outbox/contrib/gorm"
	"github.com/outboxkit/outbox/core"
	outboxsqlite "github.com/outboxkit/outbox/store/sqlite"
)

// Order is the business model.
type Order struct {
	ID         string `gorm:"primaryKey;size:64"`
	TotalCents int
}

// An order and its event commit together in a GORM transaction, and the
// listener gets the event right after COMMIT, through the hot path.
func ExampleManager_Do() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "outboxgorm-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// One pool for GORM and the outbox. On PostgreSQL or MySQL:
	// postgres.Open(dsn) / mysql.Open(dsn) from the outbox's stores, then
	// gorm.Open(postgres.New(postgres.Config{Conn: db})) with GORM's driver.
	db, err := outboxsqlite.Open(filepath.Join(dir, "shop.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	gdb, err := gorm.Open(&sqlite.Dialector{DriverName: "sqlite", Conn: db},
		&gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		log.Fatal(err)
	}
	if err := gdb.AutoMigrate(&Order{}); err != nil {
		log.Fatal(err)
	}
	store, err := outboxsqlite.New(outboxsqlite.Config{})
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
			if err := gdb.WithContext(ctx).First(&o, "id = ?", ev.AggregateID()).Error; err != nil {
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

	txm, err := outboxgorm.New(gdb, outboxgorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	err = txm.Do(ctx, func(ctx context.Context, tx *gorm.DB) error {
		if err := tx.Create(&Order{ID: "o-1", TotalCents: 1250}).Error; err != nil {
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
