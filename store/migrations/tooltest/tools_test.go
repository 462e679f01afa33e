package tooltest_test

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	migratemysql "github.com/golang-migrate/migrate/v4/database/mysql"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	migratesqlite "github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/pressly/goose/v3"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/catalog"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store/migrations"
	"github.com/outboxkit/outbox/store/mysql"
	"github.com/outboxkit/outbox/store/postgres"
	"github.com/outboxkit/outbox/store/sqlite"
)

// store is what every store of the outbox module is.
type store interface {
	testdb.Store
	migrations.Source
}

// tool is one migration tool driven over an fs.FS of migrations, with a
// version table of its own.
type tool struct {
	name string
	// dir is the directory of the tool's files under each dialect's
	// migrations/.
	dir string
	// render gives the tool's layout for a store's table.
	render func(migrations.Source) (fs.FS, error)
	// open returns a runner of fsys on db, keeping versions in
	// versionTable.
	open func(t *testing.T, dialect string, db *sql.DB, fsys fs.FS, versionTable string) runner
}

// runner applies a set of migrations.
type runner interface {
	up(ctx context.Context) error
	downAll(ctx context.Context) error
	version(ctx context.Context) (int64, error)
}

var tools = []tool{
	{name: "goose", dir: "goose", render: migrations.Goose, open: openGoose},
	{name: "golang-migrate", dir: "golang-migrate", render: migrations.GolangMigrate, open: openGolangMigrate},
}

var gooseDialects = map[string]goose.Dialect{
	"postgres": goose.DialectPostgres,
	"mysql":    goose.DialectMySQL,
	"sqlite":   goose.DialectSQLite3,
}

type gooseRunner struct{ p *goose.Provider }

func openGoose(t *testing.T, dialect string, db *sql.DB, fsys fs.FS, versionTable string) runner {
	t.Helper()
	p, err := goose.NewProvider(gooseDialects[dialect], db, fsys, goose.WithTableName(versionTable))
	if err != nil {
		t.Fatalf("goose: %v", err)
	}
	return gooseRunner{p}
}

func (g gooseRunner) up(ctx context.Context) error {
	_, err := g.p.Up(ctx)
	return err
}

func (g gooseRunner) downAll(ctx context.Context) error {
	_, err := g.p.DownTo(ctx, 0)
	return err
}

func (g gooseRunner) version(ctx context.Context) (int64, error) { return g.p.GetDBVersion(ctx) }

type migrateRunner struct{ m *migrate.Migrate }

// openGolangMigrate runs golang-migrate on a pool of its own: closing its
// driver closes the pool it was given.
func openGolangMigrate(t *testing.T, dialect string, db *sql.DB, fsys fs.FS, versionTable string) runner {
	t.Helper()
	src, err := iofs.New(fsys, ".")
	if err != nil {
		t.Fatalf("golang-migrate source: %v", err)
	}
	var drv database.Driver
	switch dialect {
	case "postgres":
		drv, err = migratepgx.WithInstance(db, &migratepgx.Config{MigrationsTable: versionTable})
	case "mysql":
		drv, err = migratemysql.WithInstance(db, &migratemysql.Config{MigrationsTable: versionTable})
	case "sqlite":
		drv, err = migratesqlite.WithInstance(db, &migratesqlite.Config{MigrationsTable: versionTable})
	}
	if err != nil {
		t.Fatalf("golang-migrate %s driver: %v", dialect, err)
	}
	m, err := migrate.NewWithInstance("iofs", src, dialect, drv)
	if err != nil {
		t.Fatalf("golang-migrate: %v", err)
	}
	t.Cleanup(func() { _, _ = m.Close() })
	return migrateRunner{m}
}

func (r migrateRunner) up(context.Context) error {
	if err := r.m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return err
	}
	return nil
}

func (r migrateRunner) downAll(context.Context) error {
	if err := r.m.Down(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return err
	}
	return nil
}

func (r migrateRunner) version(context.Context) (int64, error) {
	v, dirty, err := r.m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, nil
	}
	if dirty {
		return int64(v), errors.New("golang-migrate: dirty version")
	}
	return int64(v), err
}

// isolated is a database of its own on a dialect's server, where the files
// on disk, which name the default table outbox_event, can run without
// meeting another test's table.
type isolated struct {
	dialect string
	// open returns a new pool on the isolated database, closed when the
	// test ends.
	open func(t *testing.T) *sql.DB
}

// newIsolated makes a PostgreSQL schema or a MySQL database of its own
// (dropped when the test ends), or a new SQLite file.
func newIsolated(t *testing.T, dialect string) isolated {
	t.Helper()
	tg := testdb.Open(t, dialect) // skips without the server
	name := testdb.UniqueName("migtool")
	var dsn func() string
	var openDSN func(string) (*sql.DB, error)
	switch dialect {
	case "sqlite":
		path := filepath.Join(t.TempDir(), "isolated.db")
		return isolated{dialect, func(t *testing.T) *sql.DB { return opened(t, sqlite.Open, path) }}
	case "postgres":
		exec(t, tg.DB, "CREATE SCHEMA "+name)
		t.Cleanup(func() { exec(t, tg.DB, "DROP SCHEMA "+name+" CASCADE") })
		base := os.Getenv(testdb.PostgresEnv)
		dsn = func() string { return base + sep(base) + "search_path=" + name }
		openDSN = postgres.Open
	case "mysql":
		exec(t, tg.DB, "CREATE DATABASE "+name)
		t.Cleanup(func() { exec(t, tg.DB, "DROP DATABASE "+name) })
		cfg, err := mysqldrv.ParseDSN(os.Getenv(testdb.MySQLEnv))
		if err != nil {
			t.Fatal(err)
		}
		cfg.DBName = name
		// golang-migrate runs a file as one Exec: more than one statement
		// in a file needs multiStatements.
		cfg.MultiStatements = true
		dsn = cfg.FormatDSN
		openDSN = mysql.Open
	}
	return isolated{dialect, func(t *testing.T) *sql.DB { return opened(t, openDSN, dsn()) }}
}

// toolDB returns a pool on tg's database for a migration tool. On MySQL it
// has multiStatements: golang-migrate runs a file as one Exec.
func toolDB(t *testing.T, tg testdb.Target, dialect string) *sql.DB {
	t.Helper()
	if dialect != "mysql" {
		return tg.Reopen(t)
	}
	cfg, err := mysqldrv.ParseDSN(os.Getenv(testdb.MySQLEnv))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MultiStatements = true
	return opened(t, mysql.Open, cfg.FormatDSN())
}

func sep(dsn string) string {
	if strings.Contains(dsn, "?") {
		return "&"
	}
	return "?"
}

func opened(t *testing.T, open func(string) (*sql.DB, error), dsn string) *sql.DB {
	t.Helper()
	db, err := open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(4)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func exec(t *testing.T, db *sql.DB, q string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func newStore(t *testing.T, dialect, table string) store {
	t.Helper()
	var (
		st  store
		err error
	)
	switch dialect {
	case "postgres":
		st, err = postgres.New(postgres.Config{Table: table})
	case "mysql":
		st, err = mysql.New(mysql.Config{Table: table})
	case "sqlite":
		st, err = sqlite.New(sqlite.Config{Table: table})
	}
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func catalogOf(t *testing.T, db *sql.DB, dialect, table string) []string {
	t.Helper()
	lines, err := catalog.Of(context.Background(), db, dialect, table)
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// createSchemaCatalog returns the catalog of a table CreateSchema makes on
// db, under a name of its own (dropped again).
func createSchemaCatalog(t *testing.T, db *sql.DB, dialect string) []string {
	t.Helper()
	ctx := context.Background()
	ref := newStore(t, dialect, testdb.UniqueName("ref"))
	if err := ref.CreateSchema(ctx, db); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := testdb.DropTable(ctx, db, ref); err != nil {
			t.Error(err)
		}
	}()
	return catalogOf(t, db, dialect, ref.Table())
}

func forEachToolAndDialect(t *testing.T, fn func(t *testing.T, tl tool, dialect string)) {
	for _, tl := range tools {
		t.Run(tl.name, func(t *testing.T) {
			t.Parallel()
			for _, dialect := range testdb.Dialects {
				t.Run(dialect, func(t *testing.T) {
					t.Parallel()
					fn(t, tl, dialect)
				})
			}
		})
	}
}

// upDownUp runs the tool's migrations up, checks the table against
// CreateSchema's, down to nothing, checks the table is gone, and up again.
func upDownUp(t *testing.T, r runner, db *sql.DB, dialect, table string, want []string, latest int64) {
	t.Helper()
	ctx := context.Background()
	if err := r.up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	if v, err := r.version(ctx); err != nil || v != latest {
		t.Fatalf("version after up: %d, %v; want %d", v, err, latest)
	}
	if got := catalogOf(t, db, dialect, table); !slices.Equal(got, want) {
		t.Fatalf("migrated table differs from CreateSchema's:\n%s", catalog.Diff(want, got))
	}
	if err := r.downAll(ctx); err != nil {
		t.Fatalf("down: %v", err)
	}
	if v, err := r.version(ctx); err != nil || v != 0 {
		t.Fatalf("version after down: %d, %v; want 0", v, err)
	}
	if got := catalogOf(t, db, dialect, table); len(got) != 0 {
		t.Fatalf("table still there after down:\n%s", strings.Join(got, "\n"))
	}
	if err := r.up(ctx); err != nil {
		t.Fatalf("up after down: %v", err)
	}
	if got := catalogOf(t, db, dialect, table); !slices.Equal(got, want) {
		t.Fatalf("re-migrated table differs from CreateSchema's:\n%s", catalog.Diff(want, got))
	}
}

// TestFilesOnDisk: each tool applies the files in the repository, as they
// are, for the default table, up, down and up again, to a database of its
// own on each server; the table is the one CreateSchema makes.
func TestFilesOnDisk(t *testing.T) {
	forEachToolAndDialect(t, func(t *testing.T, tl tool, dialect string) {
		iso := newIsolated(t, dialect)
		db := iso.open(t)
		want := createSchemaCatalog(t, db, dialect)
		dir := filepath.Join("..", "..", dialect, "migrations", tl.dir)
		latest := int64(len(newStore(t, dialect, "").Migrations()))
		r := tl.open(t, dialect, iso.open(t), os.DirFS(dir), testdb.UniqueName("version"))
		upDownUp(t, r, db, dialect, "outbox_event", want, latest)
	})
}

// TestCustomTable: each tool applies the migrations rendered for another
// table name (migrations.Goose, migrations.GolangMigrate), on the shared
// test databases, with a version table of its own.
func TestCustomTable(t *testing.T) {
	forEachToolAndDialect(t, func(t *testing.T, tl tool, dialect string) {
		tg := testdb.Open(t, dialect)
		st := newStore(t, dialect, testdb.UniqueName("custom"))
		versionTable := testdb.UniqueName("version")
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := testdb.DropTable(ctx, tg.DB, st); err != nil {
				t.Error(err)
			}
			exec(t, tg.DB, "DROP TABLE IF EXISTS "+versionTable)
		})
		fsys, err := tl.render(st)
		if err != nil {
			t.Fatal(err)
		}
		want := catalogOf(t, tg.DB, dialect, tg.Table) // testdb made it with CreateSchema
		r := tl.open(t, dialect, toolDB(t, tg, dialect), fsys, versionTable)
		upDownUp(t, r, tg.DB, dialect, st.Table(), want, int64(len(st.Migrations())))
	})
}

// TestShippedTableComesUnderControl: each tool adopts a table the first
// released schema made (0001, what CreateSchema made before versioned
// migrations), holding an event: it applies the later versions, the event
// stays, and the table ends as CreateSchema makes it today.
func TestShippedTableComesUnderControl(t *testing.T) {
	forEachToolAndDialect(t, func(t *testing.T, tl tool, dialect string) {
		ctx := context.Background()
		tg := testdb.Open(t, dialect)
		versionTable := testdb.UniqueName("version")
		st := newStore(t, dialect, testdb.UniqueName("shipped"))
		t.Cleanup(func() {
			exec(t, tg.DB, "DROP TABLE IF EXISTS "+versionTable)
			if err := testdb.DropTable(context.Background(), tg.DB, st); err != nil {
				t.Error(err)
			}
		})
		if err := testdb.CreateShippedSchema(ctx, tg.DB, st); err != nil {
			t.Fatal(err)
		}
		if err := testdb.InsertShippedRow(ctx, tg.DB, dialect, st.Table(), "shipped-1"); err != nil {
			t.Fatal(err)
		}
		fsys, err := tl.render(st)
		if err != nil {
			t.Fatal(err)
		}
		r := tl.open(t, dialect, toolDB(t, tg, dialect), fsys, versionTable)
		if err := r.up(ctx); err != nil {
			t.Fatalf("up over the shipped table: %v", err)
		}
		if v, err := r.version(ctx); err != nil || v != int64(len(st.Migrations())) {
			t.Fatalf("version: %d, %v", v, err)
		}
		if got, want := catalogOf(t, tg.DB, dialect, st.Table()), createSchemaCatalog(t, tg.DB, dialect); !slices.Equal(got, want) {
			t.Fatalf("after up the table differs from CreateSchema's:\n%s", catalog.Diff(want, got))
		}
		ev, err := st.Get(ctx, tg.DB, "shipped-1")
		if err != nil || ev.Status != core.StatusNew {
			t.Fatalf("event after up: %+v, %v", ev, err)
		}
	})
}
