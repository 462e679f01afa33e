package ormtx_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/ormtx"
	"github.com/outboxkit/outbox/store/sqlite"
)

// An integration for a library that begins its own transactions (here
// database/sql itself stands for the ORM): Do carries the transaction in the
// context as a core.Tx, which outbox.Write joins, and runs the after-commit
// callbacks once COMMIT has succeeded. A second Do on the same key joins the
// first transaction.
func Example() {
	dir, err := os.MkdirTemp("", "ormtx")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()

	begin := func(ctx context.Context) (ormtx.Begun, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return ormtx.Begun{}, err
		}
		return ormtx.Begun{End: tx, Exec: tx, ORM: tx, Key: db}, nil
	}
	ctx := context.Background()
	err = ormtx.Do(ctx, db, begin, func(ctx context.Context, t *ormtx.Tx) error {
		_, inCtx := core.TxFromContext(ctx)
		fmt.Println("transaction in the context:", inCtx)
		t.AfterCommit(func(context.Context) { fmt.Println("after commit") })
		if _, err := t.ExecContext(ctx, "CREATE TABLE items (id TEXT)"); err != nil {
			return err
		}
		return ormtx.Do(ctx, db, begin, func(ctx context.Context, inner *ormtx.Tx) error {
			fmt.Println("joined:", inner == t)
			_, err := inner.ORM().(*sql.Tx).ExecContext(ctx, "INSERT INTO items VALUES ('a')")
			return err
		})
	})
	fmt.Println("err:", err)
	// Output:
	// transaction in the context: true
	// joined: true
	// after commit
	// err: <nil>
}
