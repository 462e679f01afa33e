package migrations

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/config"
)

// Config configures a Migrator.
type Config struct {
	// DB is the database of the outbox table. Required.
	DB *sql.DB
	// Source gives the migrations and the table: the outbox store
	// (*postgres.Store, *mysql.Store or *sqlite.Store). Required.
	Source Source
	// VersionTable is the table that records the applied versions. Default:
	// the outbox table's name followed by "_migration" (shortened with a
	// hash beyond 63 characters), in the outbox table's schema. It must
	// match ^[A-Za-z_][A-Za-z0-9_]{0,62}$, optionally schema-qualified. It
	// is written into SQL unquoted, so PostgreSQL folds it to lower case.
	VersionTable string
	// LockRetry is how long Up and Down wait between attempts to take the
	// migration lock while another process holds it (PostgreSQL and MySQL;
	// SQLite serialises writers itself). Default 500 ms. They wait until ctx
	// ends.
	LockRetry time.Duration
	// Now returns the time recorded with each applied version. Default
	// time.Now.
	Now func() time.Time
}

// Migrator applies the versioned migrations of one outbox table and records
// them in a version table of its own: one row per applied version
// (version, name, applied_at as RFC 3339 text in UTC). It is what outboxctl
// migrate runs; goose and golang-migrate users let their tool do the same
// with Goose and GolangMigrate.
//
// Each migration runs in a transaction with the insert (or delete) of its
// version row. On PostgreSQL and SQLite a failed migration leaves nothing
// behind; MySQL commits each DDL statement on its own, so a migration that
// fails half way there leaves its first statements applied and its version
// unrecorded, and must be finished by hand. On PostgreSQL and MySQL, Up and
// Down hold a named lock of the outbox table while they run, so that two
// processes deploying at once apply each migration once.
type Migrator struct {
	db        *sql.DB
	src       Source
	all       []Migration
	table     string // the version table, as written into SQL
	lockRetry time.Duration
	now       func() time.Time
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// New validates cfg and returns a Migrator. A missing DB or Source, a bad
// version table name or migrations not numbered 1, 2, 3, ... return an error
// matching core.ErrInvalid. New does not touch the database.
func New(cfg Config) (*Migrator, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.withDefaults()
	all, err := checked(cfg.Source)
	if err != nil {
		return nil, core.Invalid("migrations", "%v", err)
	}
	return &Migrator{db: cfg.DB, src: cfg.Source, all: all, table: cfg.VersionTable,
		lockRetry: cfg.LockRetry, now: cfg.Now}, nil
}

func (c *Config) validate() error {
	switch {
	case c.DB == nil:
		return core.Invalid("migrator db", "is nil")
	case c.Source == nil:
		return core.Invalid("migrator source", "is nil")
	case c.LockRetry < 0:
		return core.Invalid("migrator lock retry", "%s is negative", c.LockRetry)
	}
	if c.VersionTable != "" {
		for _, part := range strings.SplitN(c.VersionTable, ".", 2) {
			if !identRE.MatchString(part) {
				return core.Invalid("version table", "%q must match %s (optionally schema-qualified)", c.VersionTable, identRE)
			}
		}
	}
	return nil
}

func (c *Config) withDefaults() {
	if c.VersionTable == "" {
		c.VersionTable = DefaultVersionTable(c.Source.Table())
	}
	if c.LockRetry == 0 {
		c.LockRetry = 500 * time.Millisecond
	}
	c.Now = config.Clock(c.Now)
}

// DefaultVersionTable returns the version table of the outbox table table
// ("schema.name" or "name"): name_migration in the same schema, shortened
// with a hash when it would be longer than 63 characters.
func DefaultVersionTable(table string) string {
	schema, name, qualified := strings.Cut(table, ".")
	if !qualified {
		schema, name = "", table
	}
	const suffix = "_migration"
	vt := name + suffix
	if len(vt) > 63 {
		h := fnv.New32a()
		h.Write([]byte(name))
		vt = fmt.Sprintf("%s_%08x%s", name[:63-len(suffix)-9], h.Sum32(), suffix)
	}
	if qualified {
		return schema + "." + vt
	}
	return vt
}

// VersionTable returns the table the Migrator records versions in.
func (m *Migrator) VersionTable() string { return m.table }

// Applied is one row of the version table.
type Applied struct {
	Version   int64
	Name      string
	AppliedAt time.Time
}

// Status is where a table stands.
type Status struct {
	// Table is the outbox table; VersionTable records its versions.
	Table, VersionTable string
	// Current is the highest applied version, 0 when none is.
	Current int64
	// Latest is the highest version the Source knows.
	Latest int64
	// Applied are the recorded versions, oldest first.
	Applied []Applied
	// Pending are the Source's migrations above Current, oldest first.
	Pending []Migration
}

// Status reads the version table (a missing one means nothing applied)
// and returns where the table stands. It changes nothing.
func (m *Migrator) Status(ctx context.Context) (Status, error) {
	applied, err := m.applied(ctx, m.db, false)
	if err != nil {
		return Status{}, err
	}
	return m.status(applied), nil
}

func (m *Migrator) status(applied []Applied) Status {
	st := Status{Table: m.src.Table(), VersionTable: m.table, Applied: applied, Latest: int64(len(m.all))}
	if len(applied) > 0 {
		st.Current = applied[len(applied)-1].Version
	}
	for _, mg := range m.all {
		if mg.Version > st.Current {
			st.Pending = append(st.Pending, mg)
		}
	}
	return st
}

// ErrNewerSchema is returned by Up and Down when the version table records
// a version this program does not know: the table was migrated by a newer
// release.
var ErrNewerSchema = errors.New("outbox migrations: the database has a newer schema than this program knows")

// Up applies the migrations above the current version up to and including
// version to (0: the latest), oldest first, and returns those it applied. A
// table made by CreateSchema before any migration ran is brought under
// control by 0001, which changes nothing on it. Up returns an error matching
// ErrNewerSchema when the database is ahead of the Source, and one matching
// core.ErrInvalid for a target outside 0..Latest or below the current
// version (use Down for that). The migrations applied before an error stay
// applied.
func (m *Migrator) Up(ctx context.Context, to int64) ([]Migration, error) {
	if to == 0 {
		to = int64(len(m.all))
	}
	if to < 0 || to > int64(len(m.all)) {
		return nil, core.Invalid("migration target", "version %d: the migrations run 1 to %d", to, len(m.all))
	}
	var done []Migration
	err := m.locked(ctx, func(cur int64) error {
		if to < cur {
			return core.Invalid("migration target", "version %d is below the current version %d; use Down", to, cur)
		}
		for _, mg := range m.all[cur:to] {
			insert := fmt.Sprintf("INSERT INTO %s (version, name, applied_at) VALUES (%d, '%s', '%s')",
				m.table, mg.Version, mg.Name, m.now().UTC().Format(time.RFC3339Nano))
			if err := m.apply(ctx, mg, mg.Up, insert, "up"); err != nil {
				return err
			}
			done = append(done, mg)
		}
		return nil
	})
	return done, err
}

// Down reverts the applied migrations above version to, newest first, and
// returns those it reverted. Down to 0 reverts 0001 too, which drops the
// table and every event in it. It returns an error matching ErrNewerSchema
// when the database is ahead of the Source, and one matching core.ErrInvalid
// for a negative target. The migrations reverted before an error stay
// reverted.
func (m *Migrator) Down(ctx context.Context, to int64) ([]Migration, error) {
	if to < 0 {
		return nil, core.Invalid("migration target", "version %d is negative", to)
	}
	var done []Migration
	err := m.locked(ctx, func(cur int64) error {
		for v := cur; v > to; v-- {
			mg := m.all[v-1]
			del := fmt.Sprintf("DELETE FROM %s WHERE version = %d", m.table, mg.Version)
			if err := m.apply(ctx, mg, mg.Down, del, "down"); err != nil {
				return err
			}
			done = append(done, mg)
		}
		return nil
	})
	return done, err
}

// apply runs script and record (the version row's change) in one
// transaction.
func (m *Migrator) apply(ctx context.Context, mg Migration, script, record, direction string) (err error) {
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migration %s %s: %w", mg.FileName(), direction, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	exists, _ := m.src.(ExistsReporter)
	for _, stmt := range Statements(script) {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			if direction == "up" && exists != nil && exists.AlreadyExists(err) {
				continue // CreateSchema made it: the database has no IF NOT EXISTS for it
			}
			return fmt.Errorf("migration %s %s: %w", mg.FileName(), direction, err)
		}
	}
	if _, err := tx.ExecContext(ctx, record); err != nil {
		return fmt.Errorf("migration %s %s: record version: %w", mg.FileName(), direction, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migration %s %s: commit: %w", mg.FileName(), direction, err)
	}
	return nil
}

// locked runs fn with the current version while holding the store's named
// lock "migrate" when the store has named locks, after creating the version
// table if it is missing.
func (m *Migrator) locked(ctx context.Context, fn func(current int64) error) error {
	if locker, ok := m.src.(core.Locker); ok {
		lock, err := m.lock(ctx, locker)
		if err != nil {
			return err
		}
		defer func() { _ = lock.Unlock(context.WithoutCancel(ctx)) }()
	}
	if _, err := m.db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+m.table+
		" (version BIGINT NOT NULL PRIMARY KEY, name VARCHAR(128) NOT NULL, applied_at VARCHAR(40) NOT NULL)"); err != nil {
		return fmt.Errorf("create version table %s: %w", m.table, err)
	}
	applied, err := m.applied(ctx, m.db, true)
	if err != nil {
		return err
	}
	return fn(m.status(applied).Current)
}

func (m *Migrator) lock(ctx context.Context, locker core.Locker) (core.Lock, error) {
	for {
		lock, ok, err := locker.TryLock(ctx, m.db, "migrate")
		if err != nil {
			return nil, fmt.Errorf("migration lock: %w", err)
		}
		if ok {
			return lock, nil
		}
		t := time.NewTimer(m.lockRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("migration lock: another process is migrating %s: %w", m.src.Table(), ctx.Err())
		case <-t.C:
		}
	}
}

// applied returns the rows of the version table, oldest first, after
// checking that they are versions 1..n of the Source's migrations. A
// missing table is no rows unless exists says it was just created.
func (m *Migrator) applied(ctx context.Context, db *sql.DB, exists bool) ([]Applied, error) {
	if !exists {
		ok, err := m.versionTableExists(ctx, db)
		if err != nil || !ok {
			return nil, err
		}
	}
	rows, err := db.QueryContext(ctx, "SELECT version, name, applied_at FROM "+m.table+" ORDER BY version")
	if err != nil {
		return nil, fmt.Errorf("read version table %s: %w", m.table, err)
	}
	defer rows.Close()
	var out []Applied
	for rows.Next() {
		var a Applied
		var at string
		if err := rows.Scan(&a.Version, &a.Name, &at); err != nil {
			return nil, fmt.Errorf("read version table %s: %w", m.table, err)
		}
		a.AppliedAt, _ = time.Parse(time.RFC3339Nano, at) // zero if someone wrote another format
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read version table %s: %w", m.table, err)
	}
	for i, a := range out {
		if a.Version > int64(len(m.all)) {
			return nil, fmt.Errorf("%w: %s records version %d (%s), this program knows 1 to %d",
				ErrNewerSchema, m.table, a.Version, a.Name, len(m.all))
		}
		if a.Version != int64(i+1) {
			return nil, fmt.Errorf("version table %s: version %d is recorded without version %d", m.table, a.Version, i+1)
		}
	}
	return out, nil
}

// versionTableExists probes the version table with a query that reads no
// row: the three databases name their catalogs differently, and every one
// fails a SELECT from a missing table.
func (m *Migrator) versionTableExists(ctx context.Context, db *sql.DB) (bool, error) {
	probe := func(q string) error {
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			return err
		}
		return rows.Close()
	}
	if err := probe("SELECT version FROM " + m.table + " WHERE 1 = 0"); err != nil {
		// Tell a missing table from a dead connection: if the database
		// answers a trivial query, the table is what is missing.
		if perr := probe("SELECT 1"); perr != nil {
			return false, fmt.Errorf("read version table %s: %w", m.table, perr)
		}
		return false, nil
	}
	return true, nil
}
