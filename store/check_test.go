package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store"
	"github.com/outboxkit/outbox/store/migrations"
	"github.com/outboxkit/outbox/store/mysql"
	"github.com/outboxkit/outbox/store/postgres"
)

// TestCheckSchema: each store tells a ready table from a missing one, one
// at an older schema version and a table that is not an outbox table, and
// names the table and the ways to create or migrate it.
func TestCheckSchema(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		ctx := context.Background()
		check := func(st testdb.Store) error {
			t.Helper()
			c, ok := core.StoreAs[core.SchemaChecker](st)
			if !ok {
				t.Fatalf("%T is not a core.SchemaChecker", st)
			}
			return c.CheckSchema(ctx, tg.DB)
		}
		newStore := func() testdb.Store {
			t.Helper()
			st, err := tg.NewStore(testdb.UniqueName("outbox_chk"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := testdb.DropTable(context.WithoutCancel(ctx), tg.DB, st); err != nil {
					t.Error(err)
				}
			})
			return st
		}
		schemaErr := func(err error) *core.SchemaError {
			t.Helper()
			var se *core.SchemaError
			if !errors.As(err, &se) || !errors.Is(err, core.ErrSchema) {
				t.Fatalf("err = %v, want a *core.SchemaError matching core.ErrSchema", err)
			}
			return se
		}
		says := func(err error, words ...string) {
			t.Helper()
			for _, w := range words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not say %q", err, w)
				}
			}
		}

		if err := check(tg.Store); err != nil {
			t.Errorf("table made by CreateSchema: %v", err)
		}
		if n := len(tg.Store.(migrations.Source).Migrations()); n != 3 {
			t.Errorf("the store has %d migrations; schemacheck.Version (3) and its probes must follow them", n)
		}

		// No table.
		missing := newStore()
		err := check(missing)
		if se := schemaErr(err); se.Exists || se.Version != 0 || se.Want != 2 || se.Table != missing.Table() {
			t.Errorf("missing table: %+v", se)
		}
		says(err, missing.Table(), "does not exist", "CreateSchema", "outboxctl migrate up", "store/migrations")

		// A table at schema version 1: migration 0001 alone.
		old := newStore()
		m, err := migrations.New(migrations.Config{DB: tg.DB, Source: old.(migrations.Source)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = tg.DB.ExecContext(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+m.VersionTable()) })
		if _, err := m.Up(ctx, 1); err != nil {
			t.Fatal(err)
		}
		err = check(old)
		se := schemaErr(err)
		wantMissing := []string{"column seq", "table " + old.Table() + "_key"}
		if !se.Exists || se.Version != 1 || se.Want != 2 || strings.Join(se.Missing, ",") != strings.Join(wantMissing, ",") {
			t.Errorf("table at version 1: %+v, want missing %q", se, wantMissing)
		}
		says(err, old.Table(), "schema version 1, the store expects 2", "column seq", "outboxctl migrate up", "CreateSchema")
		// outboxctl migrate up (the Migrator) brings it to the version the
		// store expects.
		if _, err := m.Up(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if err := check(old); err != nil {
			t.Errorf("after migrating up: %v", err)
		}

		// A table of that name that is not an outbox table.
		other := newStore()
		if _, err := tg.DB.ExecContext(ctx, "CREATE TABLE "+other.Table()+" (event_id VARCHAR(36), payload TEXT)"); err != nil {
			t.Fatal(err)
		}
		err = check(other)
		if se := schemaErr(err); !se.Exists || se.Version != 0 || len(se.Missing) != 13 || se.Missing[0] != "column event_type" {
			t.Errorf("not an outbox table: %+v", se)
		}
		says(err, other.Table(), "is not an outbox table", "column event_type", "check the table name")
	})
}

// TestCheckSchemaServerDown: a server that does not answer is not a
// missing table: CheckSchema returns the driver's error, which names the
// host and port and not the password.
func TestCheckSchemaServerDown(t *testing.T) {
	t.Parallel()
	pg, err := postgres.New(postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	my, err := mysql.New(mysql.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dsn string
		st  core.SchemaChecker
	}{
		{"postgres://u:s3cret@127.0.0.1:1/db?sslmode=disable&connect_timeout=5", pg},
		{"u:s3cret@tcp(127.0.0.1:1)/db?timeout=5s", my},
	} {
		db, err := store.Open(tc.dsn)
		if err != nil {
			t.Fatal(err)
		}
		err = tc.st.CheckSchema(context.Background(), db)
		_ = db.Close()
		if err == nil || errors.Is(err, core.ErrSchema) || !strings.Contains(err.Error(), "127.0.0.1:1") ||
			strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%T on a closed port: %v; want the driver's error naming 127.0.0.1:1, without the password", tc.st, err)
		}
	}
}
