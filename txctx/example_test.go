package txctx_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/jmoiron/sqlx"
	_ "modernc.org/sqlite"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/txctx"
)

// exampleDB opens a WAL-mode SQLite database with an orders table in a
// temporary directory; cleanup closes and removes it.
func exampleDB() (db *sql.DB, cleanup func()) {
	dir, err := os.MkdirTemp("", "txctx-example")
	if err != nil {
		panic(err)
	}
	dsn := "file:" + filepath.Join(dir, "shop.db") + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)"
	db, err = sql.Open("sqlite", dsn)
	if err != nil {
		panic(err)
	}
	if _, err := db.Exec("CREATE TABLE orders (id TEXT PRIMARY KEY, state TEXT NOT NULL)"); err != nil {
		panic(err)
	}
	return db, func() { _ = db.Close(); _ = os.RemoveAll(dir) }
}

// placeOrder is business code: it finds the transaction in ctx.
func placeOrder(ctx context.Context, id string) error {
	tx, ok := txctx.From(ctx)
	if !ok {
		return core.ErrNoTransaction
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id, state) VALUES (?, 'placed')", id); err != nil {
		return fmt.Errorf("place order %s: %w", id, err)
	}
	tx.AfterCommit(func(context.Context) { fmt.Println("after commit: order", id, "placed") })
	tx.AfterRollback(func(context.Context) { fmt.Println("after rollback: order", id, "discarded") })
	return nil
}

func ExampleManager_Do() {
	db, cleanup := exampleDB()
	defer cleanup()
	txm, err := txctx.New(db, txctx.Config{})
	if err != nil {
		panic(err)
	}

	err = txm.Do(context.Background(), func(ctx context.Context) error {
		if err := placeOrder(ctx, "o-1"); err != nil {
			return err
		}
		fmt.Println("fn done, not committed yet")
		return nil
	})
	fmt.Println("Do:", err)
	// Output:
	// fn done, not committed yet
	// after commit: order o-1 placed
	// Do: <nil>
}

func ExampleManager_Do_rollback() {
	db, cleanup := exampleDB()
	defer cleanup()
	txm, err := txctx.New(db, txctx.Config{})
	if err != nil {
		panic(err)
	}
	errOutOfStock := errors.New("out of stock")

	err = txm.Do(context.Background(), func(ctx context.Context) error {
		if err := placeOrder(ctx, "o-2"); err != nil {
			return err
		}
		return errOutOfStock
	})
	fmt.Println("Do:", err, errors.Is(err, errOutOfStock))

	var n int
	_ = db.QueryRow("SELECT count(*) FROM orders").Scan(&n)
	fmt.Println("orders:", n)
	// Output:
	// after rollback: order o-2 discarded
	// Do: out of stock true
	// orders: 0
}

// A Do inside a Do joins the outer transaction; callbacks wait for its end.
func ExampleManager_Do_join() {
	db, cleanup := exampleDB()
	defer cleanup()
	txm, err := txctx.New(db, txctx.Config{})
	if err != nil {
		panic(err)
	}

	err = txm.Do(context.Background(), func(ctx context.Context) error {
		for _, id := range []string{"o-3", "o-4"} {
			// Each inner Do runs in the outer transaction: no BEGIN, no COMMIT.
			if err := txm.Do(ctx, func(ctx context.Context) error { return placeOrder(ctx, id) }); err != nil {
				return err
			}
		}
		fmt.Println("outer fn done")
		return nil
	})
	fmt.Println("Do:", err)
	// Output:
	// outer fn done
	// after commit: order o-3 placed
	// after commit: order o-4 placed
	// Do: <nil>
}

func ExampleTx_Sqlx() {
	db, cleanup := exampleDB()
	defer cleanup()
	txm, err := txctx.New(sqlx.NewDb(db, "sqlite"), txctx.Config{})
	if err != nil {
		panic(err)
	}

	err = txm.Do(context.Background(), func(ctx context.Context) error {
		if err := placeOrder(ctx, "o-5"); err != nil {
			return err
		}
		tx, _ := txctx.From(ctx)
		var order struct {
			ID    string `db:"id"`
			State string `db:"state"`
		}
		if err := tx.Sqlx().GetContext(ctx, &order, "SELECT id, state FROM orders WHERE id = ?", "o-5"); err != nil {
			return err
		}
		fmt.Println("read in transaction:", order.ID, order.State)
		return nil
	})
	fmt.Println("Do:", err)
	// Output:
	// read in transaction: o-5 placed
	// after commit: order o-5 placed
	// Do: <nil>
}
