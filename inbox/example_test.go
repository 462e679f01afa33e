package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/store/sqlite"
)

// A message delivered twice (a broker redelivery) takes effect once.
func Example() {
	dir, err := os.MkdirTemp("", "inbox-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "consumer.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE balance (cents INTEGER)`); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO balance VALUES (0)`); err != nil {
		log.Fatal(err)
	}

	ib, err := inbox.New(inbox.Config{DB: db, Consumer: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	if err := ib.CreateSchema(ctx); err != nil {
		log.Fatal(err)
	}
	credit := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE balance SET cents = cents + 1250`)
		return err
	}
	for range 2 { // the same event id, delivered twice
		applied, err := ib.Process(ctx, "01JEVENT00000000000000000A", credit)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("applied:", applied)
	}
	var cents int
	if err := db.QueryRowContext(ctx, `SELECT cents FROM balance`).Scan(&cents); err != nil {
		log.Fatal(err)
	}
	fmt.Println("balance:", cents)
	// Output:
	// applied: true
	// applied: false
	// balance: 1250
}
