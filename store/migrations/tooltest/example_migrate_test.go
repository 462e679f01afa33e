package tooltest_test

import (
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/golang-migrate/migrate/v4"
	migratesqlite "github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/outboxkit/outbox/store/migrations"
	"github.com/outboxkit/outbox/store/sqlite"
)

// golang-migrate applies the outbox's migrations, rendered for the store's
// table, as a set of their own with their own version table, beside the
// application's migrations.
func Example_golangMigrate() {
	dir, err := os.MkdirTemp("", "outbox-migrate")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "app.db")) // or postgres.Open, mysql.Open
	if err != nil {
		log.Fatal(err)
	}

	store, err := sqlite.New(sqlite.Config{Table: "orders_outbox"})
	if err != nil {
		log.Fatal(err)
	}
	fsys, err := migrations.GolangMigrate(store) // 0001_create_table.up.sql, .down.sql, ...
	if err != nil {
		log.Fatal(err)
	}
	src, err := iofs.New(fsys, ".")
	if err != nil {
		log.Fatal(err)
	}
	// PostgreSQL: database/pgx/v5; MySQL: database/mysql. Closing m closes db.
	driver, err := migratesqlite.WithInstance(db, &migratesqlite.Config{MigrationsTable: "orders_outbox_schema_migrations"})
	if err != nil {
		log.Fatal(err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "sqlite", driver)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		log.Fatal(err)
	}
	version, dirty, err := m.Version()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("version", version, "dirty", dirty)
	// Output:
	// version 3 dirty false
}
