package outboxbun_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/dialect/sqlitedialect"
	"github.com/uptrace/bun/schema"

	outboxbun "github.com/outboxkit/outbox/contrib/bun"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/ormtest"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
)

type order struct {
	bun.BaseModel `bun:"table:orders"`
	ID            string `bun:"id,pk,type:varchar(64)"`
}

// openBun returns a bun.DB over db's pool, with the orders table.
func openBun(t testing.TB, db ormtest.DB) *bun.DB {
	t.Helper()
	var d schema.Dialect
	switch db.Dialect {
	case "postgres":
		d = pgdialect.New()
	case "mysql":
		d = mysqldialect.New()
	default:
		d = sqlitedialect.New()
	}
	bdb := bun.NewDB(db.SQL, d)
	if _, err := bdb.NewCreateTable().Model((*order)(nil)).Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	return bdb
}

func TestSuite(t *testing.T) {
	ormtest.Run(t, func(t *testing.T, db ormtest.DB) ormtest.Adapter {
		bdb := openBun(t, db)
		txm, err := outboxbun.New(bdb, outboxbun.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return ormtest.Adapter{
			Do: func(ctx context.Context, body func(context.Context, func(string) error) error) error {
				return txm.Do(ctx, func(ctx context.Context, tx bun.Tx) error {
					return body(ctx, func(id string) error {
						_, err := tx.NewInsert().Model(&order{ID: id}).Exec(ctx)
						return err
					})
				})
			},
		}
	})
}

// The trap: a bun.Tx has ExecContext and friends, so it compiles as
// WriteTx's argument, but Bun's formatter drops the outbox's arguments.
// WriteTx refuses it at once and says what to pass; tx.Tx works.
func TestWriteTxRefusesBunHandles(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			db := ormtest.Open(t, dialect)
			bdb := openBun(t, db)
			h := ormtest.NewHarness(t, db)
			w := h.Outbox.Writer()
			ctx := context.Background()

			err := bdb.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				_, err := w.WriteTx(ctx, tx, ormtest.Envelope(t, "o-1"))
				if !errors.Is(err, core.ErrInvalid) || !strings.Contains(err.Error(), "bunTx.Tx") {
					t.Errorf("WriteTx(bun.Tx) = %v, want an ErrInvalid naming bunTx.Tx", err)
				}
				if _, err := w.WriteTx(ctx, &tx, ormtest.Envelope(t, "o-2")); !errors.Is(err, core.ErrInvalid) {
					t.Errorf("WriteTx(*bun.Tx) = %v, want ErrInvalid", err)
				}
				if _, err := w.WriteTx(ctx, bdb, ormtest.Envelope(t, "o-3")); !errors.Is(err, core.ErrNoTransaction) {
					t.Errorf("WriteTx(*bun.DB) = %v, want ErrNoTransaction", err)
				}
				var n int
				if err := tx.Tx.QueryRowContext(ctx, "SELECT count(*) FROM "+db.Store.Table()).Scan(&n); err != nil || n != 0 {
					t.Errorf("refused writes left %d rows in the transaction (%v)", n, err)
				}
				// What the error says to pass: the *sql.Tx under Bun's. (Its
				// order too, which the harness's listener checks for if a
				// poll delivers the event.)
				if _, err := tx.NewInsert().Model(&order{ID: "o-4"}).Exec(ctx); err != nil {
					return err
				}
				_, err = w.WriteTx(ctx, tx.Tx, ormtest.Envelope(t, "o-4"))
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if n := ormtest.CountEvents(t, db); n != 1 {
				t.Fatalf("outbox rows = %d, want 1 (the tx.Tx write)", n)
			}
		})
	}
}

// Do inside Do joins the outer transaction: one COMMIT, and the inner
// function's event is delivered only after it.
func TestDoJoins(t *testing.T) {
	db := ormtest.Open(t, "sqlite")
	bdb := openBun(t, db)
	h := ormtest.NewHarness(t, db)
	txm, err := outboxbun.New(bdb, outboxbun.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	err = txm.Do(ctx, func(ctx context.Context, outer bun.Tx) error {
		return txm.Do(ctx, func(ctx context.Context, inner bun.Tx) error {
			if inner.Tx != outer.Tx {
				t.Error("the inner Do began a transaction of its own")
			}
			if got, ok := outboxbun.From(ctx); !ok || got.Tx != inner.Tx {
				t.Error("From does not return the transaction")
			}
			if _, err := inner.NewInsert().Model(&order{ID: "o-1"}).Exec(ctx); err != nil {
				return err
			}
			_, err := h.Outbox.Writer().Write(ctx, ormtest.Envelope(t, "o-1"))
			return err
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if ev := h.Await(t); ev.AggregateID() != "o-1" {
		t.Fatalf("delivered %s", ev.AggregateID())
	}
	if _, ok := outboxbun.From(ctx); ok {
		t.Error("From found a transaction in a context without one")
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := outboxbun.New(nil, outboxbun.Config{}); !errors.Is(err, core.ErrInvalid) {
		t.Fatalf("New(nil) = %v, want ErrInvalid", err)
	}
	db := ormtest.Open(t, "sqlite")
	txm, err := outboxbun.New(bun.NewDB(db.SQL, sqlitedialect.New()), outboxbun.Config{TxOptions: &sql.TxOptions{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := txm.Do(context.Background(), nil); !errors.Is(err, core.ErrInvalid) {
		t.Fatalf("Do(nil) = %v, want ErrInvalid", err)
	}
}
