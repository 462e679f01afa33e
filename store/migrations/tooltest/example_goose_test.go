package tooltest_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/pressly/goose/v3"

	"github.com/outboxkit/outbox/store/migrations"
	"github.com/outboxkit/outbox/store/sqlite"
)

// goose applies the outbox's migrations, rendered for the store's table,
// as a set of their own with their own version table, beside the
// application's migrations.
func Example_goose() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "outbox-goose")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "app.db")) // or postgres.Open, mysql.Open
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	store, err := sqlite.New(sqlite.Config{Table: "orders_outbox"})
	if err != nil {
		log.Fatal(err)
	}
	fsys, err := migrations.Goose(store) // 0001_create_table.sql, ... for orders_outbox
	if err != nil {
		log.Fatal(err)
	}
	provider, err := goose.NewProvider(goose.DialectSQLite3, db, fsys,
		goose.WithTableName("orders_outbox_goose_version"))
	if err != nil {
		log.Fatal(err)
	}
	results, err := provider.Up(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range results {
		fmt.Println("applied", r.Source.Path)
	}
	version, err := provider.GetDBVersion(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("version", version)
	// Output:
	// applied 0001_create_table.sql
	// applied 0002_ordering.sql
	// applied 0003_position.sql
	// version 3
}
