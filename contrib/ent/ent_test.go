package outboxent_test

import (
	"context"
	"errors"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	outboxent "github.com/outboxkit/outbox/contrib/ent"
	"github.com/outboxkit/outbox/contrib/ent/internal/ent"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/ormtest"
)

var dialects = map[string]string{"sqlite": dialect.SQLite, "postgres": dialect.Postgres, "mysql": dialect.MySQL}

// openEnt returns an ent client on an outboxent.Driver over db's pool, with
// the orders table.
func openEnt(t testing.TB, db ormtest.DB) *ent.Client {
	t.Helper()
	drv, err := outboxent.NewDriver(entsql.OpenDB(dialects[db.Dialect], db.SQL), outboxent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	client := ent.NewClient(ent.Driver(drv))
	if err := client.Schema.Create(context.Background()); err != nil {
		t.Fatal(err)
	}
	return client
}

func TestSuite(t *testing.T) {
	ormtest.Run(t, func(t *testing.T, db ormtest.DB) ormtest.Adapter {
		client := openEnt(t, db)
		return ormtest.Adapter{
			Do: func(ctx context.Context, body func(context.Context, func(string) error) error) error {
				return outboxent.Do(ctx, client.Tx, func(ctx context.Context, tx *ent.Tx) error {
					return body(ctx, func(id string) error { return tx.Order.Create().SetID(id).Exec(ctx) })
				})
			},
		}
	})
}

// ent's own commit hooks run around the COMMIT, and the outbox's delivery
// after it; From returns the generated transaction.
func TestCommitHooksAndFrom(t *testing.T) {
	db := ormtest.Open(t, "sqlite")
	client := openEnt(t, db)
	h := ormtest.NewHarness(t, db)
	ctx := context.Background()
	var hooked bool
	err := outboxent.Do(ctx, client.Tx, func(ctx context.Context, tx *ent.Tx) error {
		if got, ok := outboxent.From[*ent.Tx](ctx); !ok || got != tx {
			t.Error("From does not return the transaction")
		}
		tx.OnCommit(func(next ent.Committer) ent.Committer {
			return ent.CommitFunc(func(ctx context.Context, tx *ent.Tx) error {
				hooked = true
				return next.Commit(ctx, tx)
			})
		})
		if err := tx.Order.Create().SetID("o-1").Exec(ctx); err != nil {
			return err
		}
		_, err := h.Outbox.Writer().Write(ctx, ormtest.Envelope(t, "o-1"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !hooked {
		t.Error("ent's commit hook did not run")
	}
	if ev := h.Await(t); ev.AggregateID() != "o-1" {
		t.Fatalf("delivered %s", ev.AggregateID())
	}
	if _, ok := outboxent.From[*ent.Tx](ctx); ok {
		t.Error("From found a transaction in a context without one")
	}
}

// A client on a plain entsql driver cannot carry events: Do says how to
// build it, and begins nothing that stays open.
func TestDoRefusesClientWithoutDriver(t *testing.T) {
	db := ormtest.Open(t, "sqlite")
	openEnt(t, db) // the orders table
	plain := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.SQLite, db.SQL)))
	ctx := context.Background()
	called := false
	err := outboxent.Do(ctx, plain.Tx, func(ctx context.Context, tx *ent.Tx) error { called = true; return nil })
	if !errors.Is(err, core.ErrInvalid) || called {
		t.Fatalf("Do on a plain client = %v (fn called: %v), want ErrInvalid", err, called)
	}
	t.Log(err)
	// The refused transaction was rolled back: SQLite's one connection is free.
	if err := plain.Order.Create().SetID("o-1").Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := outboxent.NewDriver(nil, outboxent.Config{}); !errors.Is(err, core.ErrInvalid) {
		t.Fatalf("NewDriver(nil) = %v", err)
	}
	if err := outboxent.Do[*ent.Tx](ctx, nil, nil); !errors.Is(err, core.ErrInvalid) {
		t.Fatalf("Do(nil) = %v", err)
	}
}
