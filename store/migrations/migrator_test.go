package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/catalog"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store/migrations"
	"github.com/outboxkit/outbox/store/mysql"
	"github.com/outboxkit/outbox/store/postgres"
	"github.com/outboxkit/outbox/store/sqlite"
)

// freshStore returns a store of tg's dialect on a table that does not exist
// yet; the table and its version table are dropped when the test ends.
func freshStore(t *testing.T, tg testdb.Target) store {
	t.Helper()
	st, err := tg.NewStore(testdb.UniqueName("mig"))
	if err != nil {
		t.Fatal(err)
	}
	dropAfter(t, tg.DB, st)
	return st.(store)
}

// store is what every store of this module is.
type store interface {
	testdb.Store
	migrations.Source
}

// dropAfter drops st's table and its default version table when the test
// ends.
func dropAfter(t *testing.T, db *sql.DB, st testdb.Store) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := testdb.DropTable(ctx, db, st); err != nil {
			t.Errorf("drop %s: %v", st.Table(), err)
		}
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+migrations.DefaultVersionTable(st.Table())); err != nil {
			t.Errorf("drop version table: %v", err)
		}
	})
}

func newMigrator(t *testing.T, db *sql.DB, src migrations.Source) *migrations.Migrator {
	t.Helper()
	m, err := migrations.New(migrations.Config{DB: db, Source: src, LockRetry: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func catalogOf(t *testing.T, tg testdb.Target, table string) []string {
	t.Helper()
	lines, err := catalog.Of(context.Background(), tg.DB, tg.Name, table)
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// TestUpMatchesCreateSchema: every migration applied makes the table
// CreateSchema makes (columns, types, defaults, collations, indexes), Down
// to 0 removes it, and Up again rebuilds it.
func TestUpMatchesCreateSchema(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		ctx := context.Background()
		st := freshStore(t, tg)
		m := newMigrator(t, tg.DB, st)
		want := catalogOf(t, tg, tg.Table) // made by CreateSchema

		before, err := m.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if before.Current != 0 || len(before.Pending) != len(st.Migrations()) || before.Latest < 1 {
			t.Fatalf("status before Up: %+v", before)
		}
		applied, err := m.Up(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(applied) != len(st.Migrations()) {
			t.Fatalf("Up applied %d migrations, want %d", len(applied), len(st.Migrations()))
		}
		if got := catalogOf(t, tg, st.Table()); !slices.Equal(got, want) {
			t.Fatalf("migrated table differs from CreateSchema's:\n%s", catalog.Diff(want, got))
		}
		after, err := m.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if after.Current != after.Latest || len(after.Pending) != 0 || len(after.Applied) != len(applied) ||
			after.Applied[0].Name != "create_table" || after.Applied[0].AppliedAt.IsZero() {
			t.Fatalf("status after Up: %+v", after)
		}
		if again, err := m.Up(ctx, 0); err != nil || len(again) != 0 {
			t.Fatalf("second Up: applied %d, err %v; want nothing", len(again), err)
		}

		reverted, err := m.Down(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(reverted) != len(applied) || reverted[0].Version != after.Latest {
			t.Fatalf("Down reverted %v", reverted)
		}
		if got := catalogOf(t, tg, st.Table()); len(got) != 0 {
			t.Fatalf("table still there after Down to 0:\n%s", strings.Join(got, "\n"))
		}
		if _, err := m.Up(ctx, 0); err != nil {
			t.Fatalf("Up after Down: %v", err)
		}
		if got := catalogOf(t, tg, st.Table()); !slices.Equal(got, want) {
			t.Fatalf("re-migrated table differs from CreateSchema's:\n%s", catalog.Diff(want, got))
		}
	})
}

// TestUpMatchesCreateSchemaMySQLUpdateLimit: with ClaimUpdateLimit the
// migrations make the lease read-back index CreateSchema adds.
func TestUpMatchesCreateSchemaMySQLUpdateLimit(t *testing.T) {
	t.Parallel()
	tg := testdb.MySQLWith(mysql.Config{Claim: mysql.ClaimUpdateLimit})(t)
	st := freshStore(t, tg)
	if _, err := newMigrator(t, tg.DB, st).Up(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	want, got := catalogOf(t, tg, tg.Table), catalogOf(t, tg, st.Table())
	if !slices.Equal(got, want) {
		t.Fatalf("migrated table differs from CreateSchema's:\n%s", catalog.Diff(want, got))
	}
	if !slices.ContainsFunc(got, func(l string) bool { return strings.Contains(l, "T_lease") }) {
		t.Fatalf("no lease index:\n%s", strings.Join(got, "\n"))
	}
}

// TestShippedTableComesUnderControl: a table the first released schema
// made (0001, what CreateSchema made before versioned migrations), with an
// event in it, is adopted by Up: the later versions are applied, the event
// stays, and the table ends as CreateSchema makes it today.
func TestShippedTableComesUnderControl(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		ctx := context.Background()
		st := freshStore(t, tg)
		if err := testdb.CreateShippedSchema(ctx, tg.DB, st); err != nil {
			t.Fatal(err)
		}
		if err := testdb.InsertShippedRow(ctx, tg.DB, tg.Name, st.Table(), "shipped-1"); err != nil {
			t.Fatal(err)
		}
		m := newMigrator(t, tg.DB, st)
		if _, err := m.Up(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if got, want := catalogOf(t, tg, st.Table()), catalogOf(t, tg, tg.Table); !slices.Equal(got, want) {
			t.Fatalf("after Up the table differs from CreateSchema's:\n%s", catalog.Diff(want, got))
		}
		status, err := m.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if status.Current != status.Latest {
			t.Fatalf("status after Up: %+v", status)
		}
		ev, err := st.Get(ctx, tg.DB, "shipped-1")
		if err != nil || ev.Status != core.StatusNew || ev.Seq != 0 {
			t.Fatalf("event after Up: %+v, %v", ev, err)
		}
	})
}

// TestCreateSchemaTableComesUnderControl: a table this release's
// CreateSchema made (the latest version), with an event in it, is adopted
// by Up without a change: on MySQL and SQLite, whose ADD COLUMN has no IF
// NOT EXISTS, because the stores report "already exists".
func TestCreateSchemaTableComesUnderControl(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		ctx := context.Background()
		dropAfter(t, tg.DB, tg.Store) // the version table; the table is testdb's
		env, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("Kept"), JSON: []byte(`{"n":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		if err := tg.Store.Insert(ctx, tg.DB, []core.Envelope{env}, core.InsertOptions{}); err != nil {
			t.Fatal(err)
		}
		before := catalogOf(t, tg, tg.Table)
		m := newMigrator(t, tg.DB, tg.Store.(migrations.Source))
		if _, err := m.Up(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if got := catalogOf(t, tg, tg.Table); !slices.Equal(got, before) {
			t.Fatalf("Up changed a table CreateSchema made:\n%s", catalog.Diff(before, got))
		}
		if st, err := m.Status(ctx); err != nil || st.Current != st.Latest {
			t.Fatalf("status after Up: %+v, %v", st, err)
		}
		if ev, err := tg.Store.Get(ctx, tg.DB, env.ID()); err != nil || string(ev.Payload()) != `{"n":1}` {
			t.Fatalf("event after Up: %v, %v", ev, err)
		}
	})
}

// TestNewerSchemaRefused: a version table recording a version this program
// does not know stops Up and Down before they change anything.
func TestNewerSchemaRefused(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		ctx := context.Background()
		st := freshStore(t, tg)
		m := newMigrator(t, tg.DB, st)
		if _, err := m.Up(ctx, 0); err != nil {
			t.Fatal(err)
		}
		future := int64(len(st.Migrations()) + 1)
		if _, err := tg.DB.ExecContext(ctx, fmt.Sprintf("INSERT INTO %s (version, name, applied_at) VALUES (%d, 'from_the_future', 'x')",
			m.VersionTable(), future)); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Up(ctx, 0); !errors.Is(err, migrations.ErrNewerSchema) {
			t.Fatalf("Up: %v, want ErrNewerSchema", err)
		}
		if _, err := m.Down(ctx, 0); !errors.Is(err, migrations.ErrNewerSchema) {
			t.Fatalf("Down: %v, want ErrNewerSchema", err)
		}
		if _, err := m.Status(ctx); !errors.Is(err, migrations.ErrNewerSchema) {
			t.Fatalf("Status: %v, want ErrNewerSchema", err)
		}
		if got := catalogOf(t, tg, st.Table()); len(got) == 0 {
			t.Fatal("the table is gone")
		}
	})
}

// TestConcurrentUp: two processes deploying at once apply each migration
// once; the second finds the work done (the named lock on PostgreSQL and
// MySQL, the version row's primary key at worst on SQLite).
func TestConcurrentUp(t *testing.T) {
	for _, name := range []string{"postgres", "mysql"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tg := testdb.Open(t, name)
			st := freshStore(t, tg)
			dbs := []*sql.DB{tg.DB, tg.Reopen(t)}
			applied := make([][]migrations.Migration, len(dbs))
			errs := make([]error, len(dbs))
			var wg sync.WaitGroup
			for i, db := range dbs {
				m := newMigrator(t, db, st)
				wg.Go(func() { applied[i], errs[i] = m.Up(context.Background(), 0) })
			}
			wg.Wait()
			total := 0
			for i := range dbs {
				if errs[i] != nil {
					t.Fatalf("migrator %d: %v", i, errs[i])
				}
				total += len(applied[i])
			}
			if total != len(st.Migrations()) {
				t.Fatalf("the two migrators applied %d migrations together, want %d", total, len(st.Migrations()))
			}
		})
	}
}

// TestNewValidates: bad configuration is refused before any SQL runs.
func TestNewValidates(t *testing.T) {
	st, err := sqlite.New(sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	db := &sql.DB{} // never used: New does not touch the database
	for _, tc := range []struct {
		name string
		cfg  migrations.Config
	}{
		{"no db", migrations.Config{Source: st}},
		{"no source", migrations.Config{DB: db}},
		{"bad version table", migrations.Config{DB: db, Source: st, VersionTable: "v; DROP TABLE x"}},
		{"negative lock retry", migrations.Config{DB: db, Source: st, LockRetry: -time.Second}},
		{"gap in versions", migrations.Config{DB: db, Source: fakeSource{{Version: 2, Name: "x", Up: "SELECT 1;\n", Down: "SELECT 1;\n"}}}},
		{"bad name", migrations.Config{DB: db, Source: fakeSource{{Version: 1, Name: "Bad Name", Up: "SELECT 1;\n", Down: "SELECT 1;\n"}}}},
		{"no down", migrations.Config{DB: db, Source: fakeSource{{Version: 1, Name: "x", Up: "SELECT 1;\n"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := migrations.New(tc.cfg); !errors.Is(err, core.ErrInvalid) {
				t.Fatalf("New: %v, want core.ErrInvalid", err)
			}
		})
	}
}

type fakeSource []migrations.Migration

func (f fakeSource) Table() string                      { return "fake" }
func (f fakeSource) Migrations() []migrations.Migration { return f }

func TestDefaultVersionTable(t *testing.T) {
	long := strings.Repeat("a", 60)
	for _, tc := range []struct{ table, want string }{
		{"outbox_event", "outbox_event_migration"},
		{"app.outbox_event", "app.outbox_event_migration"},
	} {
		if got := migrations.DefaultVersionTable(tc.table); got != tc.want {
			t.Errorf("DefaultVersionTable(%q) = %q, want %q", tc.table, got, tc.want)
		}
	}
	got := migrations.DefaultVersionTable(long)
	if len(got) > 63 || !strings.HasSuffix(got, "_migration") || got == migrations.DefaultVersionTable(long[:59]+"b") {
		t.Errorf("DefaultVersionTable of a 60-character name = %q", got)
	}
}

// TestRenderedFS: the tool layouts render the store's own table and index
// names, and are well-behaved file systems.
func TestRenderedFS(t *testing.T) {
	pg, err := postgres.New(postgres.Config{Table: "app.orders_outbox"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		render func(migrations.Source) (fs.FS, error)
		files  []string
	}{
		{migrations.Goose, []string{"0001_create_table.sql"}},
		{migrations.GolangMigrate, []string{"0001_create_table.down.sql", "0001_create_table.up.sql"}},
	} {
		fsys, err := tc.render(pg)
		if err != nil {
			t.Fatal(err)
		}
		if err := fstest.TestFS(fsys, tc.files...); err != nil {
			t.Fatal(err)
		}
		for _, name := range tc.files {
			b, err := fs.ReadFile(fsys, name)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), `"app"."orders_outbox"`) || strings.Contains(string(b), "outbox_event") {
				t.Errorf("%s does not name the store's table only:\n%s", name, b)
			}
			if strings.HasSuffix(name, ".up.sql") || strings.HasSuffix(name, "table.sql") {
				if !strings.Contains(string(b), `"orders_outbox_pending"`) {
					t.Errorf("%s lacks the index named after the table:\n%s", name, b)
				}
			}
		}
	}
	if _, err := migrations.Goose(fakeSource{{Version: 1, Name: "x", Up: "SELECT 1;\n"}}); err == nil {
		t.Error("Goose rendered a migration without down")
	}
}
