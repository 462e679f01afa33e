package outboxgorm_test

import (
	"context"
	"errors"
	"testing"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	outboxgorm "github.com/outboxkit/outbox/contrib/gorm"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/ormtest"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
)

type order struct {
	ID string `gorm:"primaryKey;size:64"`
}

func (order) TableName() string { return "orders" }

// openGorm returns a *gorm.DB over db's pool, with the orders table.
func openGorm(t testing.TB, db ormtest.DB, cfg gorm.Config) *gorm.DB {
	t.Helper()
	return openGormOn(t, db, db.SQL, cfg)
}

// openGormOn returns a *gorm.DB of db's dialect on conn, with the orders
// table.
func openGormOn(t testing.TB, db ormtest.DB, conn gorm.ConnPool, cfg gorm.Config) *gorm.DB {
	t.Helper()
	var d gorm.Dialector
	switch db.Dialect {
	case "postgres":
		d = postgres.New(postgres.Config{Conn: conn})
	case "mysql":
		d = mysql.New(mysql.Config{Conn: conn})
	default:
		// GORM's SQLite dialector on the outbox's pure-Go SQLite pool.
		d = &sqlite.Dialector{DriverName: "sqlite", Conn: conn}
	}
	cfg.Logger = logger.Default.LogMode(logger.Silent)
	gdb, err := gorm.Open(d, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := gdb.AutoMigrate(&order{}); err != nil {
		t.Fatal(err)
	}
	return gdb
}

func TestSuite(t *testing.T) {
	ormtest.Run(t, func(t *testing.T, db ormtest.DB) ormtest.Adapter {
		txm, err := outboxgorm.New(openGorm(t, db, gorm.Config{}), outboxgorm.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return ormtest.Adapter{
			Do: func(ctx context.Context, body func(context.Context, func(string) error) error) error {
				return txm.Do(ctx, func(ctx context.Context, tx *gorm.DB) error {
					return body(ctx, func(id string) error { return tx.Create(&order{ID: id}).Error })
				})
			},
		}
	})
}

// With PrepareStmt, Do's session keeps GORM's prepared statements.
func TestSuitePreparedStatements(t *testing.T) {
	ormtest.Run(t, func(t *testing.T, db ormtest.DB) ormtest.Adapter {
		txm, err := outboxgorm.New(openGorm(t, db, gorm.Config{PrepareStmt: true}), outboxgorm.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return ormtest.Adapter{
			Do: func(ctx context.Context, body func(context.Context, func(string) error) error) error {
				return txm.Do(ctx, func(ctx context.Context, tx *gorm.DB) error {
					if _, ok := tx.Statement.ConnPool.(*gorm.PreparedStmtTX); !ok {
						t.Errorf("session pool is %T, want *gorm.PreparedStmtTX", tx.Statement.ConnPool)
					}
					return body(ctx, func(id string) error { return tx.Create(&order{ID: id}).Error })
				})
			},
		}
	})
}

// outbox.Outbox.Do and Manager.Do join each other's transaction; Tx gives
// the GORM session to code that has only the context.
func TestJoinsOutboxDo(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			db := ormtest.Open(t, dialect)
			gdb := openGorm(t, db, gorm.Config{})
			h := ormtest.NewHarness(t, db)
			txm, err := outboxgorm.New(gdb, outboxgorm.Config{})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			err = h.Outbox.Do(ctx, func(ctx context.Context) error {
				tx, ok := outboxgorm.Tx(ctx, gdb)
				if !ok {
					t.Fatal("Tx found no transaction in Outbox.Do's context")
				}
				if err := tx.Create(&order{ID: "o-1"}).Error; err != nil {
					return err
				}
				return txm.Do(ctx, func(ctx context.Context, inner *gorm.DB) error {
					if inner.Statement.ConnPool != tx.Statement.ConnPool {
						t.Error("Manager.Do began a transaction of its own inside Outbox.Do")
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
			if _, ok := outboxgorm.Tx(ctx, gdb); ok {
				t.Error("Tx found a transaction in a context without one")
			}
			// A transaction on another database is not gdb's.
			other := ormtest.Open(t, "sqlite")
			err = h.Outbox.Do(ctx, func(ctx context.Context) error {
				if _, ok := outboxgorm.Tx(ctx, openGorm(t, other, gorm.Config{})); ok {
					t.Error("Tx bound a session of another database to the transaction")
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// In GORM's own transaction, DBTX gives WriteTx the transaction; the event
// commits or rolls back with it, and the poller delivers it.
func TestDBTXInGormTransaction(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			db := ormtest.Open(t, dialect)
			gdb := openGorm(t, db, gorm.Config{})
			h := ormtest.NewHarness(t, db)
			w := h.Outbox.Writer()
			ctx := context.Background()
			boom := errors.New("boom")
			err := gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				dbtx, err := outboxgorm.DBTX(tx)
				if err != nil {
					return err
				}
				if err := tx.Create(&order{ID: "o-1"}).Error; err != nil {
					return err
				}
				if _, err := w.WriteTx(ctx, dbtx, ormtest.Envelope(t, "o-1")); err != nil {
					return err
				}
				return boom
			})
			if !errors.Is(err, boom) {
				t.Fatalf("Transaction = %v", err)
			}
			if n := ormtest.CountEvents(t, db); n != 0 {
				t.Fatalf("rolled back: outbox rows = %d", n)
			}
			err = gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				dbtx, err := outboxgorm.DBTX(tx)
				if err != nil {
					return err
				}
				if err := tx.Create(&order{ID: "o-2"}).Error; err != nil {
					return err
				}
				_, err = w.WriteTx(ctx, dbtx, ormtest.Envelope(t, "o-2"))
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			// Not leased by the hot path: the poller claims it.
			if ev := h.AwaitPolled(t); ev.AggregateID() != "o-2" {
				t.Fatalf("delivered %s", ev.AggregateID())
			}
			if _, err := outboxgorm.DBTX(gdb); !errors.Is(err, core.ErrNoTransaction) {
				t.Fatalf("DBTX(pool) = %v, want ErrNoTransaction", err)
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := outboxgorm.New(nil, outboxgorm.Config{}); !errors.Is(err, core.ErrInvalid) {
		t.Fatalf("New(nil) = %v, want ErrInvalid", err)
	}
	gdb := openGorm(t, ormtest.Open(t, "sqlite"), gorm.Config{})
	tx := gdb.Begin()
	defer tx.Rollback()
	if _, err := outboxgorm.New(tx, outboxgorm.Config{}); !errors.Is(err, core.ErrInvalid) {
		t.Fatalf("New(transaction) = %v, want ErrInvalid", err)
	}
	txm, err := outboxgorm.New(gdb, outboxgorm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := txm.Do(context.Background(), nil); !errors.Is(err, core.ErrInvalid) {
		t.Fatalf("Do(nil) = %v, want ErrInvalid", err)
	}
	if txm.TxManager() == nil {
		t.Fatal("TxManager is nil")
	}
}

// GORM's own transactions on a Pool carry events with the hot path: DBTX
// returns a core.Tx, and WriteTx on it is delivered after COMMIT.
func TestSuiteGormTransactionOnPool(t *testing.T) {
	for _, prepare := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "PrepareStmt"}[prepare], func(t *testing.T) {
			ormtest.Run(t, func(t *testing.T, db ormtest.DB) ormtest.Adapter {
				gdb := openGormOn(t, db, outboxgorm.Pool(db.SQL, outboxgorm.Config{}), gorm.Config{PrepareStmt: prepare})
				if sqlDB, err := gdb.DB(); err != nil || sqlDB != db.SQL {
					t.Fatalf("gorm.DB.DB() on a Pool = %v, %v; want the *sql.DB", sqlDB, err)
				}
				return ormtest.Adapter{
					Do: func(ctx context.Context, body func(context.Context, func(string) error) error) error {
						return gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
							dbtx, err := outboxgorm.DBTX(tx)
							if err != nil {
								return err
							}
							ctx, ok := txContext(ctx, dbtx)
							if !ok {
								t.Fatalf("DBTX on a Pool is a %T, not a core.Tx", dbtx)
							}
							return body(ctx, func(id string) error { return tx.Create(&order{ID: id}).Error })
						})
					},
				}
			})
		})
	}
}

// txContext carries dbtx in ctx when it is a core.Tx, so that the suite's
// Write finds it (application code passes dbtx to WriteTx instead).
func txContext(ctx context.Context, dbtx core.DBTX) (context.Context, bool) {
	tx, ok := dbtx.(core.Tx)
	if !ok {
		return ctx, false
	}
	return core.ContextWithTx(ctx, tx), true
}
