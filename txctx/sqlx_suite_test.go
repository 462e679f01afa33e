package txctx_test

import (
	"context"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/outboxkit/outbox/internal/testsupport/ormtest"
	"github.com/outboxkit/outbox/txctx"
)

// sqlx through txctx passes the suite of the ORM integrations on every
// database: hot path after COMMIT, nothing after a rollback or a failed
// COMMIT.
func TestSqlxSuite(t *testing.T) {
	drivers := map[string]string{"sqlite": "sqlite", "postgres": "pgx", "mysql": "mysql"}
	ormtest.Run(t, func(t *testing.T, db ormtest.DB) ormtest.Adapter {
		xdb := sqlx.NewDb(db.SQL, drivers[db.Dialect])
		if _, err := xdb.Exec("CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		txm, err := txctx.New(xdb, txctx.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return ormtest.Adapter{
			Do: func(ctx context.Context, body func(context.Context, func(string) error) error) error {
				return txm.Do(ctx, func(ctx context.Context) error {
					tx, _ := txctx.From(ctx)
					return body(ctx, func(id string) error {
						_, err := tx.Sqlx().NamedExecContext(ctx, "INSERT INTO orders (id) VALUES (:id)", map[string]any{"id": id})
						return err
					})
				})
			},
		}
	})
}
