// Package ormtest is the suite every ORM integration (contrib/gorm,
// contrib/bun, contrib/ent) passes: on a database of its own for each test
// (a fresh SQLite file, PostgreSQL schema or MySQL database, dropped after),
// an event written in the ORM's transaction is delivered through the hot path
// only after COMMIT, a rollback writes nothing and delivers nothing, and so
// does a COMMIT that the database refuses; on PostgreSQL (a pool of
// store/postgres's Open), the INSERT of an event whose id the library
// generated is sent with the COMMIT.
//
// Environment: OUTBOX_POSTGRES_DSN, OUTBOX_MYSQL_DSN and OUTBOX_REQUIRE_DBS,
// as for package testdb.
package ormtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/roundtrips"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/poller"
	"github.com/outboxkit/outbox/store"
	"github.com/outboxkit/outbox/store/mysql"
	"github.com/outboxkit/outbox/store/postgres"
	"github.com/outboxkit/outbox/store/sqlite"
)

// DB is a database of one test's own: nothing else uses its tables, so an
// ORM's fixed table names ("orders") are safe.
type DB struct {
	Dialect string  // "sqlite", "postgres" or "mysql"
	SQL     *sql.DB // pool on the database, closed when the test ends
	// Store manages an outbox table in the database, already created.
	Store store.SchemaManager
	// Trips records the round trips of SQL's connections (PostgreSQL
	// only: SQL is a pool of store/postgres's Open, with pgx's tracer).
	Trips *roundtrips.Recorder
}

// Adapter is an ORM integration set up on a DB. The business table is
// "orders", with a string primary key "id"; the adapter creates it.
type Adapter struct {
	// Do runs body in a transaction begun through the integration, and
	// returns its result. body's context carries the transaction
	// (core.TxFromContext); insert writes one order with the ORM in it.
	Do func(ctx context.Context, body func(ctx context.Context, insert func(id string) error) error) error
}

// Event types of the suite.
var (
	Order       = core.AggregateName("Order")
	OrderPlaced = core.EventName("OrderPlaced")
)

// Envelope returns an OrderPlaced event of order id.
func Envelope(t testing.TB, id string) core.Envelope {
	t.Helper()
	env, err := core.NewEnvelope(core.EnvelopeSpec{
		Type: OrderPlaced, AggregateType: Order, AggregateID: id, JSON: []byte(`{"id":"` + id + `"}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// Run runs the suite on every dialect; setup returns the integration on a
// test's database.
func Run(t *testing.T, setup func(t *testing.T, db DB) Adapter) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Run("HotPathAfterCommit", func(t *testing.T) { hotPath(t, Open(t, dialect), setup) })
			t.Run("RollbackWritesNothing", func(t *testing.T) { rollback(t, Open(t, dialect), setup) })
			t.Run("FailedCommitWritesNothing", func(t *testing.T) { failedCommit(t, Open(t, dialect), setup) })
			if dialect == "postgres" {
				t.Run("WriteGoesWithCommit", func(t *testing.T) { withCommit(t, Open(t, dialect), setup) })
			}
		})
	}
}

// Harness is an outbox on a DB whose poller never polls on its own (an
// hour's interval, no LISTEN): whatever its listener gets came through the
// hot path.
type Harness struct {
	Outbox    *outbox.Outbox
	Delivered chan core.Event
	calls     atomic.Int64
}

// Calls returns how many times the listener ran.
func (h *Harness) Calls() int64 { return h.calls.Load() }

// NewHarness starts an outbox on db whose listener for OrderPlaced first
// checks, on the pool, that the event's order is committed (visible), then
// sends the event to Delivered. It is closed when the test ends.
func NewHarness(t testing.TB, db DB) *Harness {
	t.Helper()
	h := &Harness{Delivered: make(chan core.Event, 16)}
	reg := core.NewRegistry()
	err := reg.RegisterFunc(Order, OrderPlaced, func(ctx context.Context, ev core.Event) error {
		h.calls.Add(1)
		if n, err := CountWhere(ctx, db, ev.AggregateID()); err != nil || n != 1 {
			t.Errorf("listener of %s: its order is not committed yet (%d rows, %v)", ev.AggregateID(), n, err)
		}
		h.Delivered <- ev
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.New(outbox.Config{
		DB: db.SQL, Store: db.Store, Registry: reg,
		Poller: poller.Config{Interval: time.Hour, BusyInterval: time.Hour, NoWatch: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.Outbox = ob
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// Close stops the outbox; once it returns, no listener runs any more.
func (h *Harness) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return h.Outbox.Close(ctx)
}

// Await returns the next delivered event, or fails the test after 10 s.
func (h *Harness) Await(t testing.TB) core.Event {
	t.Helper()
	select {
	case ev := <-h.Delivered:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event delivered through the hot path within 10 s")
		return core.Event{}
	}
}

// AwaitPolled runs poll cycles until an event is delivered, and returns it;
// it fails the test after 10 s. One cycle is not always enough: the
// poller's loop makes its first claim as the outbox starts, and on a loaded
// machine that claim can run beside the test's. It may take the event (a
// cycle of the test's then finds none), or, on MariaDB, neither takes it: a
// SKIP LOCKED claim passes a row the other claim's index scan holds for a
// moment, though that claim does not take it (it was committed after the
// claim's time). The loop's next claim is an hour away.
func (h *Harness) AwaitPolled(t testing.TB) core.Event {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		if _, err := h.Outbox.Poller().PollOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-h.Delivered:
			return ev
		case <-tick.C:
		case <-deadline:
			t.Fatal("no event delivered through the poller within 10 s")
			return core.Event{}
		}
	}
}

func hotPath(t *testing.T, db DB, setup func(*testing.T, DB) Adapter) {
	a := setup(t, db)
	h := NewHarness(t, db)
	ctx := context.Background()
	err := a.Do(ctx, func(ctx context.Context, insert func(string) error) error {
		if err := insert("o-1"); err != nil {
			return err
		}
		_, err := h.Outbox.Writer().Write(ctx, Envelope(t, "o-1"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if ev := h.Await(t); ev.AggregateID() != "o-1" {
		t.Fatalf("delivered %s, want o-1", ev.AggregateID())
	}
	if n := CountEvents(t, db); n != 1 {
		t.Fatalf("outbox rows = %d, want 1", n)
	}
}

// withCommit checks that, on a pool of store/postgres's Open, the INSERT
// of an event whose id the library generated is sent with the COMMIT of
// the ORM's transaction (one round trip fewer), and that both rows are
// committed.
func withCommit(t *testing.T, db DB, setup func(*testing.T, DB) Adapter) {
	a := setup(t, db)
	// One connection: the statements pgx prepares on their first run (a
	// round trip the recorder does not see) are prepared by the first Do.
	db.SQL.SetMaxOpenConns(1)
	w, err := core.NewWriter(core.WriterConfig{Store: db.Store, NoNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	run := func(id string) error {
		return a.Do(ctx, func(ctx context.Context, insert func(string) error) error {
			if err := insert(id); err != nil {
				return err
			}
			_, err := w.Write(ctx, Envelope(t, id))
			return err
		})
	}
	if err := run("o-4"); err != nil {
		t.Fatal(err)
	}
	db.Trips.Start()
	err = run("o-5")
	sent := db.Trips.Stop()
	if err != nil {
		t.Fatal(err)
	}
	insert := `insert into "` + strings.ToLower(db.Store.Table()) + `"`
	for i, s := range sent {
		last := i == len(sent)-1
		if held := strings.HasPrefix(s, insert) && strings.HasSuffix(s, " + commit"); held != last || !last && strings.Contains(s, insert) {
			t.Fatalf("round trips %q: want the outbox INSERT sent with COMMIT, in the last one", sent)
		}
	}
	if len(sent) == 0 {
		t.Fatal("no round trip recorded")
	}
	if n := CountEvents(t, db); n != 2 {
		t.Errorf("outbox rows = %d, want 2", n)
	}
	if n, err := CountWhere(ctx, db, "o-5"); err != nil || n != 1 {
		t.Errorf("order o-5: %d rows (%v), want 1", n, err)
	}
}

var errBusiness = errors.New("business rule failed")

func rollback(t *testing.T, db DB, setup func(*testing.T, DB) Adapter) {
	a := setup(t, db)
	h := NewHarness(t, db)
	ctx := context.Background()
	err := a.Do(ctx, func(ctx context.Context, insert func(string) error) error {
		if err := insert("o-2"); err != nil {
			return err
		}
		if _, err := h.Outbox.Writer().Write(ctx, Envelope(t, "o-2")); err != nil {
			return err
		}
		return errBusiness
	})
	if !errors.Is(err, errBusiness) {
		t.Fatalf("Do = %v, want the function's error", err)
	}
	assertNothing(t, db, h)
}

func failedCommit(t *testing.T, db DB, setup func(*testing.T, DB) Adapter) {
	a := setup(t, db)
	breakCommit := commitBreaker(t, db)
	h := NewHarness(t, db)
	ctx := context.Background()
	err := a.Do(ctx, func(ctx context.Context, insert func(string) error) error {
		if err := insert("o-3"); err != nil {
			return err
		}
		if _, err := h.Outbox.Writer().Write(ctx, Envelope(t, "o-3")); err != nil {
			return err
		}
		return breakCommit(ctx)
	})
	if err == nil {
		t.Fatal("Do returned nil; the database refused the COMMIT")
	}
	t.Logf("Do: %v", err)
	assertNothing(t, db, h)
}

// assertNothing checks that no order and no event exist, and that the
// listener never ran: after Close no listener runs, and the queues are
// drained, so nothing can come later.
func assertNothing(t *testing.T, db DB, h *Harness) {
	t.Helper()
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if n := CountEvents(t, db); n != 0 {
		t.Errorf("outbox rows = %d, want 0", n)
	}
	if n, err := CountWhere(context.Background(), db, ""); err != nil || n != 0 {
		t.Errorf("orders = %d (%v), want 0", n, err)
	}
	if c := h.Calls(); c != 0 {
		t.Errorf("listener ran %d times, want 0", c)
	}
}

// commitBreaker prepares what makes the COMMIT of a transaction fail and
// returns the function that arms it inside the transaction ctx carries:
// PostgreSQL checks a deferred unique constraint at COMMIT, SQLite a
// deferred foreign key; MySQL has neither, so its session is killed from
// another connection before the COMMIT.
func commitBreaker(t testing.TB, db DB) func(ctx context.Context) error {
	t.Helper()
	ctx := context.Background()
	exec := func(q string) {
		if _, err := db.SQL.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	inTx := func(ctx context.Context) core.Tx {
		tx, ok := core.TxFromContext(ctx)
		if !ok {
			t.Fatal("the integration's context carries no core.Tx")
		}
		return tx
	}
	switch db.Dialect {
	case "postgres":
		exec("CREATE TABLE trap (id INT, CONSTRAINT trap_once UNIQUE (id) DEFERRABLE INITIALLY DEFERRED)")
		return func(ctx context.Context) error {
			_, err := inTx(ctx).ExecContext(ctx, "INSERT INTO trap (id) VALUES (1), (1)")
			return err
		}
	case "sqlite":
		exec("CREATE TABLE trap_parent (id INTEGER PRIMARY KEY)")
		exec("CREATE TABLE trap (parent INTEGER REFERENCES trap_parent (id) DEFERRABLE INITIALLY DEFERRED)")
		return func(ctx context.Context) error {
			_, err := inTx(ctx).ExecContext(ctx, "INSERT INTO trap (parent) VALUES (42)")
			return err
		}
	default:
		return func(ctx context.Context) error {
			var id int64
			if err := inTx(ctx).QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
				return err
			}
			_, err := db.SQL.ExecContext(ctx, fmt.Sprintf("KILL %d", id))
			return err
		}
	}
}

// CountEvents returns the rows of the outbox table.
func CountEvents(t testing.TB, db DB) int {
	t.Helper()
	var n int
	if err := db.SQL.QueryRow("SELECT count(*) FROM " + db.Store.Table()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// CountWhere returns the orders with id, or all orders when id is "".
func CountWhere(ctx context.Context, db DB, id string) (int, error) {
	q, args := "SELECT count(*) FROM orders", []any{}
	if id != "" {
		q += " WHERE id = " + map[bool]string{true: "$1", false: "?"}[db.Dialect == "postgres"]
		args = append(args, id)
	}
	var n int
	err := db.SQL.QueryRowContext(ctx, q, args...).Scan(&n)
	return n, err
}

// Open returns a database of the test's own on dialect, with a fresh outbox
// table, or skips the test (fails under OUTBOX_REQUIRE_DBS=1) when the
// server is not configured.
func Open(t testing.TB, dialect string) DB {
	t.Helper()
	var db DB
	switch dialect {
	case "sqlite":
		sqlDB, err := sqlite.Open(filepath.Join(t.TempDir(), "app.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sqlDB.Close() })
		st, err := sqlite.New(sqlite.Config{Table: testdb.UniqueName("outbox")})
		if err != nil {
			t.Fatal(err)
		}
		db = DB{Dialect: dialect, SQL: sqlDB, Store: st}
	case "postgres":
		db = openPostgres(t)
	case "mysql":
		db = openMySQL(t)
	default:
		t.Fatalf("ormtest: unknown dialect %q", dialect)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := db.Store.CreateSchema(ctx, db.SQL); err != nil {
		t.Fatalf("ormtest: create outbox table: %v", err)
	}
	return db
}

func serverDSN(t testing.TB, env, example string) string {
	t.Helper()
	dsn := os.Getenv(env)
	if dsn == "" {
		skipOrFail(t, "set %s=%s to run", env, example)
	}
	return dsn
}

func skipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if testdb.Required() {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// admin opens a pool for creating and dropping the test's schema or
// database, skipping when the server does not answer.
func admin(t testing.TB, env, dsn string, open func(string) (*sql.DB, error)) *sql.DB {
	t.Helper()
	db, err := open(dsn)
	if err != nil {
		t.Fatalf("ormtest: %s: %v", env, err)
	}
	db.SetMaxOpenConns(2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		skipOrFail(t, "server of %s unreachable: %v", env, err)
	}
	return db
}

func openPostgres(t testing.TB) DB {
	t.Helper()
	dsn := serverDSN(t, testdb.PostgresEnv, "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	adm := admin(t, testdb.PostgresEnv, dsn, postgres.Open)
	schema := testdb.UniqueName("orm")
	if _, err := adm.Exec("CREATE SCHEMA " + schema); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("ormtest: %s: %v", testdb.PostgresEnv, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	cfg, err := pgx.ParseConfig(u.String())
	if err != nil {
		t.Fatalf("ormtest: %s: %v", testdb.PostgresEnv, err)
	}
	trips := &roundtrips.Recorder{}
	cfg.Tracer = trips
	sqlDB := postgres.OpenDB(*cfg)
	sqlDB.SetMaxOpenConns(4)
	t.Cleanup(func() {
		_ = sqlDB.Close()
		if _, err := adm.Exec("DROP SCHEMA " + schema + " CASCADE"); err != nil {
			t.Errorf("ormtest: drop schema %s: %v", schema, err)
		}
		_ = adm.Close()
	})
	st, err := postgres.New(postgres.Config{Table: testdb.UniqueName("outbox")})
	if err != nil {
		t.Fatal(err)
	}
	return DB{Dialect: "postgres", SQL: sqlDB, Store: st, Trips: trips}
}

func openMySQL(t testing.TB) DB {
	t.Helper()
	dsn := serverDSN(t, testdb.MySQLEnv, "root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC")
	adm := admin(t, testdb.MySQLEnv, dsn, mysql.Open)
	name := testdb.UniqueName("orm")
	if _, err := adm.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	cfg, err := mysqldrv.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("ormtest: %s: %v", testdb.MySQLEnv, err)
	}
	cfg.DBName = name
	sqlDB, err := mysql.Open(cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	sqlDB.SetMaxOpenConns(4)
	t.Cleanup(func() {
		_ = sqlDB.Close()
		if _, err := adm.Exec("DROP DATABASE " + name); err != nil {
			t.Errorf("ormtest: drop database %s: %v", name, err)
		}
		_ = adm.Close()
	})
	st, err := mysql.New(mysql.Config{Table: testdb.UniqueName("outbox")})
	if err != nil {
		t.Fatal(err)
	}
	return DB{Dialect: "mysql", SQL: sqlDB, Store: st}
}
