package storetest_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/store/sqlite"
	"github.com/outboxkit/outbox/store/storetest"
)

// TestRunAsAUser runs the suite through its public API only, as the user of
// a store of their own would: here SQLite, one database file per test.
func TestRunAsAUser(t *testing.T) {
	var n atomic.Int64
	storetest.Run(t, storetest.Config{
		NewTarget: func(t testing.TB) storetest.Target {
			path := filepath.Join(t.TempDir(), "outbox.db")
			open := func(t testing.TB) *sql.DB {
				db, err := sqlite.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = db.Close() })
				return db
			}
			db := open(t)
			table := fmt.Sprintf("outbox_t%d", n.Add(1))
			st, err := sqlite.New(sqlite.Config{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.CreateSchema(context.Background(), db); err != nil {
				t.Fatal(err)
			}
			// The ordered checks run on a store of the same table that
			// orders storetest.Ordering's aggregate types.
			ordered, err := sqlite.New(sqlite.Config{Table: table, Ordered: storetest.Ordering})
			if err != nil {
				t.Fatal(err)
			}
			return storetest.Target{DB: db, Store: st, Table: st.Table(), Reopen: open, Ordered: ordered}
		},
		NewStore: func(table string) (core.Store, error) { return sqlite.New(sqlite.Config{Table: table}) },
	})
}
